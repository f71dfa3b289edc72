"""Every bidirectional family fine-tunes through the same task code: from a plm-train checkpoint and from a
Hugging Face folder, with no per-family head."""

import dataclasses
import json

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file
from tokenizers import Tokenizer
from torch import nn

from plm_toolkit.commands.finetune import run
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.interop.hf import export_hf
from plm_toolkit.interop.pretrained import load_backbone
from tests.training.conftest import read_metrics

from .test_finetune import FAST, SST2, falls

ODD = dict(hidden_size=36, num_layers=2, num_heads=3, intermediate_size=37)
FAMILIES = {
    "roberta": ("bert", dict(ODD, type_vocab_size=1, position_offset=2, pad_token_id=1)),
    "albert": ("albert", dict(ODD, embedding_size=17)),
    "electra": ("electra", dict(ODD, embedding_size=17)),
    "xlnet": ("xlnet", dict(ODD, head_size=12)),
}


def save_family_checkpoint(run_dir, family: str, tokenizer: Tokenizer):
    name, fields = FAMILIES[family]
    config_cls = registry.MODELS.get(name).config_cls
    known = {f.name for f in dataclasses.fields(config_cls)}
    config = config_cls(vocab_size=tokenizer.get_vocab_size(), **{k: v for k, v in fields.items() if k in known})
    torch.manual_seed(0)
    model = registry.MODELS.get(name).builder(config)
    yaml = OmegaConf.to_yaml({"model": OmegaConf.to_container(OmegaConf.structured(config))})
    return ckpt.save_checkpoint(run_dir, 1, model, nn.Module(), {"step": 0}, yaml, tokenizer.to_str(), keep_last=0)


@pytest.mark.slow
@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_sst2_fine_tunes_on_every_family(family, tiny_checkpoint, finetune_config, tmp_path):
    tokenizer = Tokenizer.from_file(str(tiny_checkpoint / "tokenizer.json"))
    pretrained = save_family_checkpoint(tmp_path / "pretrained", family, tokenizer)
    cfg = finetune_config(
        *SST2, *FAST, f"model.checkpoint={pretrained}", "data.max_train_samples=64", "trainer.max_steps=40"
    )
    run(cfg, tmp_path / "run")
    values = [r["loss"] for r in read_metrics(tmp_path / "run") if "lr" in r]
    ok, detail = falls(values, 0.2)
    assert ok, detail
    assert "accuracy" in json.loads((tmp_path / "run" / "eval_results.json").read_text())
    # The head is the shared one, whatever the family.
    assert load_file(tmp_path / "run" / "checkpoints" / "last" / "objective.safetensors").keys() == {
        "head.linear.weight",
        "head.linear.bias",
    }


@pytest.mark.parametrize("family", sorted(FAMILIES))
def test_hugging_face_folder_of_every_family_loads_as_a_backbone(family, tiny_checkpoint, tmp_path):
    tokenizer_file = tiny_checkpoint / "tokenizer.json"
    plm = load_backbone(
        save_family_checkpoint(tmp_path / "pretrained", family, Tokenizer.from_file(str(tokenizer_file)))
    )
    folder = tmp_path / "hf"
    export_hf(folder, plm.model, tokenizer_file=tokenizer_file)
    loaded = load_backbone(folder)
    expected_type = "roberta" if family == "roberta" else FAMILIES[family][0]
    assert loaded.kind == f"hf:{expected_type}"
    ours, theirs = plm.model.state_dict(), loaded.model.state_dict()
    assert ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)
    assert loaded.model.summary_position == ("last" if family == "xlnet" else "first")
