"""Decoding for every family that generates: greedy search, sampling (temperature, top-k, top-p) and beam search
with GNMT's length penalty, over a key/value cache (or a recurrent memory).

A family serves generation through a ``Decoder`` (``Backbone.decoder(head)``), three calls over an opaque state:

    prefill(input_ids, attention_mask) -> (logits (B, V) of the first new token, state)
    step(tokens (B,), state)           -> (logits (B, V) of the next token, state)
    reorder(state, index (B',))        -> state keeping rows ``index`` in that order (beam search)

A decoder-only family feeds the (left-padded) prompt in ``prefill`` and one token per ``step`` (``CachedDecoder``
below: GPT); Transformer-XL carries its memory instead of a cache; an encoder-decoder encodes the source in
``prefill`` and starts its decoder from the start token, its cross-attention keys cached once. Search, sampling,
stopping and length normalization live here and know nothing of families.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any, Protocol

import torch
import torch.nn.functional as F

from plm_toolkit.core.command_schema import DecodingOptions
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.nn.positions import position_ids


class Decoder(Protocol):
    # Whether prompts of different lengths may share a batch; else the caller groups them by length.
    supports_padding: bool
    # Where the caller pads: "left" for a prompt the decoder continues (every row's last token in the last column),
    # "right" for an encoder's source (positions start at 0 in every row; the mask hides the padding).
    padding_side: str

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, Any]: ...

    def step(self, tokens: torch.Tensor, state: Any) -> tuple[torch.Tensor, Any]: ...

    def reorder(self, state: Any, index: torch.Tensor) -> Any: ...


@dataclass
class SearchConfig(DecodingOptions):
    # The token that ends a text (finished rows stop there); None: generate max_new_tokens everywhere.
    eos_id: int | None = None


def generate(
    decoder: Decoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    config: SearchConfig,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Continue each row of a left-padded (B, T) prompt batch; returns each row's new token ids (up to and
    including eos_id when it came)."""
    if config.num_beams < 1:
        raise ConfigError(f"num_beams={config.num_beams}: beam search needs at least 1 beam (1 = greedy or sampling)")
    if config.num_beams > 1:
        return beam_search(decoder, input_ids, attention_mask, config)
    return sample(decoder, input_ids, attention_mask, config, generator)


def new_tokens(length: int, max_new_tokens: int, max_length_a: float) -> int:
    """The tokens a row of ``length`` input tokens may generate: max_new_tokens + max_length_a x its length."""
    return int(max_new_tokens + max_length_a * length)


def row_limits(
    decoder: Decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor | None, config: SearchConfig
) -> list[int]:
    """How many tokens each row may generate: max_new_tokens + max_length_a x its input length, at least 1 and at
    most what the decoder's position table leaves (``decoder.max_new_tokens``, where it has one)."""
    if attention_mask is None:  # no padding: every row is as long as the batch
        lengths = [input_ids.shape[1]] * input_ids.shape[0]
    else:
        lengths = attention_mask.sum(dim=1).tolist()
    cap = getattr(decoder, "max_new_tokens", None) or float("inf")
    return [max(1, min(cap, new_tokens(n, config.max_new_tokens, config.max_length_a))) for n in lengths]


def filter_logits(logits: torch.Tensor, top_k: int = 0, top_p: float = 1.0) -> torch.Tensor:
    """(B, V) logits with everything outside the top-k and outside the top-p nucleus set to -inf; the most likely
    token always stays."""
    if top_k > 0 and top_k < logits.shape[-1]:
        kth = logits.topk(top_k, dim=-1).values[..., -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth, float("-inf"))
    if top_p < 1.0:
        ordered, order = logits.sort(dim=-1, descending=True)  # (B, V)
        probs = ordered.softmax(dim=-1)
        before = probs.cumsum(dim=-1) - probs  # the mass of the tokens ranked above each one
        cut = before >= top_p  # never the first: its "before" is 0
        logits = logits.masked_fill(cut.scatter(-1, order, cut), float("-inf"))
    return logits


