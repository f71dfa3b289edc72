"""The Transformer (Vaswani et al. 2017) by its own properties: odd-sized shapes, source padding changes nothing,
causal decoding, the key/value cache equals recomputation, beam search with beam 1 equals greedy decoding."""

import pytest
import torch

from plm_toolkit.core.errors import ConfigError
from plm_toolkit.generation.decoding import SearchConfig, beam_search, generate, sample
from plm_toolkit.models.transformer import Transformer, TransformerConfig

PAD, BOS, EOS = 1, 0, 2


def tiny(**changes) -> Transformer:
    torch.manual_seed(0)
    config = TransformerConfig(
        vocab_size=99,
        hidden_size=36,
        num_layers=2,
        num_decoder_layers=3,
        num_heads=3,
        intermediate_size=37,
        max_position_embeddings=64,
        pad_token_id=PAD,
        bos_token_id=BOS,
        eos_token_id=EOS,
        **changes,
    )
    return Transformer(config).eval()


def sources(lengths, seed=1):
    generator = torch.Generator().manual_seed(seed)
    width = max(lengths)
    ids = torch.full((len(lengths), width), PAD)
    mask = torch.zeros(len(lengths), width, dtype=torch.long)
    for row, length in enumerate(lengths):
        ids[row, :length] = torch.randint(3, 99, (length,), generator=generator)
        mask[row, :length] = 1
    return ids, mask


@pytest.mark.parametrize("pre_ln", [False, True])
def test_shapes_and_shared_embeddings(pre_ln):
    model = tiny(pre_ln=pre_ln)
    ids, mask = sources([5, 7])
    target = torch.randint(3, 99, (2, 4))
    reps = model(ids, mask, target)
    assert reps.hidden.shape == (2, 4, 36) and reps.extras["encoder_hidden"].shape == (2, 7, 36)
    assert model.logits(reps.hidden).shape == (2, 4, 99)
    assert (model.encoder_norm is not None) == pre_ln
    # One matrix for source, target and output (section 3.4); untied, three.
    assert len([n for n, _ in model.named_parameters() if "shared" in n or "embeddings" in n]) == 1
    untied = tiny(share_embeddings=False)
    names = {n for n, _ in untied.named_parameters()}
    assert {"shared.weight", "decoder_embeddings.weight", "output_projection.weight"} <= names
    assert model.shared.weight[PAD].abs().sum() == 0


def test_source_padding_changes_nothing():
    model = tiny()
    ids, mask = sources([4, 9])
    target = torch.randint(3, 99, (2, 5))
    batched = model(ids, mask, target).hidden
    alone = model(ids[:1, :4], mask[:1, :4], target[:1]).hidden
    assert torch.allclose(batched[:1], alone, atol=1e-5)
    # Whatever token sits on a padded position is never read.
    noisy = ids.clone()
    noisy[0, 4:] = 50
    assert torch.allclose(model(noisy, mask, target).hidden, batched, atol=1e-6)


def test_decoder_is_causal():
    model = tiny()
    ids, mask = sources([6])
    target = torch.randint(3, 99, (1, 6))
    changed = target.clone()
    changed[0, 4] = 7
    a, b = model(ids, mask, target).hidden, model(ids, mask, changed).hidden
    assert torch.allclose(a[:, :4], b[:, :4], atol=1e-6)
    assert not torch.allclose(a[:, 4:], b[:, 4:])


def test_key_value_cache_equals_recomputation():
    model = tiny()
    ids, mask = sources([5, 8])
    target = torch.randint(3, 99, (2, 7))
    encoder = model.encode(ids, mask)
    full = model.logits(model.decode(target, encoder, mask))  # (2, 7, V)
    cache = model.new_cache()
    steps = [model.logits(model.decode(target[:, t : t + 1], encoder, mask, cache)) for t in range(7)]
    assert torch.allclose(torch.cat(steps, dim=1), full, atol=1e-5)
    # A cached chunk of several tokens continues the earlier positions too.
    cache = model.new_cache()
    first = model.decode(target[:, :3], encoder, mask, cache)
    rest = model.decode(target[:, 3:], encoder, mask, cache)
    assert torch.allclose(model.logits(torch.cat([first, rest], 1)), full, atol=1e-5)


def greedy_by_recomputation(model, ids, mask, limit):
    """Greedy decoding without a cache: the whole prefix re-decoded at every step, at most limit(n) tokens."""
    out = []
    for row in range(ids.shape[0]):
        length = int(mask[row].sum())
        encoder = model.encode(ids[row : row + 1, :length])
        tokens = [BOS]
        while len(tokens) - 1 < limit(length):
            token = int(model.logits(model.decode(torch.tensor([tokens]), encoder))[0, -1].argmax())
            tokens.append(token)
            if token == EOS:
                break
        out.append(tokens[1:])
    return out


@torch.no_grad()
def test_beam_one_equals_greedy_and_wider_beams_score_at_least_as_well():
    model = tiny()
    ids, mask = sources([3, 6, 9, 4], seed=5)
    decoder = model.decoder(model.logits)
    # The length limit follows each source: 1 x its length + 3 tokens.
    greedy = sample(decoder, ids, mask, SearchConfig(max_new_tokens=3, max_length_a=1.0, eos_id=EOS))
    assert greedy == greedy_by_recomputation(model, ids, mask, lambda n: n + 3)
    assert any(len(g) == n + 3 for g, n in zip(greedy, [3, 6, 9, 4], strict=True))  # a limit was reached
    one_beam = SearchConfig(max_new_tokens=3, max_length_a=1.0, num_beams=1, eos_id=EOS)
    assert beam_search(decoder, ids, mask, one_beam) == greedy

    def score(row, output):
        length = int(mask[row].sum())
        encoder = model.encode(ids[row : row + 1, :length])
        tokens = torch.tensor([[BOS, *output]])
        log_probs = model.logits(model.decode(tokens[:, :-1], encoder)).log_softmax(-1)[0]
        total = sum(float(log_probs[t, token]) for t, token in enumerate(output))
        return total / ((5 + len(output)) / 6) ** 0.6

    beam = generate(
        decoder,
        ids,
        mask,
        SearchConfig(max_new_tokens=3, max_length_a=1.0, num_beams=4, length_penalty=0.6, eos_id=EOS),
    )
    for row in range(4):
        assert score(row, beam[row]) >= score(row, greedy[row]) - 1e-5


def test_beam_size_zero_is_refused():
    model = tiny()
    ids, mask = sources([3])
    with pytest.raises(ConfigError, match="num_beams=0"):
        generate(model.decoder(model.logits), ids, mask, SearchConfig(num_beams=0))


def test_positions_beyond_the_table_are_refused():
    model = tiny()
    ids = torch.randint(3, 99, (1, 65))
    with pytest.raises(ValueError, match="exceeds model.max_position_embeddings 64"):
        model.encode(ids)
