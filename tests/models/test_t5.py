"""T5 backbone: shapes on odd sizes, causal decoder, padding, and the decoder's key/value cache."""

import pytest
import torch

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.models.t5 import T5, T5Config


def tiny(**overrides) -> T5:
    config = T5Config(vocab_size=97, hidden_size=36, head_size=7, num_heads=5, intermediate_size=37, num_layers=2,
                      num_decoder_layers=3, relative_attention_num_buckets=11, relative_attention_max_distance=9,
                      dropout=0.0)  # fmt: skip
    for key, value in overrides.items():
        setattr(config, key, value)
    torch.manual_seed(0)
    return T5(config).eval()


def inputs(batch=2, source=10, target=8):
    generator = torch.Generator().manual_seed(4)
    ids = torch.randint(3, 97, (batch, source), generator=generator)
    decoder = torch.randint(3, 97, (batch, target), generator=generator)
    decoder[:, 0] = 0
    return ids, torch.ones_like(ids), decoder


@pytest.mark.parametrize("feed_forward", ["relu", "gated_gelu"])
def test_shapes(feed_forward):
    model = tiny(feed_forward=feed_forward, tie_word_embeddings=feed_forward == "relu")
    ids, mask, decoder = inputs()
    reps = model(ids, mask, decoder)
    assert reps.hidden.shape == (2, 8, 36) and reps.extras["encoder_hidden"].shape == (2, 10, 36)
    assert model.logits(reps.hidden).shape == (2, 8, 97)
    assert (model.lm_head is None) == (feed_forward == "relu")


def test_decoder_is_causal_and_encoder_padding_is_ignored():
    model = tiny()
    ids, mask, decoder = inputs()
    with torch.no_grad():
        base = model(ids, mask, decoder).hidden
        changed = decoder.clone()
        changed[:, 5] = 7
        assert torch.allclose(model(ids, mask, changed).hidden[:, :5], base[:, :5], atol=1e-6)
        assert not torch.allclose(model(ids, mask, changed).hidden[:, 5:], base[:, 5:], atol=1e-3)
        padded = torch.cat([ids, torch.zeros(2, 4, dtype=torch.long)], dim=1)
        padded_mask = torch.cat([mask, torch.zeros(2, 4, dtype=torch.long)], dim=1)
        assert torch.allclose(model(padded, padded_mask, decoder).hidden, base, atol=1e-5)


def test_key_value_cache_equals_recomputation():
    model = tiny()
    ids, mask, decoder = inputs()
    mask[1, 7:] = 0
    with torch.no_grad():
        encoder_hidden = model.encode(ids, mask)
        full = model.logits(model.decode(decoder, encoder_hidden, mask))
        cache = model.new_cache()
        steps = [
            model.logits(model.decode(decoder[:, t : t + 1], encoder_hidden, mask, cache=cache))
            for t in range(decoder.shape[1])
        ]
    assert (torch.cat(steps, dim=1) - full).abs().max().item() <= 1e-5
    assert cache[0].self_attention.key.shape == (2, 5, 8, 7)  # (B, nh, T, hs): one key per decoded position
    assert cache[0].cross_attention.key.shape == (2, 5, 10, 7)  # the encoder states, projected once


def test_configuration_errors():
    with pytest.raises(ConfigError, match="model.vocab_size is null"):
        T5(T5Config())
    with pytest.raises(ConfigError, match="model.relative_attention_max_distance=8"):
        T5(T5Config(vocab_size=10, relative_attention_num_buckets=32, relative_attention_max_distance=8))
    with pytest.raises(ConfigError, match="model.num_decoder_layers=0"):
        T5(T5Config(vocab_size=10, num_decoder_layers=0))
