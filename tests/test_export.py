"""plm-export: the run's heads where transformers has them, --backbone-only otherwise; ELMo as bilm-tf's folder;
an export written whole or not at all, replacing only an earlier export."""

import json
import os
import signal
import subprocess
import sys

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.commands.export import MANIFEST_FILE, export_checkpoint, main
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.characters import character_ids
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.data.tokenization.word_vocabulary import train_word_tokenizer
from plm_toolkit.interop import elmo_bilm_tf, hf_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.elmo import Elmo, ElmoConfig
from plm_toolkit.objectives.mlm_sop import MlmSop, MlmSopConfig

from .conftest import save_untrained, tree_digest
from .tasks.conftest import tiny_tokenizer

transformers = pytest.importorskip("transformers")


def bert_with_sop(tmp_path):
    tokenizer = tiny_tokenizer(["the cat sat on the mat", "a dog ran in the park"] * 20, vocab_size=60)
    config = BertConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=36, num_layers=2, num_heads=3)
    model = Bert(config)
    objective = MlmSop(MlmSopConfig(), model, Vocab(config.vocab_size, 0, 1, 2, 3, 4))
    sections = {"model": OmegaConf.structured(config), "objective": OmegaConf.structured(MlmSopConfig())}
    yaml = OmegaConf.to_yaml(OmegaConf.create({k: OmegaConf.to_container(v) for k, v in sections.items()}))
    return ckpt.save_checkpoint(tmp_path, 1, model, objective, {"step": 1}, yaml, tokenizer.to_str(), keep_last=0)


def test_heads_transformers_lacks_are_refused_unless_left_out(tmp_path, capsys):
    checkpoint = bert_with_sop(tmp_path / "run")
    with pytest.raises(CheckpointError, match="sop.head.*--backbone-only exports the model without"):
        export_checkpoint(tmp_path / "run", tmp_path / "hf")
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 1
    assert capsys.readouterr().err.startswith("error: objective state key")
    assert main([str(checkpoint), str(tmp_path / "hf"), "--backbone-only"]) == 0
    assert json.loads((tmp_path / "hf" / "config.json").read_text())["architectures"] == ["BertModel"]
    model = transformers.BertModel.from_pretrained(tmp_path / "hf").eval()
    ours = load_backbone(checkpoint).model.eval()
    ids = torch.randint(5, ours.config.vocab_size, (2, 9))
    with torch.no_grad():
        assert (model(input_ids=ids).last_hidden_state - ours(ids).hidden).abs().max() <= 1e-5


WORDS = ["The", "cat", "sat", "on", "the", "mat", ".", "A", "dog", "ran", "in", "Zürich", "in", "1984", "--", "!"]


@pytest.fixture(scope="module")
def elmo_checkpoint(tmp_path_factory):
    """A plm-train checkpoint of a tiny ELMo (odd sizes, both projections, two layers, clipping, residual) whose
    parameters are all random, with a word vocabulary."""
    pytest.importorskip("h5py")
    torch.manual_seed(0)
    config = ElmoConfig(char_embedding_size=5, filters=[[1, 7], [2, 9]], num_highway=1, hidden_size=13, cell_size=29,
                        num_layers=2, cell_clip=3.0, projection_clip=3.0, residual=True, dropout=0.0)  # fmt: skip
    model = Elmo(config)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.normal_(0, 0.5)
        model.token_encoder.char_embedding.weight[0] = 0  # character id 0 pads
    tokenizer = train_word_tokenizer([" ".join(WORDS)])
    return save_untrained(tmp_path_factory.mktemp("elmo_run"), model, tokenizer, objective="bilm")


@pytest.fixture(scope="module")
def bert_checkpoint(tmp_path_factory):
    return bert_with_sop(tmp_path_factory.mktemp("bert_run"))


def test_elmo_exports_as_bilm_tf_and_loads_back_to_the_same_outputs(elmo_checkpoint, tmp_path):
    out = tmp_path / "elmo"
    assert main([str(elmo_checkpoint), str(out), "--format", "bilm-tf"]) == 0
    assert sorted(os.listdir(out)) == [MANIFEST_FILE, "options.json", "vocab.txt", "weights.hdf5"]
    assert json.loads((out / MANIFEST_FILE).read_text())["files"] == ["options.json", "vocab.txt", "weights.hdf5"]
    ours, back = load_backbone(elmo_checkpoint), load_backbone(out)
    assert back.kind == "bilm_tf" and back.tokenizer.get_vocab() == ours.tokenizer.get_vocab()
    chars = character_ids([["<S>", *WORDS[i : i + 9], "</S>"] for i in range(3)])
    with torch.no_grad():
        expected = ours.model.eval()(chars, output_all_hidden=True)
        got = back.model.eval()(chars, output_all_hidden=True)
    assert len(got.all_hidden) == len(expected.all_hidden) == 3
    for layer, reference in zip(got.all_hidden, expected.all_hidden, strict=True):
        assert (layer - reference).abs().max() <= 1e-5
    assert reference.abs().max() > 0.1  # not a comparison of zeros


