"""HFL's Chinese RoBERTa-wwm releases (hfl/chinese-roberta-wwm-ext): BERT's architecture under a RoBERTa name
(config.json model_type "bert", architectures BertForMaskedLM, HFL's extra pooler keys). A tiny random folder
laid out as theirs imports as BERT, with a log line saying so, and gives transformers' hidden states and
tokenizer ids."""

from __future__ import annotations

import json
import logging

import pytest
import torch

from plm_toolkit.interop.pretrained import load_backbone

transformers = pytest.importorskip("transformers")

CHARACTERS = "的一是了我不人在他有这个上们来到时大地为子中你说生国年着就那和要她出也得里后自以会家可下而过天去能对小多"
# What HFL's config.json holds beyond transformers' BertConfig (a TF-era pooler description nothing reads).
HFL_KEYS = {"architectures": ["BertForMaskedLM"], "directionality": "bidi", "output_past": True,
            "pooler_fc_size": 36, "pooler_num_attention_heads": 3, "pooler_num_fc_layers": 3,
            "pooler_size_per_head": 128, "pooler_type": "first_token_transform", "bos_token_id": 0,
            "eos_token_id": 2}  # fmt: skip


@pytest.fixture(scope="module")
def hfl_folder(tmp_path_factory):
    folder = tmp_path_factory.mktemp("hfl") / "chinese-roberta-wwm-ext"
    folder.mkdir()
    vocab = ["[PAD]", *(f"[unused{i}]" for i in range(1, 5)), "[UNK]", "[CLS]", "[SEP]", "[MASK]", *CHARACTERS]
    (folder / "vocab.txt").write_text("\n".join(vocab) + "\n", encoding="utf-8")
    torch.manual_seed(0)
    sizes = {"hidden_size": 36, "num_hidden_layers": 2, "num_attention_heads": 3, "intermediate_size": 37}
    config = transformers.BertConfig(vocab_size=len(vocab), max_position_embeddings=64, **sizes)
    transformers.BertForPreTraining(config).save_pretrained(folder)  # HFL's weights hold both pretraining heads
    (folder / "config.json").write_text(json.dumps(json.loads((folder / "config.json").read_text()) | HFL_KEYS))
    (folder / "tokenizer_config.json").write_text(json.dumps({"init_inputs": []}))
    return folder


def test_imports_as_bert_with_a_log_line(hfl_folder, caplog):
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        loaded = load_backbone(hfl_folder)
    assert loaded.model.config.name == "bert" and loaded.kind == "hf:bert"
    lines = [r.getMessage() for r in caplog.records if "RoBERTa name" in r.getMessage()]
    assert len(lines) == 1 and "imported as BERT" in lines[0] and "BertForMaskedLM" in lines[0]
    assert str(hfl_folder) in lines[0]


def test_hidden_states_and_ids_match_transformers(hfl_folder):
    loaded = load_backbone(hfl_folder)
    text = "我们的国家很大，他说这个对。"
    ids = loaded.tokenizer.encode(text).ids
    reference_tokenizer = transformers.BertTokenizerFast(str(hfl_folder / "vocab.txt"))
    assert ids == reference_tokenizer(text)["input_ids"]
    batch = {"input_ids": torch.tensor([ids]), "attention_mask": torch.ones(1, len(ids), dtype=torch.long),
             "token_type_ids": torch.zeros(1, len(ids), dtype=torch.long)}  # fmt: skip
    reference = transformers.BertModel.from_pretrained(hfl_folder).eval()
    loaded.model.eval()
    with torch.no_grad():
        ours = loaded.model(**batch).hidden
        theirs = reference(**batch).last_hidden_state
    assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()


def test_a_bert_folder_under_its_own_name_logs_nothing(hfl_folder, caplog):
    plain = hfl_folder.parent / "chinese-bert-wwm-ext"
    plain.symlink_to(hfl_folder, target_is_directory=True)
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        load_backbone(plain)
    assert not any("RoBERTa name" in r.getMessage() for r in caplog.records)
