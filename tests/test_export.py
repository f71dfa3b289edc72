"""plm-export on encoder checkpoints: the run's heads where transformers has them, --backbone-only otherwise."""

import json

import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import CheckpointError
from plm_toolkit.export import export_checkpoint, main
from plm_toolkit.models.bert import Bert, BertConfig
from plm_toolkit.models.pretrained import load_backbone
from plm_toolkit.objectives.mlm_sop import MlmSop, MlmSopConfig
from plm_toolkit.training import checkpoint as ckpt

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
