"""T5 decoding through the shared generation module: greedy and beam search equal transformers' ``generate`` token
for token, beam search with one beam equals greedy, and the cache is followed through beam reordering."""

import pytest
import torch

from plm_toolkit.generation.decoding import SearchConfig, generate
from plm_toolkit.interop.hf import export_hf
from plm_toolkit.models.t5 import T5, T5Config


def model(version: str) -> T5:
    torch.manual_seed(5)
    gated = version == "v1.1"
    # As many decoder layers as encoder ones: transformers 5.23's generation cache is sized by the encoder's.
    config = T5Config(vocab_size=99, hidden_size=36, head_size=7, num_heads=5, intermediate_size=37, num_layers=2,
                      relative_attention_num_buckets=11, relative_attention_max_distance=9,
                      feed_forward="gated_gelu" if gated else "relu", tie_word_embeddings=not gated)  # fmt: skip
    return T5(config).eval()


def sources():
    generator = torch.Generator().manual_seed(6)
    ids = torch.randint(3, 99, (3, 12), generator=generator)
    mask = torch.ones_like(ids)
    mask[1, 7:] = 0  # right padding, as encoder inputs come
    mask[2, 3:] = 0
    return ids.masked_fill(mask == 0, 0), mask


@pytest.mark.parametrize("beams", [1, 4])
@pytest.mark.parametrize("version", ["v1.0", "v1.1"])
def test_greedy_and_beam_search_equal_transformers_generate(tmp_path, version, beams):
    transformers = pytest.importorskip("transformers")
    ours = model(version)
    export_hf(tmp_path, ours)
    theirs = transformers.T5ForConditionalGeneration.from_pretrained(tmp_path).eval()
    ids, mask = sources()
    # length_penalty 0: both rank beams by summed log-probability (transformers divides by length^alpha, GNMT by
    # ((5 + length) / 6)^alpha).
    search = SearchConfig(max_new_tokens=10, eos_id=1, num_beams=beams, length_penalty=0.0)
    got = generate(ours.decoder(ours.logits), ids, mask, search)
    with torch.no_grad():
        expected = theirs.generate(
            input_ids=ids, attention_mask=mask, max_new_tokens=10, do_sample=False, num_beams=beams, length_penalty=0.0
        )
    for row, tokens in enumerate(got):
        reference = expected[row, 1:].tolist()  # without the start token
        if 1 in reference:
            reference = reference[: reference.index(1) + 1]  # up to and with </s>, then transformers pads
        assert tokens == reference, row


def test_beam_search_with_one_beam_is_greedy_and_wider_beams_score_at_least_as_well():
    t5 = model("v1.0")
    ids, mask = sources()
    greedy = generate(t5.decoder(t5.logits), ids, mask, SearchConfig(max_new_tokens=8))
    assert generate(t5.decoder(t5.logits), ids, mask, SearchConfig(max_new_tokens=8, num_beams=1)) == greedy
    beams = generate(t5.decoder(t5.logits), ids, mask, SearchConfig(max_new_tokens=8, num_beams=4))
    for row in range(3):
        assert len(beams[row]) == 8
        # Four beams of the full length: the best summed log-probability is at least greedy's.
        assert (
            log_prob(t5, ids[row : row + 1], mask[row : row + 1], beams[row])
            >= log_prob(t5, ids[row : row + 1], mask[row : row + 1], greedy[row]) - 1e-5
        )


def log_prob(t5: T5, ids, mask, tokens: list[int]) -> float:
    """log p(tokens | source) by one teacher-forced pass."""
    target = torch.tensor([tokens])
    decoder_input = torch.cat([torch.zeros(1, 1, dtype=torch.long), target[:, :-1]], dim=1)
    with torch.no_grad():
        logits = t5.logits(t5(ids, mask, decoder_input).hidden).log_softmax(-1)
    return float(logits.gather(-1, target[..., None]).sum())
