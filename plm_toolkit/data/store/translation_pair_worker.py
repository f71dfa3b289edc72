"""A worker process of a store of translation pairs (``data/store/translation_pairs.py``): one piece of an entry (bytes
of a prefix's two files cut after the same lines, or of a JSONL file) tokenized into one shard, every pair a document of
two sentences (source ids, target ids), a pair with an empty side skipped and counted in the shard's header. It
imports neither torch nor datasets.
"""

from __future__ import annotations

import hashlib
import time
from collections.abc import Iterator
from pathlib import Path

from tokenizers import Tokenizer

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.parallel_text import jsonl_pairs
from plm_toolkit.data.sources.user_files import BOM
from plm_toolkit.data.store.shard_worker import raise_if_full
from plm_toolkit.data.store.token_store import ShardWriter

_BATCH_PAIRS = 2000  # pairs per encode_batch call
_worker: dict = {}


def start_pairs(tokenizer_json: str, source_lang: str, target_lang: str, counter=None, _finder=None) -> None:
    """Set up a process (a pool initializer): the tokenizer, the languages, the shared progress counter."""
    _worker.update(tokenizer=Tokenizer.from_str(tokenizer_json), languages=(source_lang, target_lang), counter=counter)


def _range_lines(path: str, start: int, end: int, first_line: int, digest) -> Iterator[tuple[int, str]]:
    """(line number, line without its end) of bytes [start, end) of ``path``, which start and end at lines."""
    with open(path, "rb") as f:
        f.seek(start)
        position, number = start, first_line
        while position < end:
            line = f.readline()
            if not line:
                break
            position += len(line)
            digest.update(line)
            try:
                text = line.decode("utf-8")
            except UnicodeDecodeError as err:
                raise DataError(f"{path}:{number}: not valid UTF-8 ({err.reason}); expected UTF-8 text") from None
            if number == 1 and text.startswith(BOM):
                text = text[1:]
            yield number, text.rstrip("\n").rstrip("\r")
            number += 1


def _piece_pairs(job: dict, digest) -> Iterator[tuple[str, str]]:
    piece, (source_path, target_path) = job["piece"], job["entry"]
    sources = _range_lines(source_path, *piece["source"], piece["first_line"], digest)
    if source_path == target_path:
        yield from ((a, b) for _, a, b in jsonl_pairs(Path(source_path), sources, *_worker["languages"]))
        return
    targets = _range_lines(target_path, *piece["target"], piece["first_line"], digest)
    yield from ((a, b) for (_, a), (_, b) in zip(sources, targets, strict=True))


def tokenize_pairs_piece(job: dict) -> float:
    """Tokenize ``job``'s piece into its shard; returns the CPU seconds it took."""
    started = time.process_time()
    tokenizer, digest = _worker["tokenizer"], hashlib.sha256()
    writer = ShardWriter(Path(job["stem"]), job["dtype"], sentences=True, spellings=False)
    skipped, batch = 0, []

    def encode() -> None:
        encodings = tokenizer.encode_batch([a for a, _ in batch] + [b for _, b in batch], add_special_tokens=False)
        for source, target in zip(encodings[: len(batch)], encodings[len(batch) :], strict=True):
            writer.add_sentence(source.ids)
            writer.add_sentence(target.ids)
            writer.end_document(keep_empty=True)
        batch.clear()

    try:
        for a, b in _piece_pairs(job, digest):
            a, b = a.strip(), b.strip()
            if not a or not b:
                skipped += 1
                continue
            batch.append((a, b))
            if len(batch) == _BATCH_PAIRS:
                encode()
        encode()
        read = {"source": job["entry"], "piece": job["piece"], "sha256": digest.hexdigest()}
        writer.finish({**read, "split": job["split"], "skipped_empty": skipped})
    except OSError as err:
        writer.abandon()
        raise_if_full(err, Path(job["stem"]))
        raise
    except BaseException:
        writer.abandon()
        raise
    if _worker["counter"] is not None:
        with _worker["counter"].get_lock():
            _worker["counter"].value += job["bytes"]
    return time.process_time() - started
