"""Layouts whose examples depend on what comes before them (RoBERTa's full-sentence blocks, packed greedily) or on
random draws over the whole corpus (BERT's sentence pairs): what decides the examples is computed once, in one
streaming pass, and written as flat files beside the store (``layout_folder``); example k is then cut from the
memory-mapped store and those files when the loader asks for it.

- full sentences: the (shard, first token, end token) of every block, 24 bytes a block;
- sentence pairs: every pair's A and B token ids back to back, where each pair ends, A's length and the label.
"""

from __future__ import annotations

import logging
import random
import shutil
from array import array
from functools import partial
from pathlib import Path

import numpy as np

from plm_toolkit.data.layouts.sentence_pairs import (
    LONG_SENTENCE_PAIRS,
    SplitDocuments,
    document_pairs,
    split_long_sentences,
)
from plm_toolkit.data.layouts.windows import ExampleView
from plm_toolkit.data.store.lock import written_once
from plm_toolkit.data.store.processes import worker_pool
from plm_toolkit.data.store.token_store import StoreSplit, TokenStore, sync_rename
from plm_toolkit.data.tokenization.template import Template
from plm_toolkit.data.units.knowledge import NONE as NO_UNIT
from plm_toolkit.data.units.words import coded_document, pair_codes, uncoded

logger = logging.getLogger(__name__)

# Bump when a change here or in data/layouts/sentence_pairs.py changes what the written files hold.
PACKED_VERSION = 1


def _memmap(path: Path, dtype) -> np.ndarray:
    if path.stat().st_size == 0:
        return np.zeros(0, dtype)
    # A plain ndarray view of the map: indexing it costs no Python-level memmap bookkeeping (a row reads several).
    return np.asarray(np.memmap(path, dtype=dtype, mode="r"))


class _Appender:
    """A flat binary file written in buffered appends (constant memory), synced and renamed when closed."""

    def __init__(self, path: Path, typecode: str):
        self.path, self.values = path, array(typecode)
        self.file = open(path.with_suffix(".part"), "wb")  # noqa: SIM115 - closed in close()

    def extend(self, values) -> None:
        self.values.extend(values)
        if len(self.values) >= 1 << 18:
            self.flush()

    def flush(self) -> None:
        self.file.write(self.values.tobytes())
        del self.values[:]

    def close(self) -> None:
        self.flush()
        self.file.close()
        sync_rename(self.path.with_suffix(".part"), self.path)


# --- RoBERTa's full sentences ------------------------------------------------------------------------------


