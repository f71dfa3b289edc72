"""Vocabulary extension for continued pretraining (``data.tokenizer.extend``): domain words added to a released
vocabulary as whole tokens, each with a new embedding row (and output row and bias where the checkpoint has them).

New rows start either around the old rows' mean with a tiny share of their covariance, as transformers'
``resize_token_embeddings`` does since PR #33325 (after Hewitt, "Initializing new word embeddings for pretrained
language models", 2021: a new row far from the others would take a large share of every softmax), or at the mean of
the rows of the pieces the old vocabulary split the word into. Every tensor of the checkpoint whose first dimension
is the vocabulary grows: word embeddings, an untied output layer (T5 v1.1), output biases in the heads.
"""

from __future__ import annotations

import dataclasses
import logging
import re
from collections import Counter
from collections.abc import Callable
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer

from plm_toolkit.core import registry
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.sources.corpus import document_boundary
from plm_toolkit.data.sources.pieces import resolve_sources
from plm_toolkit.data.sources.sampling import sample_texts
from plm_toolkit.data.sources.user_files import read_text
from plm_toolkit.data.tokenization.vocabulary_files import vocabulary_size

log = logging.getLogger("plm_toolkit")

WORD = re.compile(r"[^\W\d_]\w*")  # a letter, then letters, digits or underscores
# transformers' factor on the old rows' covariance (PR #33325).
COVARIANCE_SCALE = 1e-9
# How many of the tokens the normalizer changed the log names.
MERGES_SHOWN = 8


def normalizer_of(tokenizer: Tokenizer) -> Callable[[str], str]:
    return tokenizer.normalizer.normalize_str if tokenizer.normalizer is not None else (lambda text: text)


def file_tokens(path: str, tokenizer: Tokenizer, vocabulary: dict[str, int]) -> list[str]:
    """``extend.tokens_file``'s tokens as the tokenizer's normalizer makes them (what an added token matches: an
    uncased vocabulary would match ``Qwzxyq``, ``QWZXYQ`` and ``qwzxyq`` alike and reach one id of three), each once,
    without those the vocabulary holds; the log says which lines the normalizer changed or merged."""
    normalize = normalizer_of(tokenizer)
    spellings: dict[str, list[str]] = {}
    for line in read_text(path).splitlines():
        if line.strip():
            token = normalize(line.strip()).strip()
            spellings.setdefault(token, [])
            if line.strip() not in spellings[token]:
                spellings[token].append(line.strip())
    changed = [(token, lines) for token, lines in spellings.items() if lines != [token]]
    if changed:
        shown = "; ".join(
            f"{', '.join(lines)} -> {token or '(nothing)'}"
            + (" (in the vocabulary already)" if token in vocabulary else "")
            + (f" ({len(lines)} lines, one token)" if len(lines) > 1 else "")
            for token, lines in changed[:MERGES_SHOWN]
        )
        more = f"; and {len(changed) - MERGES_SHOWN} more" if len(changed) > MERGES_SHOWN else ""
        log.info(
            "data.tokenizer.extend.tokens_file: the tokenizer's normalizer, which an added token is matched after, "
            "changes or merges %d line(s): %s%s",
            sum(len(lines) for _, lines in changed), shown, more,
        )  # fmt: skip
    return [token for token in spellings if token and token not in vocabulary]


def corpus_words(tokenizer: Tokenizer, data_cfg: Any, vocabulary: dict[str, int]) -> list[str]:
    """The training corpus's words (a sample of data.tokenizer.train_sample_bytes, normalized as the tokenizer
    normalizes) seen twice and split by the vocabulary, the most pieces saved first: occurrences x (pieces - 1)."""
    counts: Counter[str] = Counter()
    normalize = normalizer_of(tokenizer)
    sources = resolve_sources(data_cfg, "train")
    budget = int(data_cfg.tokenizer.train_sample_bytes)
    for text in sample_texts(sources, budget, document_boundary(data_cfg), str(data_cfg.text_column)):
        counts.update(WORD.findall(normalize(text)))
    words = [w for w, n in counts.items() if n >= 2 and w not in vocabulary]
    encodings = tokenizer.encode_batch(words, add_special_tokens=False)
    pieces = {word: len(encoding.ids) for word, encoding in zip(words, encodings, strict=True)}
    return [w for _, w in sorted((-(counts[w] * (pieces[w] - 1)), w) for w in words if pieces[w] > 1)]


