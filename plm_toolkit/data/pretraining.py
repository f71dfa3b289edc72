"""Pretraining examples: tokenized sentences packed into BERT sentence pairs, ALBERT segment pairs, RoBERTa
full-sentence blocks, or windows of one long token stream (Transformer-XL / XLNet segments, consumed in order by the
loader).

Two cached steps, both keyed on the corpus contents and every setting that changes their output:
1. `<cache_dir>/tokenized/<key>.arrow`: one row per non-empty document, its sentences as token ids.
2. `<cache_dir>/examples/<key>.arrow`: the examples, `input_ids` and `token_type_ids` (+ `next_sentence_label`).
A second run with the same corpus, tokenizer and settings memory-maps both files instead of rebuilding them.
Masking is not done here: objectives mask each batch afresh (RoBERTa's dynamic masking, section 4.1).
"""

from __future__ import annotations

import logging
import os
import random
from pathlib import Path
from typing import Any

import datasets
import numpy as np
import pyarrow as pa
from tokenizers import Tokenizer

from plm_toolkit.data.corpus import (
    cache_root,
    choice,
    document_sentences,
    read_documents,
    split_documents,
    stable_hash,
)
from plm_toolkit.data.plan import LAYOUTS
from plm_toolkit.data.template import Template, template_of
from plm_toolkit.data.vocab import Vocab
from plm_toolkit.errors import DataError

PAIR_LAYOUTS = ("sentence_pairs", "segment_pairs")
# Bump when a change to this file or to the sentence splitter changes what the cached files hold.
FORMAT_VERSION = 2
_BATCH = 256  # documents per map batch
# A sentence longer than this many pairs is cut into pair-sized pieces instead of truncated.
LONG_SENTENCE_PAIRS = 4

logger = logging.getLogger(__name__)


def build_pretraining_examples(
    data_cfg: Any,
    tokenizer: Tokenizer,
    vocab: Vocab,
    layout: Any,
    split: str,
    seed: int,
    window: tuple[int, int] | None = None,
) -> datasets.Dataset | None:
    """The examples of `split` in `layout`, or None when the split has no source. Deterministic given `seed`.

    ``window`` = (length, stride) of the "streams" layout; default (max_seq_len + 1, max_seq_len): inputs and
    next-token targets of consecutive segments.
    """
    layout = choice(layout)
    if layout not in LAYOUTS:
        raise ValueError(f"layout must be one of {LAYOUTS}, got {layout!r}")
    if data_cfg.max_seq_len < 8:
        raise DataError(f"data.max_seq_len={data_cfg.max_seq_len} is too short; expected at least 8 tokens")
    documents = read_documents(data_cfg, split)
    if documents is None:
        return None
    tokenized = tokenize_documents(documents, tokenizer, data_cfg)
    settings = (layout, int(data_cfg.max_seq_len), FORMAT_VERSION, int(seed))
    if layout in PAIR_LAYOUTS:
        settings += (float(data_cfg.short_seq_prob), float(data_cfg.random_next_prob))
    if layout == "streams":
        window = window or (int(data_cfg.max_seq_len) + 1, int(data_cfg.max_seq_len))
        settings += tuple(window)
    path = cache_root(data_cfg) / "examples" / f"{stable_hash(tokenized._fingerprint, settings)}.arrow"
    if layout == "segment_pairs":
        return _sentence_pairs(tokenized, vocab, data_cfg, seed, path, contiguous=True)
    if layout == "sentence_pairs":
        if len(tokenized) < 2:
            logger.warning(
                "%s holds one document: random next sentences come from elsewhere in that document; separate "
                "documents with a blank line for proper NSP negatives",
                documents.source,
            )
        return _sentence_pairs(tokenized, vocab, data_cfg, seed, path)
    if layout == "streams":
        return _stream_windows(tokenized, vocab, window[0], window[1], path)
    single = template_of(tokenizer, pair=False)
    return _full_sentences(tokenized, single, vocab.document_separator, int(data_cfg.max_seq_len), path)


