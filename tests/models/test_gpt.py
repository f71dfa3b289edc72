"""GPT and GPT-2 on odd sizes: shapes, causality, the key/value cache against recomputation, GPT-2's init, and the
paper sizes' parameter counts."""

import math

import pytest
import torch
import torch.nn.functional as F

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.generation.decoding import CachedDecoder
from plm_toolkit.models.gpt import GPT, GPT2Config, GPTConfig

ODD = dict(vocab_size=99, hidden_size=36, num_layers=2, num_heads=3, intermediate_size=37, max_position_embeddings=40)


def model(config_cls=GPT2Config, **overrides):
    torch.manual_seed(0)
    return GPT(config_cls(**ODD | overrides)).eval()


@pytest.mark.parametrize("config_cls", [GPTConfig, GPT2Config])
def test_shapes_on_odd_sizes(config_cls):
    gpt = model(config_cls)
    ids = torch.randint(0, 99, (3, 11))
    reps = gpt(ids, output_all_hidden=True)
    assert reps.hidden.shape == (3, 11, 36) and len(reps.all_hidden) == 3
    assert (gpt.final_layer_norm is not None) == (config_cls is GPT2Config)
    assert gpt.layers[0].pre_norm == (config_cls is GPT2Config)
    with pytest.raises(ValueError, match="41 positions exceed model.max_position_embeddings=40"):
        gpt(torch.zeros(1, 41, dtype=torch.long))


@pytest.mark.parametrize("config_cls", [GPTConfig, GPT2Config])
def test_changing_a_later_token_never_changes_an_earlier_output(config_cls):
    gpt = model(config_cls)
    ids = torch.randint(0, 99, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 1) % 99
    with torch.no_grad():
        a, b = gpt(ids).hidden, gpt(changed).hidden
    assert torch.equal(a[:, :7], b[:, :7]) and not torch.allclose(a[:, 7:], b[:, 7:])


def test_right_padding_leaves_real_positions_alone():
    gpt = model()
    ids = torch.randint(0, 99, (2, 10))
    mask = torch.ones_like(ids)
    mask[1, 6:] = 0
    with torch.no_grad():
        padded = gpt(ids, attention_mask=mask).hidden
        alone = gpt(ids[1:, :6]).hidden
    torch.testing.assert_close(padded[1, :6], alone[0], atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("config_cls", [GPTConfig, GPT2Config])
def test_key_value_cache_gives_the_logits_of_recomputing(config_cls):
    """Left-padded prompts of different lengths, then ten cached steps: every step's logits equal those of running
    each row's whole sequence from scratch."""
    gpt = model(config_cls)
    head = lambda hidden: F.linear(hidden, gpt.input_embeddings.weight)
    decoder = CachedDecoder(gpt, head)
    prompts = [torch.randint(0, 99, (n,)) for n in (7, 3, 5)]
    ids = torch.zeros(3, 7, dtype=torch.long)
    mask = torch.zeros(3, 7, dtype=torch.long)
    for row, prompt in enumerate(prompts):
        ids[row, 7 - len(prompt) :], mask[row, 7 - len(prompt) :] = prompt, 1
    continuation = torch.randint(0, 99, (3, 10))
    with torch.no_grad():
        logits, state = decoder.prefill(ids, mask)
        stepped = [logits]
        for t in range(10):
            logits, state = decoder.step(continuation[:, t], state)
            stepped.append(logits)
        for row, prompt in enumerate(prompts):
            full = torch.cat([prompt, continuation[row]])[None]
            expected = head(gpt(full).hidden[0, len(prompt) - 1 :])  # (11, V)
            torch.testing.assert_close(torch.stack([s[row] for s in stepped]), expected, atol=1e-5, rtol=1e-5)


def test_gpt2_scales_the_residual_projections_at_init():
    gpt = GPT(GPT2Config(vocab_size=500, hidden_size=256, num_layers=8, num_heads=4, intermediate_size=1024))
    scaled = 0.02 / math.sqrt(2 * 8)
    for layer in gpt.layers:
        assert layer.attention.output.weight.std().item() == pytest.approx(scaled, rel=0.05)
        assert layer.feed_forward.output.weight.std().item() == pytest.approx(scaled, rel=0.05)
        assert layer.attention.query.weight.std().item() == pytest.approx(0.02, rel=0.05)
    gpt1 = GPT(GPTConfig(vocab_size=500, hidden_size=256, num_layers=8, num_heads=4, intermediate_size=1024))
    assert gpt1.layers[0].attention.output.weight.std().item() == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize(
    ("config", "expected"),
    [
        (GPT2Config(hidden_size=768, num_layers=12, num_heads=12, intermediate_size=3072), 124_439_808),
        (GPT2Config(hidden_size=1024, num_layers=24, num_heads=16, intermediate_size=4096), 354_823_168),
        (GPTConfig(vocab_size=40478), 116_534_784),
    ],
)
def test_paper_sizes_have_the_released_parameter_counts(config, expected):
    if config.vocab_size is None:
        config.vocab_size = 50257
    with torch.device("meta"):
        assert GPT(config).num_parameters() == expected


def test_mixed_layer_norm_placement_is_refused():
    with pytest.raises(ConfigError, match="model.pre_norm=True with model.final_layer_norm=False"):
        GPT(GPT2Config(**ODD | {"final_layer_norm": False}))
