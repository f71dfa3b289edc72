"""The decoding module on a toy decoder whose next-token distribution is a fixed table: greedy, filtering,
seeded sampling, and beam search against greedy."""

import itertools
import math

import pytest
import torch

from plm_toolkit.generation.decoding import SearchConfig, beam_search, filter_logits, generate, sample


class MarkovDecoder:
    """log p(next | last token) from a fixed (V, V) table; the state is the last token of each row."""

    supports_padding = True

    def __init__(self, table: torch.Tensor):
        self.log_probs = table.log_softmax(dim=-1)

    def prefill(self, input_ids, attention_mask):
        last = input_ids[:, -1]
        return self.log_probs[last], last

    def step(self, tokens, state):
        return self.log_probs[tokens], tokens

    def reorder(self, state, index):
        return state[index]

    def sequence_log_prob(self, start: int, tokens: list[int]) -> float:
        previous, total = start, 0.0
        for token in tokens:
            total += self.log_probs[previous, token].item()
            previous = token
        return total


def trap() -> MarkovDecoder:
    """From token 0, token 1 looks best (0.6) but leads nowhere good; token 2 (0.4) leads to a sure token 3."""
    table = torch.full((5, 5), -20.0)
    table[0, 1], table[0, 2] = math.log(0.6), math.log(0.4)
    table[1, :] = torch.tensor([0.3, 0.25, 0.2, 0.15, 0.1]).log()  # spread thin after 1
    table[2, 3] = 0.0  # almost surely 3 after 2
    table[3, 4] = table[4, 4] = 0.0
    return MarkovDecoder(table)


def test_filter_keeps_top_k_and_the_nucleus():
    logits = torch.tensor([[3.0, 2.0, 1.0, 0.0]]).log_softmax(-1)
    assert torch.isinf(filter_logits(logits, top_k=2)).tolist() == [[False, False, True, True]]
    probs = logits.softmax(-1)[0]  # 0.64, 0.24, 0.09, 0.03
    kept = ~torch.isinf(filter_logits(logits, top_p=0.7))
    assert kept.tolist() == [[True, True, False, False]] and probs[0] < 0.7 <= probs[:2].sum()
    assert (~torch.isinf(filter_logits(logits, top_p=0.5))).sum() == 1  # the most likely token always stays


def test_sampling_is_seeded_and_top_k_one_is_greedy():
    decoder = MarkovDecoder(torch.randn(7, 7))
    ids, mask = torch.tensor([[3], [5]]), torch.ones(2, 1, dtype=torch.long)
    config = SearchConfig(max_new_tokens=12, do_sample=True, temperature=1.3)
    first = sample(decoder, ids, mask, config, torch.Generator().manual_seed(4))
    assert first == sample(decoder, ids, mask, config, torch.Generator().manual_seed(4))
    assert first != sample(decoder, ids, mask, config, torch.Generator().manual_seed(5))
    greedy = sample(decoder, ids, mask, SearchConfig(max_new_tokens=12))
    assert sample(decoder, ids, mask, SearchConfig(max_new_tokens=12, do_sample=True, top_k=1)) == greedy


def test_a_tiny_temperature_samples_the_most_likely_token():
    """1e-300 is a normal float, but the logits divided by it overflowed float32: every probability was NaN."""
    decoder = MarkovDecoder(torch.randn(7, 7))
    ids, mask = torch.tensor([[3], [5]]), torch.ones(2, 1, dtype=torch.long)
    greedy = sample(decoder, ids, mask, SearchConfig(max_new_tokens=12))
    cold = SearchConfig(max_new_tokens=12, do_sample=True, temperature=1e-300)
    assert sample(decoder, ids, mask, cold, torch.Generator().manual_seed(0)) == greedy


def test_sampling_follows_the_distribution():
    table = torch.tensor([[0.0, math.log(3.0)], [0.0, math.log(3.0)]])  # p(1) = 0.75 everywhere
    decoder = MarkovDecoder(table)
    ids, mask = torch.zeros(4000, 1, dtype=torch.long), torch.ones(4000, 1, dtype=torch.long)
    out = sample(decoder, ids, mask, SearchConfig(max_new_tokens=1, do_sample=True), torch.Generator().manual_seed(0))
    share = sum(tokens[0] for tokens in out) / len(out)
    assert abs(share - 0.75) < 0.03, share


def test_greedy_stops_at_eos():
    out = generate(trap(), torch.tensor([[0]]), torch.ones(1, 1, dtype=torch.long), SearchConfig(8, eos_id=1))
    assert out == [[1]]


def test_one_beam_is_greedy_and_more_beams_find_a_likelier_sequence():
    decoder = trap()
    ids, mask = torch.tensor([[0], [2]]), torch.ones(2, 1, dtype=torch.long)
    config = SearchConfig(max_new_tokens=3)
    greedy = sample(decoder, ids, mask, config)
    assert beam_search(decoder, ids, mask, SearchConfig(max_new_tokens=3, num_beams=1)) == greedy
    beams = beam_search(decoder, ids, mask, SearchConfig(max_new_tokens=3, num_beams=4))
    for row, start in enumerate([0, 2]):
        assert decoder.sequence_log_prob(start, beams[row]) >= decoder.sequence_log_prob(start, greedy[row])
    assert greedy[0][0] == 1 and beams[0] == [2, 3, 4]  # the trap: greedy takes 1, beam search goes through 2


def test_beam_search_is_exhaustive_on_a_small_space():
    torch.manual_seed(0)
    decoder = MarkovDecoder(torch.randn(4, 4) * 2)
    best = max(itertools.product(range(4), repeat=3), key=lambda seq: decoder.sequence_log_prob(1, list(seq)))
    found = beam_search(decoder, torch.tensor([[1]]), torch.ones(1, 1, dtype=torch.long), SearchConfig(3, num_beams=16))
    assert found == [list(best)]


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_length_penalty_ranks_finished_hypotheses(alpha):
    """Stopping now (eos, log 0.5) against two more likely-enough tokens: GNMT's penalty favours the longer."""
    table = torch.full((4, 4), -30.0)
    table[0, 3], table[0, 1] = math.log(0.5), math.log(0.5)  # 3 is eos
    table[1, 2] = math.log(0.95)
    table[2, 3] = math.log(0.95)
    decoder = MarkovDecoder(table)
    out = beam_search(
        decoder,
        torch.tensor([[0]]),
        torch.ones(1, 1, dtype=torch.long),
        SearchConfig(5, num_beams=2, length_penalty=alpha, eos_id=3),
    )
    short, long = math.log(0.5) / ((5 + 1) / 6) ** alpha, math.log(0.5 * 0.95**2) / ((5 + 3) / 6) ** alpha
    assert (long > short) == (alpha > 0)  # log p alone prefers stopping; the penalty tips it
    assert out == ([[1, 2, 3]] if long > short else [[3]])
