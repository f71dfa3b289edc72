"""XLNet import/export against transformers' XLNetLMHeadModel on identical odd-sized random weights."""

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.vocab import Vocab
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.models.xlnet import XLNet
from plm_toolkit.objectives.permutation_lm import PermutationTransform, PlmConfig

transformers = pytest.importorskip("transformers")

VOCAB = Vocab(size=99, pad_id=0, unk_id=1, cls_id=2, sep_id=3, mask_id=4)


@pytest.fixture
def reference(tmp_path):
    return make_reference(tmp_path)


def make_reference(tmp_path, **overrides):
    torch.manual_seed(0)
    config = transformers.XLNetConfig(
        vocab_size=99,
        d_model=36,
        n_layer=2,
        n_head=3,
        d_head=12,
        d_inner=37,
        ff_activation="gelu",
        mem_len=6,
        reuse_len=8,
        dropout=0.0,
        untie_r=True,
        **overrides,
    )
    model = transformers.XLNetLMHeadModel(config).eval()
    with torch.no_grad():  # transformers starts the biases at zero; random ones exercise every term
        for name, p in model.named_parameters():
            if "bias" in name or "seg_embed" in name or "mask_emb" in name:
                p.normal_(std=0.5)
    model.save_pretrained(tmp_path / "hf")
    return model, tmp_path / "hf"


def plm_batch(batch_size=2, seq_len=16, seed=0):
    generator = torch.Generator().manual_seed(seed)
    windows = torch.randint(5, 99, (batch_size, seq_len - 3), generator=generator)
    transform = PermutationTransform(PlmConfig(reuse_len=8, perm_size=4), VOCAB)
    return transform({"input_ids": windows}, [seed * 10 + i for i in range(batch_size)])


@pytest.mark.parametrize(("bi_data", "clamp_len"), [(False, -1), (True, 5)])
def test_logits_and_memories_match_transformers(tmp_path, bi_data, clamp_len):
    ref, folder = make_reference(tmp_path, bi_data=bi_data, clamp_len=clamp_len)
    imported = import_hf(folder, expect="xlnet")
    assert imported.model_config.bi_data == bi_data and imported.model_config.clamp_len == clamp_len
    assert imported.objective_overrides.get("reuse_len") == 8 and imported.model_config.head_size == 12
    model = XLNet(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    batch = plm_batch()
    mems = [torch.randn(2, 6, 36) for _ in range(2)]  # ours batch first, transformers' time first
    attention_mask = torch.ones(2, 16)
    attention_mask[1, -1] = 0  # a padding key
    with torch.no_grad():
        theirs = ref(
            batch["input_ids"],
            attention_mask=attention_mask,
            token_type_ids=batch["token_type_ids"],
            perm_mask=batch["perm_mask"].float(),
            target_mapping=batch["target_mapping"],
            mems=[m.transpose(0, 1) for m in mems],
            use_mems=True,
        )
        ours = model(
            batch["input_ids"],
            attention_mask=attention_mask,
            token_type_ids=batch["token_type_ids"],
            perm_mask=batch["perm_mask"],
            target_mapping=batch["target_mapping"],
            memories=mems,
            reuse_len=8,
        )
        logits = F.linear(ours.extras["query"], model.word_embedding.weight, imported.objective_state["bias"])
    torch.testing.assert_close(logits, theirs.logits, atol=1e-5, rtol=1e-5)
    for mine, their in zip(ours.memories, theirs.mems, strict=True):
        torch.testing.assert_close(mine, their.transpose(0, 1), atol=1e-5, rtol=1e-5)
    # Without perm_mask and target_mapping both run the content stream alone (fine-tuning).
    with torch.no_grad():
        content = ref.transformer(batch["input_ids"], token_type_ids=batch["token_type_ids"]).last_hidden_state
        assert not model(batch["input_ids"], token_type_ids=batch["token_type_ids"]).extras
        mine = model(batch["input_ids"], token_type_ids=batch["token_type_ids"]).hidden
    torch.testing.assert_close(mine, content, atol=1e-5, rtol=1e-5)


def test_export_round_trips_through_transformers(reference, tmp_path):
    ref, folder = reference
    imported = import_hf(folder, expect="xlnet")
    model = XLNet(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    export_hf(tmp_path / "out", model, imported.objective_state, None, {"reuse_len": 8})
    again = transformers.XLNetLMHeadModel.from_pretrained(tmp_path / "out").eval()
    batch = plm_batch(seed=3)
    inputs = {k: batch[k] for k in ("input_ids", "token_type_ids", "target_mapping")}
    with torch.no_grad():
        torch.testing.assert_close(
            again(**inputs, perm_mask=batch["perm_mask"].float()).logits,
            ref(**inputs, perm_mask=batch["perm_mask"].float()).logits,
            atol=1e-6,
            rtol=1e-6,
        )


def test_import_names_the_bad_file(tmp_path, reference):
    _, folder = reference
    (folder / "config.json").write_text('{"model_type": "bert"}')
    with pytest.raises(CheckpointError, match="config.json: model_type"):
        import_hf(folder, expect="xlnet")
