"""Decoding for encoder-decoder backbones: greedy and beam search with the GNMT length penalty, batched, with the
decoder's key/value cache, and a maximum output length relative to each source's length.

The backbone serves ``encode``, ``decode`` (with a cache from ``new_cache``), ``logits`` and
``decoder_start_token_id`` (``models/base.py`` describes the interface). The encoder runs once per batch;
every step feeds the decoder only the newest token, and its self-attention reads the cached keys and values of the
earlier ones (the cross-attention's are projected from the encoder states once).

Beam search (Vaswani et al. 2017, section 6.1: beam 4, alpha 0.6, max length = source length + 50) scores a
hypothesis Y by log P(Y|X) / lp(Y) with lp(Y) = ((5 + |Y|) / 6)^alpha (Wu et al. 2016, eq. 14), |Y| counting the
end token. Every step extends each of the K live beams by every token and keeps the 2K best candidates; those
among the first K that end a sentence are finished, the K best others live on (fairseq's rule). A sentence is
done when K hypotheses have finished or its length limit is reached (its live beams are then finished as they are);
its best finished hypothesis by normalized score wins. With K = 1 this is greedy decoding exactly.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
from torch import nn

from plm_toolkit.errors import ConfigError


@dataclass
class DecodingConfig:
    # Beam size; 1 decodes greedily (the paper: 4).
    num_beams: int = 4
    # GNMT length penalty alpha: scores are log P / ((5 + length) / 6)^alpha; 0 compares raw log-probabilities.
    length_penalty: float = 0.6
    # Output length limit per sentence: max_length_a * source length + max_length_b tokens (the paper: 1 and 50),
    # never beyond the model's position table.
    max_length_a: float = 1.0
    # The b of the length limit: tokens allowed beyond max_length_a * source length.
    max_length_b: int = 50


def check_decoding(config, prefix: str) -> None:
    """ConfigError naming the key for an impossible decoding setting."""
    if config.num_beams < 1:
        raise ConfigError(f"{prefix}.num_beams={config.num_beams}: the beam needs at least 1 hypothesis (1 = greedy)")
    if config.max_length_a < 0 or config.max_length_b < 0 or config.max_length_a == config.max_length_b == 0:
        raise ConfigError(
            f"{prefix}.max_length_a={config.max_length_a}, {prefix}.max_length_b={config.max_length_b}: the output "
            "length limit a * source length + b must be positive"
        )


def length_limits(attention_mask: torch.Tensor, config, max_positions: int) -> torch.Tensor:
    """(B,) most tokens each sentence may generate, end token included."""
    source_lengths = attention_mask.sum(dim=1).float()  # (B,)
    limits = (config.max_length_a * source_lengths + config.max_length_b).long().clamp(min=1)
    return limits.clamp(max=max_positions)


def gnmt_penalty(length: torch.Tensor | float, alpha: float):
    return ((5.0 + length) / 6.0) ** alpha


@torch.no_grad()
def generate(
    model: nn.Module, input_ids: torch.Tensor, attention_mask: torch.Tensor, config, eos_id: int
) -> list[list[int]]:
    """The best output of every source sentence, as token ids without the start and the end token."""
    if config.num_beams < 1:
        raise ConfigError(f"num_beams={config.num_beams}: the beam needs at least 1 hypothesis (1 = greedy)")
    batch, beams = input_ids.shape[0], config.num_beams
    device = input_ids.device
    # Families with absolute positions cannot go past their table; relative ones (T5) have no such bound.
    max_positions = getattr(model.config, "max_position_embeddings", None) or 1 << 30
    limits = length_limits(attention_mask, config, max_positions)  # (B,)
    encoder_hidden = model.encode(input_ids, attention_mask)  # (B, S, H)
    # Every beam of sentence b reads sentence b's encoder states: rows b * K .. b * K + K - 1.
    encoder_hidden = encoder_hidden.repeat_interleave(beams, dim=0)  # (B*K, S, H)
    memory_mask = attention_mask.repeat_interleave(beams, dim=0)  # (B*K, S)
    cache = model.new_cache()
    tokens = torch.full((batch * beams, 1), model.decoder_start_token_id, dtype=torch.long, device=device)
    # Only beam 0 is live at the start, so the first step does not pick the same token K times.
    scores = torch.full((batch, beams), float("-inf"), device=device)
    scores[:, 0] = 0.0
    finished: list[list[tuple[float, list[int]]]] = [[] for _ in range(batch)]
    done = torch.zeros(batch, dtype=torch.bool, device=device)
    step = 0
    while not bool(done.all()):
        step += 1
        hidden = model.decode(tokens[:, -1:], encoder_hidden, memory_mask, cache, step - 1)  # (B*K, 1, H)
        log_probs = model.logits(hidden[:, -1]).float().log_softmax(dim=-1)  # (B*K, V)
        vocab = log_probs.shape[-1]
        at_limit = step >= limits  # (B,): this step's token is the last one a sentence may take
        if bool(at_limit.any()):
            forced = torch.full_like(log_probs, float("-inf"))
            forced[:, eos_id] = 0.0
            rows = at_limit.repeat_interleave(beams)  # (B*K,)
            log_probs = torch.where(rows[:, None], log_probs + forced, log_probs)
        candidates = (scores[:, :, None] + log_probs.view(batch, beams, vocab)).view(batch, -1)  # (B, K*V)
        top_scores, top_index = candidates.topk(2 * beams, dim=1)  # (B, 2K)
        top_beam, top_token = top_index // vocab, top_index % vocab  # (B, 2K)
        ends = top_token == eos_id  # (B, 2K)
        history = tokens.view(batch, beams, -1)
        for b in torch.nonzero(~done).flatten().tolist():
            for rank in range(beams):  # finish the end tokens among the K best candidates
                if ends[b, rank] and top_scores[b, rank] > float("-inf") and len(finished[b]) < beams:
                    output = history[b, top_beam[b, rank], 1:].tolist()
                    normalized = float(top_scores[b, rank]) / gnmt_penalty(step, config.length_penalty)
                    finished[b].append((normalized, output))
            if len(finished[b]) >= beams or bool(at_limit[b]):
                done[b] = True
        # The K best candidates that do not end live on (a sentence that is done keeps decoding padding).
        live_rank = torch.where(ends, torch.full_like(top_scores, float("-inf")), top_scores)
        next_scores, order = live_rank.topk(beams, dim=1)  # (B, K)
        parent = top_beam.gather(1, order)  # (B, K)
        next_tokens = top_token.gather(1, order)  # (B, K)
        rows = (parent + torch.arange(batch, device=device)[:, None] * beams).flatten()  # (B*K,)
        tokens = torch.cat([tokens[rows], next_tokens.reshape(-1, 1)], dim=1)  # (B*K, step + 1)
        for layer_cache in cache:
            layer_cache.reorder(rows)
        scores = torch.where(done[:, None], torch.full_like(next_scores, float("-inf")), next_scores)
    return [max(hypotheses, key=lambda h: h[0])[1] for hypotheses in finished]
