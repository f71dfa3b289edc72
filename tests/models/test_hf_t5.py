"""T5 parity with transformers' T5ForConditionalGeneration, v1.0 and v1.1, both directions, on odd sizes with
padding: max abs difference of the logits <= 1e-5 in fp32."""

import json

import pytest
import torch
from safetensors.torch import save_file

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.interop.hf import export_hf, import_hf
from plm_toolkit.models.t5 import T5, T5Config

transformers = pytest.importorskip("transformers")

# Odd sizes so that no two dimensions can be confused; few buckets and a short max distance so that the 13-token
# inputs reach the logarithmic buckets and the shared last one.
SIZES = dict(vocab_size=99, d_model=36, d_kv=7, d_ff=37, num_layers=2, num_decoder_layers=3, num_heads=5,
             relative_attention_num_buckets=11, relative_attention_max_distance=9)  # fmt: skip
VERSIONS = {
    "v1.0": dict(feed_forward_proj="relu", tie_word_embeddings=True),
    "v1.1": dict(feed_forward_proj="gated-gelu", tie_word_embeddings=False),
}


def hf_model(version: str):
    torch.manual_seed(0)
    config = transformers.T5Config(**SIZES, **VERSIONS[version], decoder_start_token_id=0)
    model = transformers.T5ForConditionalGeneration(config).eval()
    if version == "v1.1":  # transformers 5 ties every head at construction; give v1.1 its own
        model.lm_head.weight = torch.nn.Parameter(torch.randn(99, 36))
    return model


def write_hf_folder(model, folder, version: str) -> None:
    """The layout of the released checkpoints: shared.weight once, lm_head only when untied."""
    state = {k: v.contiguous() for k, v in model.state_dict().items() if "embed_tokens" not in k}
    if version == "v1.0":
        state.pop("lm_head.weight")
    folder.mkdir()
    save_file(state, str(folder / "model.safetensors"), metadata={"format": "pt"})
    config = dict(model_type="t5", **SIZES, **VERSIONS[version], pad_token_id=0, eos_token_id=1)
    (folder / "config.json").write_text(json.dumps(config))


def batch():
    generator = torch.Generator().manual_seed(1)
    input_ids = torch.randint(3, 99, (3, 13), generator=generator)
    attention_mask = torch.ones_like(input_ids)
    attention_mask[1, 9:] = 0  # padded rows
    attention_mask[2, 4:] = 0
    input_ids[attention_mask == 0] = 0
    decoder_input_ids = torch.randint(3, 99, (3, 11), generator=generator)
    decoder_input_ids[:, 0] = 0
    return input_ids, attention_mask, decoder_input_ids


def ours_logits(model: T5, input_ids, attention_mask, decoder_input_ids) -> torch.Tensor:
    with torch.no_grad():
        return model.logits(model(input_ids, attention_mask, decoder_input_ids).hidden)


def theirs_logits(model, input_ids, attention_mask, decoder_input_ids) -> torch.Tensor:
    with torch.no_grad():
        return model(input_ids=input_ids, attention_mask=attention_mask, decoder_input_ids=decoder_input_ids).logits


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_import_matches_transformers(tmp_path, version):
    reference = hf_model(version)
    write_hf_folder(reference, tmp_path / "hf", version)
    imported = import_hf(tmp_path / "hf")
    assert imported.model_config.tie_word_embeddings == (version == "v1.0")
    model = T5(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    inputs = batch()
    diff = (ours_logits(model, *inputs) - theirs_logits(reference, *inputs)).abs().max().item()
    assert diff <= 1e-5


@pytest.mark.parametrize("version", sorted(VERSIONS))
def test_export_matches_transformers(tmp_path, version):
    torch.manual_seed(2)
    gated = version == "v1.1"
    config = T5Config(vocab_size=99, hidden_size=36, head_size=7, intermediate_size=37, num_layers=2,
                      num_decoder_layers=3, num_heads=5, relative_attention_num_buckets=11,
                      relative_attention_max_distance=9, feed_forward="gated_gelu" if gated else "relu",
                      tie_word_embeddings=not gated)  # fmt: skip
    model = T5(config).eval()
    export_hf(tmp_path / "out", model)
    reference = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path / "out").eval()
    assert (reference.lm_head.weight is reference.shared.weight) == (not gated)
    inputs = batch()
    diff = (ours_logits(model, *inputs) - theirs_logits(reference, *inputs)).abs().max().item()
    assert diff <= 1e-5
    # And back: the exported folder imports to the same weights.
    again = import_hf(tmp_path / "out")
    assert again.model_config == config
    assert all(torch.equal(again.model_state[k], v) for k, v in model.state_dict().items())


def test_transformers_5_saved_v1_1_imports_as_an_untied_copy(tmp_path):
    # transformers 5 saves a v1.1 model with tie_word_embeddings true, scale_decoder_outputs false, no lm_head.
    torch.manual_seed(3)
    config = transformers.T5Config(**SIZES, **VERSIONS["v1.1"], decoder_start_token_id=0)
    reference = transformers.T5ForConditionalGeneration(config).eval()
    reference.save_pretrained(tmp_path / "hf")
    imported = import_hf(tmp_path / "hf")
    assert not imported.model_config.tie_word_embeddings
    model = T5(imported.model_config).eval()
    model.load_state_dict(imported.model_state)
    inputs = batch()
    assert (ours_logits(model, *inputs) - theirs_logits(reference, *inputs)).abs().max().item() <= 1e-5


def test_import_refuses_unknown_feed_forward(tmp_path):
    write_hf_folder(hf_model("v1.0"), tmp_path / "hf", "v1.0")
    config = json.loads((tmp_path / "hf" / "config.json").read_text())
    (tmp_path / "hf" / "config.json").write_text(json.dumps(config | {"feed_forward_proj": "gated-silu"}))
    with pytest.raises(CheckpointError, match="feed_forward_proj 'gated-silu'"):
        import_hf(tmp_path / "hf")
