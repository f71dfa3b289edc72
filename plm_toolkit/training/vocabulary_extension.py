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
from typing import Any

import torch
from tokenizers import AddedToken, Tokenizer

from plm_toolkit.core import registry
from plm_toolkit.core.errors import ConfigError
from plm_toolkit.data.sources.corpus import document_boundary
from plm_toolkit.data.sources.piece_reader import sample_texts
from plm_toolkit.data.sources.pieces import resolve_sources
from plm_toolkit.data.sources.user_files import read_text
from plm_toolkit.data.tokenization.vocabulary_files import vocabulary_size

log = logging.getLogger("plm_toolkit")

WORD = re.compile(r"[^\W\d_]\w*")  # a letter, then letters, digits or underscores
# transformers' factor on the old rows' covariance (PR #33325).
COVARIANCE_SCALE = 1e-9


def wanted_tokens(extend: Any, tokenizer: Tokenizer, data_cfg: Any) -> list[str]:
    """The tokens to add: ``extend.tokens_file``'s lines, or the ``extend.top_words`` words of the training corpus
    the vocabulary splits most; tokens it already holds are skipped."""
    vocabulary = tokenizer.get_vocab(with_added_tokens=True)
    if extend.tokens_file:
        lines = read_text(extend.tokens_file).splitlines()
        return list(dict.fromkeys(t.strip() for t in lines if t.strip() and t.strip() not in vocabulary))
    counts: Counter[str] = Counter()
    normalize = tokenizer.normalizer.normalize_str if tokenizer.normalizer is not None else (lambda text: text)
    sources = resolve_sources(data_cfg, "train")
    budget = int(data_cfg.tokenizer.train_sample_bytes)
    for text in sample_texts(sources, budget, document_boundary(data_cfg), str(data_cfg.text_column)):
        counts.update(WORD.findall(normalize(text)))
    pieces = {}
    words = [w for w, n in counts.items() if n >= 2 and w not in vocabulary]
    for word, encoding in zip(words, tokenizer.encode_batch(words, add_special_tokens=False), strict=True):
        pieces[word] = len(encoding.ids)
    saved = sorted((-(counts[w] * (pieces[w] - 1)), w) for w in words if pieces[w] > 1)
    return [w for _, w in saved[: int(extend.top_words)]]


def extend_vocabulary(start: Any, extend: Any, data_cfg: Any, seed: int) -> None:
    """Add ``extend``'s tokens to ``start``'s tokenizer and grow its weights (in place: a ``StartingPoint``)."""
    old = Tokenizer.from_str(start.tokenizer.to_str())
    tokens = wanted_tokens(extend, start.tokenizer, data_cfg)
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
        "data.tokenizer.extend: %d token(s) added (ids %d-%d, %s), e.g. %s; the vocabulary now holds %d ids",
        len(tokens),
        before,
        after - 1,
        init,
        ", ".join(tokens[:8]),
        grown,
    )


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