def choose(logits: torch.Tensor, config: SearchConfig, generator: torch.Generator | None) -> torch.Tensor:
    """(B, V) -> (B,) next tokens: the argmax, or a sample of the filtered, temperature-scaled distribution."""
    if not config.do_sample:
        return logits.argmax(dim=-1)
    # Each row's largest logit shifted to 0 first (the same distribution), divided in double precision (a float32
    # temperature of 1e-300 is 0): a small temperature sends the others to -inf (probability 0) instead of making
    # every probability NaN.
    shifted = (logits - logits.amax(dim=-1, keepdim=True)).double()  # (B, V)
    logits = filter_logits((shifted / config.temperature).float(), config.top_k, config.top_p)
    return torch.multinomial(logits.softmax(dim=-1), 1, generator=generator).squeeze(1)


@torch.no_grad()
def sample(
    decoder: Decoder,
    input_ids: torch.Tensor,
    attention_mask: torch.Tensor,
    config: SearchConfig,
    generator: torch.Generator | None = None,
) -> list[list[int]]:
    """Greedy search or sampling, one token per step for every row; a row stops at eos_id."""
    rows = input_ids.shape[0]
    out: list[list[int]] = [[] for _ in range(rows)]
    done = [False] * rows
    limits = row_limits(decoder, input_ids, attention_mask, config)
    logits, state = decoder.prefill(input_ids, attention_mask)
    for step in range(max(limits)):
        tokens = choose(logits, config, generator)  # (B,)
        for row, token in enumerate(tokens.tolist()):
            if not done[row]:
                out[row].append(token)
                done[row] = token == config.eos_id or step + 1 >= limits[row]
        if all(done) or step == max(limits) - 1:
            break
        logits, state = decoder.step(tokens, state)
    return out


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's lp(Y) = ((5 + |Y|) / (5 + 1))^alpha."""
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def beam_search(
    decoder: Decoder, input_ids: torch.Tensor, attention_mask: torch.Tensor, config: SearchConfig
) -> list[list[int]]:
    """Beam search with ``num_beams`` beams per row (Wu et al. 2016, section 7).

    Every step extends each live beam by every token and keeps the 2 x num_beams best continuations by summed
    log-probability; one ending in eos_id becomes a finished hypothesis (ranked by log p / lp(|Y|)) when it is
    among the num_beams best, the others continue. A row is done when it holds num_beams hypotheses and none of
    its live beams can still beat the worst of them; at its length limit (``row_limits``) a row's live beams join
    the hypotheses. With one beam and alpha = 0 this is greedy search.
    """
    beams, alpha = config.num_beams, config.length_penalty
    rows = input_ids.shape[0]
    limits = row_limits(decoder, input_ids, attention_mask, config)
    logits, state = decoder.prefill(input_ids, attention_mask)
    vocab = logits.shape[-1]
    state = decoder.reorder(state, torch.arange(rows, device=logits.device).repeat_interleave(beams))
    log_probs = logits.float().log_softmax(dim=-1).repeat_interleave(beams, dim=0)  # (B * K, V)
    # All beams of a row start alike: only the first may expand at step 0, or the row would hold K copies.
    scores = torch.full((rows, beams), float("-inf"), device=logits.device)
    scores[:, 0] = 0.0
    sequences = torch.zeros(rows * beams, 0, dtype=torch.long, device=logits.device)
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(rows)]
    done = [False] * rows
    for step in range(max(limits)):
        candidates = (scores[:, :, None] + log_probs.view(rows, beams, vocab)).view(rows, beams * vocab)
        top_scores, top_index = candidates.topk(2 * beams, dim=-1)  # (B, 2K)
        next_scores = torch.full((rows, beams), float("-inf"), device=logits.device)
        next_beam = torch.zeros(rows, beams, dtype=torch.long, device=logits.device)
        next_token = torch.zeros(rows, beams, dtype=torch.long, device=logits.device)
        for row in range(rows):
            kept = 0
            for rank, (value, index) in enumerate(zip(top_scores[row].tolist(), top_index[row].tolist(), strict=True)):
                beam, token = divmod(index, vocab)
                if done[row]:
                    break
                if token == config.eos_id:
                    if rank < beams:
                        tokens = sequences[row * beams + beam].tolist() + [token]
                        _add(finished[row], value / length_penalty(len(tokens), alpha), tokens, beams)
                    continue
                next_scores[row, kept], next_beam[row, kept], next_token[row, kept] = value, beam, token
                kept += 1
                if kept == beams:
                    break
            best_live = next_scores[row, 0].item()
            done[row] = done[row] or (
                len(finished[row]) == beams and finished[row][-1][0] >= best_live / length_penalty(step + 1, alpha)
            )
            if not done[row] and step + 1 >= limits[row]:  # the row's last token: its live beams end here
                for k in range(beams):
                    if next_scores[row, k] > float("-inf"):
                        tokens = sequences[row * beams + next_beam[row, k]].tolist() + [int(next_token[row, k])]
                        _add(
                            finished[row],
                            next_scores[row, k].item() / length_penalty(len(tokens), alpha),
                            tokens,
                            beams,
                        )
                done[row] = True
        if all(done):
            break
        flat = (torch.arange(rows, device=logits.device)[:, None] * beams + next_beam).view(-1)  # (B * K,)
        sequences = torch.cat([sequences[flat], next_token.view(-1, 1)], dim=1)
        scores = next_scores
        if step == max(limits) - 1:
            break
        state = decoder.reorder(state, flat)
        logits, state = decoder.step(next_token.view(-1), state)
        log_probs = logits.float().log_softmax(dim=-1)
    for row in range(rows):
        if done[row]:
            continue
        for beam in range(beams):
            if scores[row, beam] > float("-inf"):
                tokens = sequences[row * beams + beam].tolist()
                _add(finished[row], scores[row, beam].item() / length_penalty(len(tokens), alpha), tokens, beams)
    return [hypotheses[0][1] for hypotheses in finished]


