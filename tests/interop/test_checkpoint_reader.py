"""One reader tells a checkpoint folder's kind (interop/checkpoint_reader.py): plm-finetune and plm-embed
(load_backbone), plm-generate (load_language_model) and continued pretraining (read_starting_point) name the same
kinds when a folder holds none of them, each with its own key."""

import pytest

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.pretrained import load_backbone, load_language_model
from plm_toolkit.training.continued import read_starting_point


def test_every_loader_names_the_same_kinds(tmp_path):
    folder = tmp_path / "notes"
    folder.mkdir()
    (folder / "notes.txt").write_text("not a checkpoint\n")
    refusals = []
    for load in (load_backbone, read_starting_point, load_language_model):
        with pytest.raises(CheckpointError) as refused:
            load(folder)
        refusals.append(str(refused.value))
    kinds = (
        "not a plm-train checkpoint (model.safetensors + config.yaml), a Hugging Face folder (config.json) or a "
        "bilm-tf folder (*options.json + *weights*.hdf5)"
    )
    assert refusals == [f"model.checkpoint={folder}: {kinds}"] * 2 + [f"checkpoint={folder}: {kinds}"]


def test_a_missing_folder_is_named_by_the_key_that_gave_it(tmp_path):
    with pytest.raises(CheckpointError, match=f"^checkpoint={tmp_path / 'absent'}: no such file or directory$"):
        load_language_model(tmp_path / "absent")
    with pytest.raises(CheckpointError, match=f"^model.checkpoint={tmp_path / 'absent'}: no such file or directory$"):
        read_starting_point(tmp_path / "absent")