# --- step 1: sentences -> token ids -----------------------------------------------------------------------


def tokenize_documents(documents: Any, tokenizer: Tokenizer, data_cfg: Any) -> datasets.Dataset:
    """One row per document with at least one sentence: `sentences`, a list of token-id lists (no specials)."""
    key = stable_hash(documents.fingerprint, tokenizer.to_str(), FORMAT_VERSION)
    path = cache_root(data_cfg) / "tokenized" / f"{key}.arrow"
    path.parent.mkdir(parents=True, exist_ok=True)

    def tokenize(batch: dict[str, list]) -> dict[str, list]:
        texts = [document for block in batch["text"] for document in split_documents(block or "")]
        per_document = [document_sentences(text) for text in texts]
        flat = [s for sentences in per_document for s in sentences]
        ids = [e.ids for e in tokenizer.encode_batch(flat, add_special_tokens=False)]
        out, start = [], 0
        for sentences in per_document:
            document = [i for i in ids[start : start + len(sentences)] if i]
            start += len(sentences)
            if document:  # blank documents are dropped (a batched map may return fewer rows)
                out.append(document)
        return {"sentences": out}

    tokenized = documents.dataset.map(
        tokenize,
        batched=True,
        batch_size=_BATCH,
        remove_columns=documents.dataset.column_names,
        features=datasets.Features({"sentences": [[datasets.Value("int32")]]}),
        cache_file_name=str(path),
        new_fingerprint=key,
        desc="tokenizing",
    )
    if len(tokenized) == 0:
        raise DataError(f"{documents.source} has no text; expected documents separated by blank lines")
    return tokenized


# --- step 2a: BERT sentence pairs --------------------------------------------------------------------------