def wanted_tokens(extend: Any, tokenizer: Tokenizer, data_cfg: Any) -> tuple[list[str], str]:
    """The tokens to add: ``extend.tokens_file``'s, then the ``extend.top_words`` corpus words the vocabulary splits
    most besides them (both, when both are given); tokens the vocabulary holds are skipped. Also: where they came
    from, in words."""
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    tokens = file_tokens(extend.tokens_file, tokenizer, vocabulary) if extend.tokens_file else []
    if extend.top_words:
        listed = set(tokens)
        found = [word for word in corpus_words(tokenizer, data_cfg, vocabulary) if word not in listed]
        if len(found) < int(extend.top_words):
            log.info(
                "data.tokenizer.extend.top_words=%d: %d corpus word(s) are split by the vocabulary and seen twice in "
                "the sample (data.tokenizer.train_sample_bytes); adding those", extend.top_words, len(found),
            )  # fmt: skip
        words = found[: int(extend.top_words)]
        origin = f"{len(tokens)} of tokens_file, {len(words)} corpus words of top_words={extend.top_words}"
        return tokens + words, origin if extend.tokens_file else f"corpus words of top_words={extend.top_words}"
    return tokens, "of tokens_file"


def extend_vocabulary(start: Any, extend: Any, data_cfg: Any, seed: int) -> None:
    """Add ``extend``'s tokens to ``start``'s tokenizer and grow its weights (in place: a ``StartingPoint``)."""
    old = Tokenizer.from_str(start.tokenizer.to_str())
    tokens, origin = wanted_tokens(extend, start.tokenizer, data_cfg)
    if not tokens:
        raise ConfigError(
            "data.tokenizer.extend: no token to add (every one of the file's is in the vocabulary, or no corpus word "
            "is split and seen twice)"
        )
    before = vocabulary_size(old)
    start.tokenizer.add_tokens([AddedToken(t, single_word=True, normalized=True) for t in tokens])
    after = vocabulary_size(start.tokenizer)
    rows = getattr(start.model_config, "vocab_size", None)
    if rows is None:
        raise ConfigError(f"data.tokenizer.extend: model={start.model_config.name} has no token embedding to extend")
    grown = max(rows, after)
    new_ids = torch.arange(before, after)
    pieces = [old.encode(t, add_special_tokens=False).ids for t in tokens]
    generator = torch.Generator().manual_seed(seed)
    start.model_config = dataclasses.replace(start.model_config, vocab_size=grown)
    with torch.device("meta"):
        shapes = {k: v.shape for k, v in registry.MODELS.get(start.model_config.name).builder(start.model_config)
                  .state_dict().items()}  # fmt: skip
    init = getattr(extend.init, "value", extend.init)
    for state, vocabulary_sized in (
        (start.model_state, lambda key, value: shapes[key] != value.shape),
        (start.objective_state, lambda key, value: value.dim() >= 1 and value.shape[0] == rows),
    ):
        for key, value in list(state.items()):
            if vocabulary_sized(key, value):
                state[key] = grow(value, grown, before, new_ids, pieces, init, generator)
    log.info(
        "data.tokenizer.extend: %d token(s) added (%s; ids %d-%d, %s), e.g. %s; the vocabulary now holds %d ids",
        len(tokens), origin, before, after - 1, init, ", ".join(tokens[:8]), grown,
    )  # fmt: skip


def grow(
    tensor: torch.Tensor,
    rows: int,
    known: int,
    new_ids: torch.Tensor,
    pieces: list[list[int]],
    init: str,
    generator: torch.Generator,
) -> torch.Tensor:
    """``tensor`` with ``rows`` rows; the ``new_ids`` rows set by ``init`` from the first ``known`` (the old
    vocabulary's), any other added row (padding to a round size) at the old mean."""
    old = tensor[:known].float()
    out = torch.cat([tensor, tensor.new_zeros(max(rows - len(tensor), 0), *tensor.shape[1:])])
    mean = old.mean(dim=0)
    out[len(tensor) :] = mean.to(out.dtype)
    if init == "pieces_mean":
        out[new_ids] = torch.stack([old[ids].mean(dim=0) for ids in pieces]).to(out.dtype)
    elif old.dim() == 1:  # a bias: around the old mean, 1e-9 of their spread
        noise = torch.randn(len(new_ids), generator=generator) * COVARIANCE_SCALE * old.std()
        out[new_ids] = (mean + noise).to(out.dtype)
    else:
        out[new_ids] = sample_around_mean(old, mean, len(new_ids), generator).to(out.dtype)
    return out


def sample_around_mean(old: torch.Tensor, mean: torch.Tensor, count: int, generator: torch.Generator) -> torch.Tensor:
    """``count`` rows from N(mean, 1e-9 x covariance of ``old``), or the mean where the covariance is not positive
    definite (fewer rows than columns)."""
    centered = old - mean
    covariance = centered.T @ centered / len(old)  # (H, H)
    if len(old) <= old.shape[1] or bool((torch.linalg.eigvalsh(covariance) <= 0).any()):
        return mean.expand(count, -1).clone()
    factor = torch.linalg.cholesky(COVARIANCE_SCALE * covariance)
    return mean + torch.randn(count, old.shape[1], generator=generator) @ factor.T
