"""T5's span corruption (Raffel et al. 2020, section 3.1.4 and 3.3.4): the noise mask, the raw window length, and
the inputs/targets pair, as the released preprocessors (``t5/data/preprocessors.py``: ``random_spans_noise_mask``,
``random_spans_helper``, ``noise_span_to_unique_sentinel``) define them.

A window of ``n`` tokens gets ``round(n * noise_density)`` noise tokens in ``round(noise / mean_noise_span_length)``
spans. The noise tokens and the other tokens are each split at random into that many non-empty segments (every
split equally likely), and the segments alternate, non-noise first: ``N1 X1 N2 X2 ... Nk Xk``. The encoder reads
``N1 <s0> N2 <s1> ... Nk <s(k-1)> EOS`` and the decoder writes ``<s0> X1 <s1> X2 ... <s(k-1)> Xk EOS``, with the
sentinels ``<extra_id_0>``, ``<extra_id_1>``, ... counting down from the vocabulary's last id.

Row i draws only from a generator seeded with ``seeds[i]`` and over its own unpadded length, so a row is corrupted
the same way whatever batch it lands in.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import torch

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.batching.collate import IGNORE_INDEX, shift_right


def span_counts(length: int, noise_density: float, mean_noise_span_length: float) -> tuple[int, int]:
    """(noise tokens, noise spans) of a window of ``length`` tokens, as ``random_spans_noise_mask`` counts them:
    at least one noise and one non-noise token, at least one span. Python's ``round`` rounds half to even, as
    ``tf.round`` does. Spans are also capped by the non-noise tokens (each span needs a non-noise segment before
    it), which T5 leaves to the caller; it never binds at T5's settings."""
    length = max(length, 2)
    noise = min(max(round(length * noise_density), 1), length - 1)
    spans = max(round(noise / mean_noise_span_length), 1)
    return noise, min(spans, noise, length - noise)


def random_segmentation(num_items: int, num_segments: int, rng: np.random.Generator) -> np.ndarray:
    """Lengths of ``num_segments`` non-empty segments that add up to ``num_items``, every split equally likely:
    ``num_segments - 1`` distinct cut points among the ``num_items - 1`` gaps (T5 shuffles an indicator of them)."""
    cuts = np.sort(rng.choice(num_items - 1, num_segments - 1, replace=False)) + 1
    return np.diff(np.concatenate([[0], cuts, [num_items]]))


def random_spans_noise_mask(
    length: int, noise_density: float, mean_noise_span_length: float, rng: np.random.Generator
) -> np.ndarray:
    """(length,) bool, True on noise: alternating non-noise and noise spans, non-noise first, so the window
    always ends in noise (T5's default, ``random_roll=False``)."""
    if noise_density == 0.0:
        return np.zeros(length, dtype=bool)
    padded = max(length, 2)
    noise, spans = span_counts(padded, noise_density, mean_noise_span_length)
    noise_lengths = random_segmentation(noise, spans, rng)
    other_lengths = random_segmentation(padded - noise, spans, rng)
    interleaved = np.stack([other_lengths, noise_lengths], axis=1).reshape(-1)  # (2k,): N1 X1 N2 X2 ...
    is_noise = np.tile([False, True], spans)
    return np.repeat(is_noise, interleaved)[:length]


def random_spans_helper(
    inputs_length: int,
    noise_density: float,
    mean_noise_span_length: float,
    extra_tokens_per_span_inputs: int = 1,
    extra_tokens_per_span_targets: int = 1,
) -> tuple[int, int]:
    """(raw tokens per window, encoded targets length) such that the encoded inputs, EOS included, are as long
    as possible but no longer than ``inputs_length``: the longest raw window whose corrupted form fits. Both
    lengths count the EOS that span corruption appends."""

    def encoded(tokens: int) -> tuple[int, int]:
        noise, spans = span_counts(tokens, noise_density, mean_noise_span_length)
        return (
            tokens - noise + spans * extra_tokens_per_span_inputs + 1,
            noise + spans * extra_tokens_per_span_targets + 1,
        )

    tokens = inputs_length - 1
    while encoded(tokens + 1)[0] <= inputs_length:
        tokens += 1
    targets = encoded(tokens)[1]
    # T5 nudges the targets down to the inputs' (round) length when half the tokens are noise.
    if noise_density == 0.5 and targets > encoded(tokens)[0]:
        tokens, targets = tokens - 1, targets - 1
    return tokens, targets