def _add(hypotheses: list[tuple[float, list[int]]], score: float, tokens: list[int], beams: int) -> None:
    """Keep the ``beams`` best finished hypotheses, best first."""
    hypotheses.append((score, tokens))
    hypotheses.sort(key=lambda h: -h[0])
    del hypotheses[beams:]


@dataclass
class CachedState:
    # One nn.layers.LayerCache per layer (or whatever the backbone's cache is).
    cache: Any
    # (B, K) 1 for every real key so far, 0 for left padding; None when no row is padded.
    attention_mask: torch.Tensor | None
    # (B,) position id of the next token of each row.
    next_position: torch.Tensor


class CachedDecoder:
    """A decoder-only backbone with a key/value cache: ``model(input_ids, attention_mask=, position_ids=,
    cache=)`` returning ``hidden`` (B, T, H), ``model.new_cache()``, and an LM head mapping (B, H) to (B, V)."""

    supports_padding = True
    padding_side = "left"

    def __init__(self, model, head):
        self.model, self.head = model, head

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, CachedState]:
        positions = position_ids(attention_mask)  # (B, T): left padding shifts each row back to 0
        cache = self.model.new_cache()
        mask = None if bool(attention_mask.all()) else attention_mask  # no padding: attention needs no mask
        reps = self.model(input_ids, attention_mask=mask, position_ids=positions, cache=cache)
        # Left padding puts every row's last real token in the last column.
        return self.head(reps.hidden[:, -1]), CachedState(cache, mask, positions[:, -1] + 1)

    def step(self, tokens: torch.Tensor, state: CachedState) -> tuple[torch.Tensor, CachedState]:
        mask = None if state.attention_mask is None else F.pad(state.attention_mask, (0, 1), value=1)  # (B, K + 1)
        reps = self.model(
            tokens[:, None], attention_mask=mask, position_ids=state.next_position[:, None], cache=state.cache
        )
        return self.head(reps.hidden[:, -1]), CachedState(state.cache, mask, state.next_position + 1)

    def reorder(self, state: CachedState, index: torch.Tensor) -> CachedState:
        for layer in state.cache:
            layer.reorder(index)
        mask = None if state.attention_mask is None else state.attention_mask[index]
        return CachedState(state.cache, mask, state.next_position[index])


