"""Tokenizing one piece of a corpus into one shard of the token store (``data/store/token_store.py``), in a worker
process.

It imports only tokenizers and numpy (not torch or datasets), reads its piece as a stream (``data/sources/pieces.py``)
and writes its shard as it goes, so its memory does not grow with the corpus. What it tokenizes (``unit``):
- ``documents``: each document whole, as written (GPT, Transformer-XL, XLNet, T5 streams);
- ``document_sentences``: the same, with the token position where each sentence starts (RoBERTa's full sentences);
- ``sentences``: each sentence alone, as BERT's pairs and ELMo's sentence streams have always read them; with
  ``unk_id``, also the spelling of every token that id stands for (ELMo's character CNN);
- a side channel's unit (``data/store/side_channels.py``): each sentence alone with a code for every token, written
  by the ``encoder`` the worker is given (ERNIE's knowledge units: unit ``units``, ``data/units/corpus.py``), which
  also writes what the shard adds up beside it.
"""

from __future__ import annotations

import errno
import hashlib
import os
import signal
import time
from pathlib import Path

from tokenizers import Tokenizer

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.documents import document_sentences, sentence_starts, token_cuts
from plm_toolkit.data.sources.piece_reader import read_piece
from plm_toolkit.data.sources.pieces import Piece, Source
from plm_toolkit.data.store.token_store import ShardWriter
from plm_toolkit.data.tokenization.pipelines import running_text_tokenizer

# Text gathered (characters) before one encode_batch call.
_BATCH_CHARACTERS = 1 << 18
_BATCH_TEXTS = 4096
# Errors that say the disk (or the quota, or the file size limit) is full.
_FULL = (errno.ENOSPC, errno.EDQUOT, errno.EFBIG)
# Test hook: the main process kills itself (SIGKILL, no clean-up) after this many shards, as a crash would.
KILL_AFTER = "PLM_TOOLKIT_PREPARE_KILL_AFTER"

_worker: dict = {}


def start_worker(tokenizer_json: str, unit: str, unk_id: int | None, counter=None, encoder=None) -> None:
    """Set up this process (a pool initializer): the tokenizer, what to tokenize, the shared progress counter and,
    for a side channel's unit, its encoder."""
    tokenizer = Tokenizer.from_str(tokenizer_json)
    by_sentence = unit == "sentences" or encoder is not None  # the tokenizer as it is, no running-text copy
    _worker.update(
        tokenizer=tokenizer if by_sentence else running_text_tokenizer(tokenizer),
        unit=unit,
        unk_id=unk_id,
        counter=counter,
        encoder=encoder,
    )


def tokenize_piece(job: dict) -> float:
    """Tokenize ``job``'s piece into its shard (``job["stem"]`` + .bin/.idx); returns the CPU seconds it took."""
    started = time.process_time()
    source, piece = Source(**job["source"]), Piece(**job["piece"])
    source.check_unchanged()
    stem = Path(job["stem"])
    unit, encoder = _worker["unit"], _worker["encoder"]
    writer = ShardWriter(stem, job["dtype"], sentences=unit != "documents", spellings=_worker["unk_id"] is not None,
                         codes=encoder is not None)  # fmt: skip
    if encoder is not None:
        encoder.start(source.path)
    digest = hashlib.sha256()
    reported = 0

    def progress(done: int) -> None:
        nonlocal reported
        counter = _worker["counter"]
        if counter is not None and done > reported:
            with counter.get_lock():
                counter.value += done - reported
        reported = max(reported, done)

    try:
        batch: list[tuple[str, bool]] = []
        size = characters = 0
        for item in read_piece(source, piece, job["boundary"], job["text_column"], progress, digest):
            batch.append(item)
            size += len(item[0])
            characters += len(item[0])
            if size >= _BATCH_CHARACTERS or len(batch) >= _BATCH_TEXTS:
                _encode(batch, writer)
                batch, size = [], 0
        _encode(batch, writer)
        source.check_unchanged()
        if encoder is not None:
            encoder.finish(stem)
        read = {"source": source.path, "piece": [piece.start, piece.end], "sha256": digest.hexdigest()}
        # The text's own size (a compressed or JSONL source's file size is not), for plm-prepare's report.
        writer.finish({**read, "split": job["split"], "characters": characters})
    except OSError as err:
        writer.abandon()
        raise_if_full(err, stem)
        raise
    except BaseException:
        writer.abandon()
        raise
    # The CPU time the shard took (reading, tokenizing, writing): a throughput that a busy machine's load does not
    # blur (kept out of the shard, which is the same whoever wrote it).
    return time.process_time() - started


def _encode(batch: list[tuple[str, bool]], writer: ShardWriter) -> None:
    if not batch:
        return
    tokenizer, unit, unk_id = _worker["tokenizer"], _worker["unit"], _worker["unk_id"]
    if _worker["encoder"] is not None:
        _worker["encoder"].encode(batch, writer, tokenizer)
        return
    if unit == "sentences":
        per_text = [document_sentences(text) for text, _ in batch]
        flat = [sentence for sentences in per_text for sentence in sentences]
        encodings = iter(tokenizer.encode_batch(flat, add_special_tokens=False))
        texts = iter(flat)
        for (_, ends), sentences in zip(batch, per_text, strict=True):
            for _ in sentences:
                encoding, text = next(encodings), next(texts)
                ids = encoding.ids
                if ids:
                    writer.add_sentence(ids, _spellings(encoding, text, unk_id) if unk_id in ids else ())
            if ends:
                writer.end_document()
        return
    encodings = tokenizer.encode_batch([text for text, _ in batch], add_special_tokens=False)
    for (text, ends), encoding in zip(batch, encodings, strict=True):
        ids = encoding.ids
        if ids and unit == "documents":
            writer.add_sentence(ids)
        elif ids:
            bounds = [0, *token_cuts(encoding, sentence_starts(text)[1:], len(text)), len(ids)]
            for a, b in zip(bounds, bounds[1:], strict=False):
                writer.add_sentence(ids[a:b])
        if ends:
            writer.end_document()


def _spellings(encoding, text: str, unk_id: int | None) -> list[tuple[int, str]]:
    """(position, text) of each token of ``encoding`` whose id is ``unk_id``."""
    return [
        (k, text[s:e]) for k, (i, (s, e)) in enumerate(zip(encoding.ids, encoding.offsets, strict=True)) if i == unk_id
    ]


def raise_if_full(err: OSError, stem: Path) -> None:
    """DataError naming the shard when ``err`` says the disk is full (or the file too large)."""
    if err.errno in _FULL:
        raise DataError(
            f"no space left writing token store shard {stem}.bin ({os.strerror(err.errno)}); free some space or "
            "set data.store to a larger disk: the finished shards are kept and preparation resumes from them"
        ) from None


def maybe_kill(finished: int) -> None:
    """The test hook: a SIGKILL to this process once ``finished`` reaches $PLM_TOOLKIT_PREPARE_KILL_AFTER."""
    limit = os.environ.get(KILL_AFTER)
    if limit and finished >= int(limit):
        os.kill(os.getpid(), signal.SIGKILL)