def corrupt_spans(
    tokens: np.ndarray, noise: np.ndarray, sentinel_ids: Sequence[int], eos_id: int
) -> tuple[np.ndarray, np.ndarray]:
    """(inputs, targets) of one row: each noise span of the inputs and each non-noise span of the targets becomes
    the next sentinel in turn (``<extra_id_0>`` first), runs after the first token of a span are dropped, and both
    end with EOS."""

    def replace_runs(marked: np.ndarray) -> np.ndarray:
        previous = np.concatenate([[False], marked[:-1]])
        first = marked & ~previous  # (n,): the first token of every marked run
        run = np.cumsum(first) - 1  # index of the run each token belongs to
        if first.sum() > len(sentinel_ids):
            raise DataError(
                f"a window of {len(tokens)} tokens has {int(first.sum())} spans, more than the vocabulary's "
                f"{len(sentinel_ids)} sentinels: lower data.max_seq_len or raise objective.mean_noise_span_length"
            )
        sentinels = np.asarray(sentinel_ids, dtype=tokens.dtype)
        replaced = np.where(first, sentinels[np.clip(run, 0, None)], tokens)
        return np.concatenate([replaced[~(marked & previous)], [eos_id]]).astype(tokens.dtype)

    return replace_runs(noise), replace_runs(~noise)


class SpanCorruption:
    """Batch transform: rows of raw tokens (``input_ids`` without specials, ``attention_mask``) become the encoder
    inputs and the decoder's inputs and labels.

    Adds, with B rows, S the corrupted inputs' width and L the targets' (both EOS included):
    S and L are the widths every window of the batch's width could corrupt to (``widths``), so batches of one
    window width have one shape.
      input_ids               (B, S) encoder inputs, right-padded with ``pad_id``
      attention_mask          (B, S) 1 on real tokens
      labels                  (B, L) the targets, ``IGNORE_INDEX`` on padding
      decoder_input_ids       (B, L) the targets shifted right behind ``decoder_start_id`` (T5: the padding id)
      decoder_attention_mask  (B, L) 1 where a label is real
    """

    def __init__(
        self,
        sentinel_ids: Sequence[int],
        eos_id: int,
        pad_id: int,
        decoder_start_id: int,
        noise_density: float = 0.15,
        mean_noise_span_length: float = 3.0,
    ):
        self.sentinel_ids = tuple(int(i) for i in sentinel_ids)
        self.eos_id, self.pad_id, self.decoder_start_id = eos_id, pad_id, decoder_start_id
        self.noise_density, self.mean_noise_span_length = noise_density, mean_noise_span_length
        self._widths: dict[int, tuple[int, int]] = {}

    def widths(self, window: int) -> tuple[int, int]:
        """(inputs, targets) width of a batch of windows of up to ``window`` tokens, EOS included: the longest any
        such window corrupts to, so that every batch of one window width has one shape."""
        if window not in self._widths:
            inputs = targets = 1
            for n in range(1, window + 1):
                noise, spans = span_counts(n, self.noise_density, self.mean_noise_span_length)
                inputs, targets = max(inputs, n - noise + spans + 1), max(targets, noise + spans + 1)
            self._widths[window] = (inputs, targets)
        return self._widths[window]

    def __call__(self, batch: dict[str, torch.Tensor], seeds: Sequence[int]) -> dict[str, torch.Tensor]:
        ids = batch["input_ids"].numpy()
        lengths = batch["attention_mask"].sum(dim=1).tolist()
        pairs = []
        for row, (length, seed) in enumerate(zip(lengths, seeds, strict=True)):
            tokens = ids[row, :length]
            rng = np.random.default_rng(seed)
            noise = random_spans_noise_mask(length, self.noise_density, self.mean_noise_span_length, rng)
            pairs.append(corrupt_spans(tokens, noise, self.sentinel_ids, self.eos_id))
        input_width, target_width = self.widths(ids.shape[1])
        inputs, input_mask = _pad([p[0] for p in pairs], self.pad_id, input_width)
        labels, label_mask = _pad([p[1] for p in pairs], IGNORE_INDEX, target_width)
        decoder_inputs = shift_right(labels, self.decoder_start_id, self.pad_id)
        return {
            "input_ids": inputs,
            "attention_mask": input_mask,
            "labels": labels,
            "decoder_input_ids": decoder_inputs,
            "decoder_attention_mask": label_mask,
        }


def _pad(rows: list[np.ndarray], value: int, width: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Right-pad 1-d rows to ``width``: ((B, T) long values, (B, T) long 1 = real)."""
    out = torch.full((len(rows), width), value, dtype=torch.long)
    mask = torch.zeros((len(rows), width), dtype=torch.long)
    for i, r in enumerate(rows):
        out[i, : len(r)] = torch.as_tensor(r, dtype=torch.long)
        mask[i, : len(r)] = 1
    return out, mask