@dataclass
class SlidingState:
    # The cached decoder's state over the current window.
    inner: CachedState
    # (B, W) every token so far (left-padded prompt, then the generated ones) and its mask.
    history: torch.Tensor
    history_mask: torch.Tensor


class SlidingDecoder:
    """A ``CachedDecoder`` whose context slides past the position table: once a row's next token would need a
    position beyond ``window``, the last ``window`` tokens of every row are fed again from position 0 and each
    step after sees only them (nanoGPT's ``generate`` crops its context to ``block_size`` tokens the same way).
    A prompt longer than ``window`` keeps its last ``window`` tokens. Each step past the table reads its window
    anew (no cache across the slide): O(window) per token."""

    supports_padding = True
    padding_side = "left"

    def __init__(self, inner: CachedDecoder, window: int):
        self.inner, self.window = inner, window

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, SlidingState]:
        logits, state = self.inner.prefill(input_ids[:, -self.window :], attention_mask[:, -self.window :])
        return logits, SlidingState(state, input_ids, attention_mask)

    def step(self, tokens: torch.Tensor, state: SlidingState) -> tuple[torch.Tensor, SlidingState]:
        history = torch.cat([state.history, tokens[:, None]], dim=1)  # (B, W + 1)
        history_mask = F.pad(state.history_mask, (0, 1), value=1)
        if bool((state.inner.next_position < self.window).all()):
            logits, inner = self.inner.step(tokens, state.inner)
        else:
            logits, inner = self.inner.prefill(history[:, -self.window :], history_mask[:, -self.window :])
        return logits, SlidingState(inner, history, history_mask)

    def reorder(self, state: SlidingState, index: torch.Tensor) -> SlidingState:
        return SlidingState(self.inner.reorder(state.inner, index), state.history[index], state.history_mask[index])


@dataclass
class EncoderDecoderState:
    # One nn.layers.LayerCache per decoder layer: the self-attention's keys so far, the cross-attention's once.
    cache: Any
    # (B, S, H) encoder states and the (B, S) source mask the cross-attention reads.
    encoder_hidden: torch.Tensor
    attention_mask: torch.Tensor
    # Position of the next decoder input.
    offset: int


class EncoderDecoderDecoder:
    """An encoder-decoder backbone (``models/base.py``: ``encode``, ``decode(..., cache, offset)``, ``new_cache()``,
    ``decoder_start_token_id``): ``prefill`` encodes the right-padded sources once and feeds the decoder its start
    token; each ``step`` feeds one token over the cache."""

    supports_padding = True
    padding_side = "right"

    def __init__(self, model, head):
        self.model, self.head = model, head
        # The start token takes position 0, so a family with a position table generates at most that many tokens.
        self.max_new_tokens = type(model).max_length(model.config)

    def prefill(self, input_ids: torch.Tensor, attention_mask: torch.Tensor) -> tuple[torch.Tensor, Any]:
        encoder_hidden = self.model.encode(input_ids, attention_mask)  # (B, S, H)
        start = torch.full((input_ids.shape[0], 1), self.model.decoder_start_token_id, device=input_ids.device)
        state = EncoderDecoderState(self.model.new_cache(), encoder_hidden, attention_mask, 0)
        return self.step(start[:, 0], state)

    def step(self, tokens: torch.Tensor, state: EncoderDecoderState) -> tuple[torch.Tensor, EncoderDecoderState]:
        hidden = self.model.decode(
            tokens[:, None], state.encoder_hidden, state.attention_mask, state.cache, state.offset
        )
        return self.head(hidden[:, -1]), dataclasses.replace(state, offset=state.offset + 1)

    def reorder(self, state: EncoderDecoderState, index: torch.Tensor) -> EncoderDecoderState:
        for layer in state.cache:
            layer.reorder(index)
        return dataclasses.replace(
            state, encoder_hidden=state.encoder_hidden[index], attention_mask=state.attention_mask[index]
        )