def test_bilm_tf_holds_elmo_only_and_hf_names_it_for_elmo(bert_checkpoint, elmo_checkpoint, tmp_path, capsys):
    assert main([str(bert_checkpoint), str(tmp_path / "out"), "--format", "bilm-tf"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        "error: --format bilm-tf holds model=elmo only; this checkpoint is model=bert: export it with --format hf"
    ]
    assert main([str(elmo_checkpoint), str(tmp_path / "out")]) == 1
    assert capsys.readouterr().err.strip().endswith("; --format bilm-tf writes model=elmo")
    assert not (tmp_path / "out").exists()


def export_and_digest(checkpoint, out):
    export_checkpoint(checkpoint, out, backbone_only=True)
    return tree_digest(out.parent)


@pytest.mark.parametrize("interruption", [RuntimeError("disk gone"), KeyboardInterrupt()])
def test_an_interrupted_export_leaves_the_folder_as_it_was(bert_checkpoint, tmp_path, monkeypatch, interruption):
    out = tmp_path / "hf"
    before = export_and_digest(bert_checkpoint, out)

    def fail(tokenizer, folder):
        assert folder.name.startswith(".tmp-") and (folder / "model.safetensors").is_file()  # midway
        raise interruption

    monkeypatch.setattr(hf_tokenizer.ExportedTokenizer, "write", fail)
    with pytest.raises(type(interruption)):
        export_checkpoint(bert_checkpoint, out, backbone_only=True)
    assert tree_digest(tmp_path) == before
    with pytest.raises(type(interruption)):  # a first export interrupted: no folder at all
        export_checkpoint(bert_checkpoint, tmp_path / "new", backbone_only=True)
    assert tree_digest(tmp_path) == before


def test_sigterm_midway_removes_the_temporary_folder(elmo_checkpoint, tmp_path, monkeypatch):
    def terminate(*args, **kwargs):
        os.kill(os.getpid(), signal.SIGTERM)  # the handler raises SystemExit here, between HDF5 datasets

    monkeypatch.setattr(elmo_bilm_tf, "_tf_to_torch_gates", terminate)
    handler = signal.getsignal(signal.SIGTERM)
    with pytest.raises(SystemExit) as stopped:
        main([str(elmo_checkpoint), str(tmp_path / "elmo"), "--format", "bilm-tf"])
    assert stopped.value.code == 128 + signal.SIGTERM
    assert os.listdir(tmp_path) == []
    assert signal.getsignal(signal.SIGTERM) == handler  # plm-export's own handler is gone again


def test_a_later_export_replaces_an_earlier_one_whole(bert_checkpoint, elmo_checkpoint, tmp_path):
    out = tmp_path / "out"
    export_checkpoint(elmo_checkpoint, out, format="bilm-tf")
    export_checkpoint(bert_checkpoint, out, backbone_only=True)
    files = ["config.json", "model.safetensors", "tokenizer.json", "tokenizer_config.json"]  # nothing of the ELMo
    assert sorted(os.listdir(out)) == sorted([*files, MANIFEST_FILE])
    assert json.loads((out / MANIFEST_FILE).read_text())["files"] == files
    assert json.loads((out / "config.json").read_text())["architectures"] == ["BertModel"]
    assert os.listdir(tmp_path) == ["out"]


def test_a_folder_with_other_files_is_refused_untouched(bert_checkpoint, tmp_path, capsys):
    out = tmp_path / "hf"
    out.mkdir()
    (out / "notes.txt").write_text("mine")
    before = tree_digest(tmp_path)
    assert main([str(bert_checkpoint), str(out), "--backbone-only"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {out}: holds files plm-export did not write (notes.txt); give a new or empty folder (plm-export "
        f"replaces only an earlier export, listed in its {MANIFEST_FILE})"
    ]
    assert tree_digest(tmp_path) == before
    (out / "notes.txt").unlink()
    export_checkpoint(bert_checkpoint, out, backbone_only=True)  # an empty folder is taken
    (out / "extra").mkdir()  # an earlier export with something added is not ours to delete either
    before = tree_digest(tmp_path)
    with pytest.raises(CheckpointError, match=r"holds files plm-export did not write \(extra\)"):
        export_checkpoint(bert_checkpoint, out, backbone_only=True)
    assert tree_digest(tmp_path) == before


def test_a_temporary_folder_of_a_killed_export_goes_with_the_next_export(bert_checkpoint, tmp_path):
    finished = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    dead, alive = int(finished.stdout), os.getppid()  # a process that has exited; one that runs (ours' parent)
    for pid in (dead, alive):
        (tmp_path / f".tmp-hf-{pid}").mkdir()
        (tmp_path / f".tmp-hf-{pid}" / "model.safetensors").write_bytes(b"half")
    export_checkpoint(bert_checkpoint, tmp_path / "hf", backbone_only=True)
    assert sorted(os.listdir(tmp_path)) == [f".tmp-hf-{alive}", "hf"]  # a running writer's folder stays


def test_bilm_tf_holds_no_task_head_unless_left_out(elmo_checkpoint, tmp_path, capsys):
    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
    from plm_toolkit.tasks.base import TaskData
    from plm_toolkit.tasks.ner import NerConfig, TokenClassification

    from .conftest import save_finetuned

    loaded = load_backbone(elmo_checkpoint)
    tags = ["O", "B-person", "I-person"]
    task = TokenClassification(
        NerConfig(labels=tags), loaded.model, vocab_from_tokenizer(loaded.tokenizer), TaskData([], None, labels=tags)
    )
    step = save_finetuned(tmp_path / "run", loaded.model, task, loaded.tokenizer)
    assert main([str(tmp_path / "run"), str(tmp_path / "elmo"), "--format", "bilm-tf"]) == 1
    assert capsys.readouterr().err.splitlines() == [
        f"error: {step / ckpt.OBJECTIVE_FILE}: bilm-tf's folder holds the biLM alone, not task=ner's head "
        "(--backbone-only exports the model without the task's head)"
    ]
    assert main([str(tmp_path / "run"), str(tmp_path / "elmo"), "--format", "bilm-tf", "--backbone-only"]) == 0
    assert (tmp_path / "elmo" / "weights.hdf5").is_file()
