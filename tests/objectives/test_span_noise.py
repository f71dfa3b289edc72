"""T5's span corruption: the noise mask, the raw window length, the sentinel layout, and its statistics on real
text (WikiText-2)."""

import math
from collections import Counter

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig, TokenizerKind
from plm_toolkit.data.build import prepare_pretraining_data
from plm_toolkit.data.tokenization.sentinels import sentinel_ids
from plm_toolkit.models.t5 import T5Config
from plm_toolkit.objectives.span_corruption import SpanCorruptionConfig, SpanCorruptionObjective
from plm_toolkit.objectives.span_noise import (
    IGNORE_INDEX,
    SpanCorruption,
    corrupt_spans,
    random_segmentation,
    random_spans_helper,
    random_spans_noise_mask,
)

SENTINELS = tuple(range(999, 899, -1))  # <extra_id_0> = 999, the last id of a 1000-token vocabulary
EOS, PAD = 1, 0


def test_helper_gives_t5s_published_lengths():
    # The T5 paper's setting: 512 input tokens read 568 raw tokens and produce 114 target tokens.
    assert random_spans_helper(512, 0.15, 3.0) == (568, 114)


@pytest.mark.parametrize("density", [0.15, 0.3])
@pytest.mark.parametrize("mean", [3.0, 2.0, 8.0])
def test_helper_window_fills_the_input_exactly(density, mean):
    rng = np.random.default_rng(0)
    for inputs_length in (16, 37, 64, 128, 131, 512):
        tokens, targets = random_spans_helper(inputs_length, density, mean)
        for extra in (0, 1):  # the longest raw window that fits: one more token would overflow
            noise = random_spans_noise_mask(tokens + extra, density, mean, rng)
            inputs, target = corrupt_spans(np.arange(10, 10 + tokens + extra), noise, SENTINELS, EOS)
            if extra == 0:
                assert len(inputs) == inputs_length and len(target) == targets
            else:
                assert len(inputs) > inputs_length


def test_noise_mask_counts_and_alternation():
    rng = np.random.default_rng(1)
    for length in (2, 10, 141, 568):
        mask = random_spans_noise_mask(length, 0.15, 3.0, rng)
        noise = max(round(length * 0.15), 1)
        spans = max(round(noise / 3.0), 1)
        assert mask.sum() == noise
        starts = np.flatnonzero(mask & ~np.concatenate([[False], mask[:-1]]))
        assert len(starts) == spans
        assert not mask[0] and mask[-1]  # non-noise first, noise last, as T5 (without random_roll)


def test_segmentation_is_uniform_over_compositions():
    # A uniform split of n items into k non-empty segments gives the first segment length j with probability
    # C(n - j - 1, k - 2) / C(n - 1, k - 1).
    n, k, draws = 12, 4, 20000
    rng = np.random.default_rng(2)
    firsts = Counter(int(random_segmentation(n, k, rng)[0]) for _ in range(draws))
    for j in range(1, n - k + 2):
        expected = math.comb(n - j - 1, k - 2) / math.comb(n - 1, k - 1)
        assert abs(firsts[j] / draws - expected) < 0.012, j


def test_corrupt_spans_layout():
    tokens = np.array([10, 11, 12, 13, 14, 15, 16, 17])
    noise = np.array([0, 1, 1, 0, 0, 1, 0, 1], dtype=bool)
    inputs, targets = corrupt_spans(tokens, noise, SENTINELS, EOS)
    assert inputs.tolist() == [10, 999, 13, 14, 998, 16, 997, EOS]
    assert targets.tolist() == [999, 11, 12, 998, 15, 997, 17, EOS]