def _sentence_pairs(
    tokenized: datasets.Dataset, vocab: Vocab, data_cfg: Any, seed: int, path: Path, contiguous: bool = False
) -> datasets.Dataset:
    """``[CLS] A [SEP] B [SEP]`` with token types 0 / 1, whatever the tokenizer's own pair template: this is the
    input format of the segment objectives (NSP, SOP), whose sentence-order swap relies on it."""
    cls_id = vocab.require("cls_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    sep_id = vocab.require("sep_id", "a sentence-pair layout ([CLS] A [SEP] B [SEP])")
    max_seq_len = int(data_cfg.max_seq_len)
    short_seq_prob = float(data_cfg.short_seq_prob)
    random_next_prob = float(data_cfg.random_next_prob)

    long_sentences = 0
    documents = _SplitDocuments(tokenized, max_seq_len - 3)

    def build(batch: dict[str, list], indices: list[int]) -> dict[str, list]:
        nonlocal long_sentences
        out: dict[str, list] = {"input_ids": [], "token_type_ids": [], "next_sentence_label": []}
        for document, index in zip(batch["sentences"], indices, strict=True):
            document, split = split_long_sentences(document, max_seq_len - 3)
            long_sentences += split
            documents.keep(index, document)
            # One generator per document: the result does not depend on batching or worker processes.
            rng = random.Random(f"{seed}:{index}")
            for a, b, label in document_pairs(
                document, index, documents, max_seq_len, short_seq_prob, random_next_prob, rng, contiguous
            ):
                out["input_ids"].append([cls_id, *a, sep_id, *b, sep_id])
                out["token_type_ids"].append([0] * (len(a) + 2) + [1] * (len(b) + 1))
                out["next_sentence_label"].append(label)
        return out

    examples = tokenized.map(
        build,
        batched=True,
        batch_size=_BATCH,
        with_indices=True,
        remove_columns=["sentences"],
        features=datasets.Features(
            {
                "input_ids": [datasets.Value("int32")],
                "token_type_ids": [datasets.Value("int8")],
                "next_sentence_label": datasets.Value("int8"),
            }
        ),
        cache_file_name=str(path),
        new_fingerprint=path.stem,
        desc="building sentence pairs",
    )
    if long_sentences:
        logger.warning(
            "%d sentence(s) longer than %d pairs (%d tokens) were cut into pieces of %d tokens; sentences end at "
            ". ! ? before a capital letter, so a text without them reads as one sentence",
            long_sentences,
            LONG_SENTENCE_PAIRS,
            LONG_SENTENCE_PAIRS * (max_seq_len - 3),
            max_seq_len - 3,
        )
    return examples


class _SplitDocuments:
    """Document j's sentences (long ones split) by index, for segment B drawn from another document: the last few
    are kept, so a long document is read from the dataset once, not once per pair."""

    def __init__(self, tokenized: datasets.Dataset, max_tokens: int, size: int = 8):
        self.tokenized, self.max_tokens, self.size = tokenized, max_tokens, size
        self.kept: dict[int, list[list[int]]] = {}

    def __len__(self) -> int:
        return len(self.tokenized)

    def keep(self, index: int, sentences: list[list[int]]) -> None:
        self.kept.pop(index, None)
        self.kept[index] = sentences
        while len(self.kept) > self.size:
            del self.kept[next(iter(self.kept))]

    def __getitem__(self, index: int) -> list[list[int]]:
        if index not in self.kept:
            self.keep(index, split_long_sentences(self.tokenized[index]["sentences"], self.max_tokens)[0])
        return self.kept[index]


def split_long_sentences(document: list[list[int]], max_tokens: int) -> tuple[list[list[int]], int]:
    """The document with every sentence longer than LONG_SENTENCE_PAIRS pairs cut into pieces of ``max_tokens``
    (what a pair holds), and how many sentences were cut. Keeps all the text, in order.

    A sentence a little longer than a pair is left whole, to be truncated as BERT's reference does (splitting
    those changes the pairs measurably); one far longer is a text the sentence splitter found no end in (a
    paragraph without punctuation, a list, a one-line corpus), whose truncation would drop nearly all of it."""
    limit = LONG_SENTENCE_PAIRS * max_tokens
    if all(len(sentence) <= limit for sentence in document):
        return document, 0
    pieces, split = [], 0
    for sentence in document:
        if len(sentence) > limit:
            split += 1
            pieces.extend(sentence[i : i + max_tokens] for i in range(0, len(sentence), max_tokens))
        else:
            pieces.append(sentence)
    return pieces, split


def document_pairs(
    document: list[list[int]],
    index: int,
    documents: Any,
    max_seq_len: int,
    short_seq_prob: float,
    random_next_prob: float,
    rng: random.Random,
    contiguous: bool = False,
):
    """Yield (tokens_a, tokens_b, next_sentence_label) for one document, as BERT's create_pretraining_data.py
    (create_instances_from_document) does; `documents[j]` is document j's sentences.

    Whole sentences gather into a chunk until it reaches the target length; the chunk splits at a random
    sentence boundary into A and B. With probability `random_next_prob` (and always when the chunk is a single
    sentence) B is instead read from a random other document (label 1) and the sentences after A go back to be
    used by the next chunk; otherwise B is A's continuation (label 0). Unlike the reference, which draws one
    target per document, a short target is drawn per chunk so that `short_seq_prob` is the share of pairs.
    """
    max_tokens = max_seq_len - 3  # [CLS] A [SEP] B [SEP]
    chunk: list[list[int]] = []
    length = 0
    target = _target_length(max_tokens, short_seq_prob, rng)
    i = 0
    while i < len(document):
        chunk.append(document[i])
        length += len(document[i])
        if contiguous and (i == len(document) - 1 or length >= target):
            if len(chunk) >= 2:
                a_end = rng.randint(1, len(chunk) - 1)
                tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            else:
                cut = rng.randint(1, len(chunk[0]) - 1) if len(chunk[0]) >= 2 else 0
                tokens_a, tokens_b = chunk[0][:cut], chunk[0][cut:]
            if tokens_a and tokens_b:
                _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
                yield tokens_a, tokens_b, 0
            chunk, length = [], 0
            target = _target_length(max_tokens, short_seq_prob, rng)
        elif i == len(document) - 1 or length >= target:
            a_end = rng.randint(1, len(chunk) - 1) if len(chunk) >= 2 else 1
            tokens_a = [t for sentence in chunk[:a_end] for t in sentence]
            if len(chunk) == 1 or rng.random() < random_next_prob:
                label = 1
                following = i - len(chunk) + 1 + a_end  # the sentence that really follows A
                tokens_b = _random_segment(documents, index, following, max(target - len(tokens_a), 1), rng)
                i -= len(chunk) - a_end  # put the unused sentences back
            else:
                label = 0
                tokens_b = [t for sentence in chunk[a_end:] for t in sentence]
            _truncate_pair(tokens_a, tokens_b, max_tokens, rng)
            yield tokens_a, tokens_b, label
            chunk, length = [], 0
            target = _target_length(max_tokens, short_seq_prob, rng)
        i += 1


def _target_length(max_tokens: int, short_seq_prob: float, rng: random.Random) -> int:
    # BERT mostly fills the sequence, but sometimes trains on short ones to close the gap between
    # pretraining and fine-tuning on short inputs.
    return rng.randint(2, max_tokens) if rng.random() < short_seq_prob else max_tokens


def _random_segment(documents: Any, index: int, following: int, target: int, rng: random.Random) -> list[int]:
    """Sentences from a random position of a random document other than `index`, up to `target` tokens.

    A corpus of one document has no other: B then starts anywhere in it but at `following` (A's real next
    sentence), which is what the reference ends up doing after ten tries to draw another document.
    """
    if len(documents) > 1:
        other = rng.randrange(len(documents) - 1)
        other += other >= index  # uniform over the other documents
        sentences = documents[other]
        start = rng.randrange(len(sentences))
    else:
        sentences = documents[index]
        start = rng.randrange(max(len(sentences) - 1, 1))
        start += len(sentences) > 1 and start >= following
    tokens: list[int] = []
    for k in range(start, len(sentences)):  # by index: a slice would copy the rest of a long document
        tokens.extend(sentences[k])
        if len(tokens) >= target:
            break
    return tokens


def _truncate_pair(tokens_a: list[int], tokens_b: list[int], max_tokens: int, rng: random.Random) -> None:
    """Trim the longer segment one token at a time, from the front or the back at random, until the pair fits (in
    place), as BERT's truncate_seq_pair does; computed with slices, so the cost is linear in the pair's length."""
    excess = len(tokens_a) + len(tokens_b) - max_tokens
    if excess <= 0:
        return
    # The longer segment loses tokens until the two are even; then B and A lose one in turn, B first.
    gap = min(abs(len(tokens_a) - len(tokens_b)), excess)
    rest = excess - gap
    cut_a = rest // 2 + (gap if len(tokens_a) > len(tokens_b) else 0)
    cut_b = excess - cut_a
    for tokens, cut in ((tokens_a, cut_a), (tokens_b, cut_b)):
        # Trimming both ends at random avoids a bias towards sentence beginnings or ends.
        front = sum(rng.random() < 0.5 for _ in range(cut))
        del tokens[:front]
        del tokens[len(tokens) - (cut - front) :]


# --- step 2b: RoBERTa full sentences ----------------------------------------------------------------------


def _full_sentences(
    tokenized: datasets.Dataset, template: Template, separator: int, max_seq_len: int, path: Path
) -> datasets.Dataset:
    """Contiguous sentences packed up to max_seq_len (RoBERTa's FULL-SENTENCES, section 4.2), crossing document
    boundaries with ``separator`` between documents, each block wrapped by the tokenizer's single-text template
    (BERT: ``[CLS] ... [SEP]``). Sequential over the corpus, so it is written here with pyarrow (one pass,
    constant memory) rather than by a per-document map."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        schema = pa.schema([("input_ids", pa.list_(pa.int32())), ("token_type_ids", pa.list_(pa.int8()))])
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            rows: list[list[int]] = []
            budget = max_seq_len - template.num_special
            for block in pack_full_sentences(_iter_documents(tokenized), budget, separator):
                rows.append(template.assemble(block)[0])
                if len(rows) == 1000:
                    writer.write_batch(_record_batch(rows, schema))
                    rows = []
            if rows:
                writer.write_batch(_record_batch(rows, schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))


def _iter_documents(tokenized: datasets.Dataset):
    for batch in tokenized.iter(batch_size=_BATCH):
        yield from batch["sentences"]


def _record_batch(rows: list[list[int]], schema: pa.Schema) -> pa.RecordBatch:
    types = [[0] * len(r) for r in rows]
    return pa.record_batch([pa.array(rows, schema.field(0).type), pa.array(types, schema.field(1).type)], schema)


def pack_full_sentences(documents, max_tokens: int, sep_id: int):
    """Yield blocks of at most `max_tokens` ids: whole sentences in corpus order, `sep_id` between documents.

    A block is closed when the next sentence does not fit; a block never starts or ends with the document
    separator; a sentence longer than a block is cut into block-sized pieces.
    """
    block: list[int] = []
    for document in documents:
        separated = bool(block)
        if separated:
            block.append(sep_id)
        for sentence in document:
            for start in range(0, len(sentence), max_tokens):
                piece = sentence[start : start + max_tokens]
                if len(block) + len(piece) > max_tokens:
                    if separated:
                        block.pop()  # the next document starts a fresh block instead
                    yield block
                    block = []
                separated = False
                block.extend(piece)
    if block:
        yield block


# --- step 2c: Transformer-XL / XLNet token-stream windows ---------------------------------------------------


def _stream_windows(
    tokenized: datasets.Dataset, vocab: Vocab, length: int, stride: int, path: Path
) -> datasets.Dataset:
    """The corpus as one token stream (end-of-text, else [SEP], between documents), cut into windows of ``length``
    tokens starting every ``stride`` tokens: window k covers stream[k * stride : k * stride + length]. The
    loader's "stream" order (``data/loader.py``) deals them out so that consecutive batches hold consecutive windows
    of each of batch_size sub-streams, which is what makes a recurrent memory meaningful (Transformer-XL section
    3.2); GPT reads them shuffled."""
    if not path.is_file():
        path.parent.mkdir(parents=True, exist_ok=True)
        pieces = []
        for document in _iter_documents(tokenized):
            pieces.extend(document)
            pieces.append([vocab.document_separator])
        stream = np.fromiter((t for piece in pieces for t in piece), dtype=np.int32)
        count = (len(stream) - length) // stride + 1
        if count < 1:
            raise DataError(f"the corpus has {len(stream)} tokens, fewer than one window of {length}")
        starts = np.arange(count)[:, None] * stride  # (count, 1)
        windows = stream[starts + np.arange(length)[None, :]]  # (count, length)
        schema = pa.schema([("input_ids", pa.list_(pa.int32()))])
        temporary = path.with_name(f".{path.name}.{os.getpid()}.tmp")
        with pa.OSFile(str(temporary), "wb") as sink, pa.ipc.new_stream(sink, schema) as writer:
            for lo in range(0, count, 1000):
                values = pa.array(windows[lo : lo + 1000].reshape(-1))
                rows = pa.FixedSizeListArray.from_arrays(values, length).cast(pa.list_(pa.int32()))
                writer.write_batch(pa.record_batch([rows], schema))
        os.replace(temporary, path)
    return datasets.Dataset.from_file(str(path))