def pack_blocks(sentence_ends: np.ndarray, document_sentences: np.ndarray, budget: int) -> np.ndarray:
    """(first token, end token) of every block of one shard, as ``pretraining.pack_full_sentences`` packs them:
    whole sentences in order (one longer than a block cut into block-sized pieces), a block closed when the next
    piece does not fit, a separator between documents counted where one falls inside a block."""
    ends = np.asarray(sentence_ends, np.int64)
    if not len(ends):  # a shard that holds no document (a piece of blank lines)
        return np.zeros((0, 2), np.int64)
    starts = np.concatenate([[0], ends[:-1]])
    first_of_document = np.zeros(len(ends), bool)
    first_of_document[np.concatenate([[0], np.asarray(document_sentences, np.int64)[:-1]])] = True
    count = -(-(ends - starts) // budget)  # pieces per sentence
    first_piece = np.cumsum(count) - count
    piece_start = np.repeat(starts, count) + (np.arange(count.sum()) - np.repeat(first_piece, count)) * budget
    piece_end = np.minimum(piece_start + budget, np.repeat(ends, count))
    opens = np.zeros(len(piece_start), np.int64)
    opens[first_piece] = first_of_document
    tokens = np.concatenate([[0], np.cumsum(piece_end - piece_start)])
    separators = np.concatenate([[0], np.cumsum(opens)])
    # Pieces i .. m-1 fit in a block when tokens[m] + separators[m] <= budget + tokens[i] + separators[i + 1]: the
    # separators of the documents that open after the block's first piece.
    reach = np.searchsorted(tokens + separators, budget + tokens[:-1] + separators[1:], side="right") - 1
    blocks, i = [], 0
    while i < len(piece_start):
        blocks.append(i)
        i = int(reach[i])
    blocks = np.asarray(blocks, np.int64)
    last = np.concatenate([blocks[1:], [len(piece_start)]]) - 1
    return np.stack([piece_start[blocks], piece_end[last]], axis=1)


class FullSentenceBlocks(ExampleView):
    """RoBERTa's FULL-SENTENCES (section 4.2): contiguous sentences packed up to ``max_seq_len``, crossing document
    boundaries with ``separator`` between documents, each block wrapped by the tokenizer's single-text template. A
    block never crosses a shard boundary (a shard holds data.shard_bytes of text, 1 to 64 MB by default)."""

    column_names = ["input_ids", "token_type_ids"]

    def __init__(self, split: StoreSplit, template: Template, separator: int, max_seq_len: int, folder: Path):
        self.split, self.template, self.separator = split, template, separator
        budget = max_seq_len - template.num_special

        def build(into: Path) -> None:
            out = _Appender(into / "blocks.bin", "q")
            for number, shard in enumerate(split.shards):
                blocks = pack_blocks(shard.array("sentence_ends"), shard.array("document_sentences"), budget)
                out.extend(np.column_stack([np.full(len(blocks), number), blocks]).reshape(-1).tolist())
            out.close()

        name = f"full_sentences-{budget}-{split.name}-v{PACKED_VERSION}"
        where = written_once(folder / name, build, "full-sentence blocks")
        self.blocks = _memmap(where / "blocks.bin", np.int64).reshape(-1, 3)
        self.with_units = len(split.shards[0].array("units")) > 0 if split.shards else False
        if self.with_units:
            self.column_names = [*self.column_names, "units"]

    def __len__(self) -> int:
        return len(self.blocks)

    def row(self, index: int) -> dict:
        number, first, end = self.blocks[index].tolist()
        shard = self.split.shards[number]
        tokens = shard.ids[first:end]
        at = None  # where a document ends inside the block, relative to its start
        if not getattr(self.split, "separated", False):  # a foreign file's documents end with the separator already
            document_ends = shard.array("document_ends")
            inside = document_ends[document_ends.searchsorted(first, "right") : document_ends.searchsorted(end)]
            if len(inside):
                at = inside.astype(np.int64) - first
        block = tokens.tolist() if at is None else np.insert(tokens.astype(np.int64), at, self.separator).tolist()
        ids, _, starts = self.template.assemble(block)
        row = {"input_ids": ids, "token_type_ids": [0] * len(ids)}
        if self.with_units:
            codes = shard.array("units")[first:end]
            codes = codes.tolist() if at is None else np.insert(np.asarray(codes), at, NO_UNIT).tolist()
            units = [NO_UNIT] * len(ids)
            units[starts["A"] : starts["A"] + len(codes)] = codes
            row["units"] = units
        return row


# --- BERT's sentence pairs and ALBERT's segment pairs: segment A and B ----------------------------------------


class SegmentPairExamples(ExampleView):
    """``[CLS] A [SEP] B [SEP]`` with token types 0 / 1 and ``next_sentence_label``, the pairs BERT's
    create_pretraining_data.py draws from each document (``data/layouts/sentence_pairs.py``), in document order; with
    ``contiguous``, ALBERT's two consecutive segments of one document (SOP swaps them per batch)."""

    column_names = ["input_ids", "token_type_ids", "next_sentence_label"]

    def __init__(
        self, split: StoreSplit, cls_id: int, sep_id: int, settings: dict, seed: int, folder: Path, processes: int = 1
    ):
        self.cls_id, self.sep_id = cls_id, sep_id
        build = lambda into: _write_pairs(split, settings, seed, into, processes)  # noqa: E731
        where = written_once(folder, build, "sentence pairs")
        self.ids = _memmap(where / "ids.bin", split.shards[0].ids.dtype if split.shards else np.uint16)
        self.ends = _memmap(where / "ends.bin", np.int64)
        self.a_lengths = _memmap(where / "a_lengths.bin", np.int32)
        self.labels = _memmap(where / "labels.bin", np.int8)
        self.codes = _memmap(where / "units.bin", np.int8) if (where / "units.bin").is_file() else None
        if self.codes is not None:
            self.column_names = [*self.column_names, "units"]

    def __len__(self) -> int:
        return len(self.ends)

    def row(self, index: int) -> dict:
        start = int(self.ends[index - 1]) if index else 0
        tokens = self.ids[start : int(self.ends[index])].tolist()
        a = int(self.a_lengths[index])
        row = {
            "input_ids": [self.cls_id, *tokens[:a], self.sep_id, *tokens[a:], self.sep_id],
            "token_type_ids": [0] * (a + 2) + [1] * (len(tokens) - a + 1),
            "next_sentence_label": int(self.labels[index]),
        }
        if self.codes is not None:
            codes = self.codes[start : int(self.ends[index])].tolist()
            row["units"] = pair_codes(codes[:a], codes[a:])
        return row

    def lengths(self) -> list[int]:
        return (np.diff(np.concatenate([[0], self.ends])) + 3).tolist()


def _write_pairs(split: StoreSplit, settings: dict, seed: int, into: Path, processes: int) -> None:
    """The pairs of every document in order: shard by shard in ``processes`` worker processes, each writing its
    part, then the parts joined (the pairs of a document do not depend on who draws them)."""
    starts = np.concatenate([[0], np.cumsum([s.num_documents for s in split.shards])]).tolist()
    jobs = [{"folder": str(split.folder), "split": split.name, "shard": k, "first": starts[k], "settings": settings,
             "seed": seed, "out": str(into / f"part-{k:05d}")} for k in range(len(split.shards))]  # fmt: skip
    processes = max(1, min(processes, len(jobs)))
    if processes == 1:
        cut = sum(_shard_pairs(job, split) for job in jobs)
    else:
        with worker_pool(processes) as pool:
            cut = sum(pool.map(_shard_pairs, jobs, chunksize=1))
    names = _PAIR_FILES + (("units.bin",) if split.shards and len(split.shards[0].array("units")) else ())
    outputs = {name: open(into / name, "wb") for name in names}  # noqa: SIM115 - closed below
    try:
        written = 0
        for job in jobs:
            part = Path(job["out"])
            for name in ("ids.bin", "a_lengths.bin", "labels.bin", "units.bin"):
                if name not in outputs:
                    continue
                with open(part / name, "rb") as f:
                    shutil.copyfileobj(f, outputs[name], 1 << 20)
            ends = _memmap(part / "ends.bin", np.int64)
            for lo in range(0, len(ends), 1 << 18):
                outputs["ends.bin"].write((ends[lo : lo + (1 << 18)] + written).tobytes())
            written += int(ends[-1]) if len(ends) else 0
            shutil.rmtree(part)
    finally:
        for output in outputs.values():
            output.close()
    max_tokens = settings["max_seq_len"] - 3
    # Every draw of the pairs (data.pair_draws) and every phase at this length cuts the same sentences: said once.
    warned = (str(split.folder), split.name, max_tokens, bool(settings["contiguous"]))
    if cut and warned not in _CUT_WARNED:
        _CUT_WARNED.add(warned)
        logger.warning(
            "%d sentence(s) of the %s text longer than %d pairs (%d tokens) were cut into pieces of %d tokens; "
            "sentences end at . ! ? before a capital letter, so a text without them reads as one sentence",
            cut, split.name, LONG_SENTENCE_PAIRS, LONG_SENTENCE_PAIRS * max_tokens, max_tokens,
        )  # fmt: skip


# (store folder, split, piece length, in-order pairs) of the cut sentences this process has already warned about.
_CUT_WARNED: set[tuple[str, str, int, bool]] = set()


_PAIR_FILES = ("ids.bin", "ends.bin", "a_lengths.bin", "labels.bin")


def _shard_pairs(job: dict, split: StoreSplit | None = None) -> int:
    """Write the pairs of one shard's documents (``job``) into its part folder; returns how many long sentences
    were cut. Runs in a worker process, which opens the store itself."""
    if split is None:
        split = TokenStore(Path(job["folder"])).split(job["split"])
    settings, first = job["settings"], job["first"]
    max_seq_len, contiguous = settings["max_seq_len"], settings["contiguous"]
    max_tokens = max_seq_len - 3
    shard = split.shards[job["shard"]]
    # A store of units: each token carries its join code through the pairs (data/units/words.py).
    with_units = len(shard.array("units")) > 0
    load = partial(coded_document, split) if with_units else split.document
    documents = SplitDocuments(split.num_documents, load, max_tokens)
    out = Path(job["out"])
    out.mkdir()
    ids = _Appender(out / "ids.bin", "H" if shard.ids.dtype.itemsize == 2 else "I")
    ends, a_lengths, labels = (_Appender(out / n, t) for n, t in (("ends.bin", "q"), ("a_lengths.bin", "i"),
                                                                 ("labels.bin", "b")))  # fmt: skip
    codes = _Appender(out / "units.bin", "b") if with_units else None
    written = long_sentences = 0
    for index in range(first, first + shard.num_documents):
        document, cut = split_long_sentences(load(index), max_tokens)
        long_sentences += cut
        documents.keep(index, document)
        # One generator per document: the pairs do not depend on how the work is split.
        rng = random.Random(f"{job['seed']}:{index}")
        for a, b, label in document_pairs(
            document, index, documents, max_seq_len, settings["short_seq_prob"], settings["random_next_prob"], rng,
            contiguous,
        ):  # fmt: skip
            if codes is not None:
                (a, codes_a), (b, codes_b) = uncoded(a), uncoded(b)
                codes.extend(codes_a + codes_b)
            ids.extend(a)
            ids.extend(b)
            written += len(a) + len(b)
            ends.extend((written,))
            a_lengths.extend((len(a),))
            labels.extend((label,))
    for appender in (ids, ends, a_lengths, labels, *([codes] if codes else [])):
        appender.close()
    return long_sentences