def test_transform_is_per_row_and_shifts_targets():
    transform = SpanCorruption(SENTINELS, EOS, PAD, decoder_start_id=PAD)
    ids = torch.arange(100, 100 + 3 * 40).view(3, 40)
    mask = torch.ones_like(ids)
    mask[2, 30:] = 0  # a short row
    out = transform({"input_ids": ids, "attention_mask": mask}, [5, 6, 7])
    alone = transform({"input_ids": ids[1:2], "attention_mask": mask[1:2]}, [6])
    width = alone["input_ids"].shape[1]
    assert torch.equal(out["input_ids"][1, :width], alone["input_ids"][0])
    labels, decoder_inputs = out["labels"], out["decoder_input_ids"]
    assert torch.equal(decoder_inputs[:, 0], torch.full((3,), PAD))
    real = labels != IGNORE_INDEX
    assert torch.equal(decoder_inputs[:, 1:][real[:, 1:]], labels[:, :-1][real[:, 1:]])
    assert torch.equal(out["decoder_attention_mask"].bool(), real)
    assert int(out["attention_mask"][2].sum()) < int(out["attention_mask"][0].sum())  # 30 raw tokens vs 40


@pytest.fixture
def wikitext_windows(shared_data, tmp_path):
    """WikiText-2's validation text through the real pipeline: a trained T5 vocabulary (1,900 pieces + 100
    sentinels) and span_corruption's data plan for 128 encoder tokens (shuffled stream windows of 141 tokens)."""
    data = OmegaConf.structured(
        DataConfig(
            train_files=[str(shared_data / "wikitext2" / "wiki.valid.tokens")],
            cache_dir=str(tmp_path / "cache"),
            max_seq_len=128,
            tokenizer=TokenizerConfig(kind=TokenizerKind.t5_unigram, vocab_size=2000),
        )
    )
    plan = SpanCorruptionObjective.data_plan(SpanCorruptionConfig(), data, T5Config())
    prepared = prepare_pretraining_data(data, plan, seed=0)
    rows = prepared.train[: len(prepared.train)]["input_ids"]
    windows = torch.tensor(rows, dtype=torch.long)
    return prepared.tokenizer, windows, random_spans_helper(128, 0.15, 3.0)[1]


def test_span_corruption_statistics_on_wikitext(wikitext_windows):
    tokenizer, windows, targets_length = wikitext_windows
    assert windows.shape[1] == 141 and len(windows) > 500
    sentinels = sentinel_ids(tokenizer)
    assert sentinels[0] == tokenizer.get_vocab_size() - 1 and len(sentinels) == 100
    transform = SpanCorruption(sentinels, tokenizer.token_to_id("</s>"), PAD, PAD)
    out = transform({"input_ids": windows, "attention_mask": torch.ones_like(windows)}, range(len(windows)))
    assert out["input_ids"].shape == (len(windows), 128) and bool(out["attention_mask"].all())
    assert out["labels"].shape == (len(windows), targets_length)

    is_sentinel = torch.isin(out["input_ids"], torch.tensor(sentinels))
    span_lengths, noise_tokens = [], 0
    for row in range(len(windows)):
        row_sentinels = out["input_ids"][row][is_sentinel[row]].tolist()
        # One sentinel per span, counting down from <extra_id_0> (the last id) in order.
        assert row_sentinels == list(sentinels[: len(row_sentinels)])
        labels = out["labels"][row].tolist()
        assert labels[-1] == tokenizer.token_to_id("</s>") and labels[0] == sentinels[0]
        starts = [i for i, t in enumerate(labels) if t in sentinels] + [len(labels) - 1]
        span_lengths += [b - a - 1 for a, b in zip(starts[:-1], starts[1:], strict=True)]
        noise_tokens += len(labels) - 1 - (len(starts) - 1)
        assert uncorrupt(out["input_ids"][row].tolist(), labels, sentinels) == windows[row].tolist()
    noise_fraction = noise_tokens / windows.numel()
    assert abs(noise_fraction - 0.15) <= 0.01
    assert abs(np.mean(span_lengths) - 3.0) <= 0.2
    # Spans vary in length as T5's random segmentation makes them (not all 3): about a third are single tokens.
    counts = Counter(span_lengths)
    assert 0.2 < counts[1] / len(span_lengths) < 0.5 and max(span_lengths) >= 7


def uncorrupt(inputs: list[int], labels: list[int], sentinels: tuple[int, ...]) -> list[int]:
    """The raw window back from inputs and targets: every sentinel of the inputs replaced by its span."""
    spans, current = {}, None
    for token in labels[:-1]:
        if token in sentinels:
            current = token
            spans[current] = []
        else:
            spans[current].append(token)
    out = []
    for token in inputs[:-1]:
        out += spans[token] if token in sentinels else [token]
    return out
