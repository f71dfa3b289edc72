"""Vocabulary files as they are written, read with the checked reader (``data/sources/user_files.py``): a WordPiece
``vocab.txt`` (a token's line is its id), a byte-level BPE ``vocab.json`` + ``merges.txt``; and the id rule every
loaded vocabulary passes (one id per token; gaps are fine, the model gets a row for every id up to the highest)."""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer, models

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.sources.user_files import iter_lines, read_json
from plm_toolkit.data.tokenization.vocab import ROLE_TOKENS

# The roles a vocab.txt (a BERT WordPiece vocabulary) must fill: its template and MLM need every one.
BERT_ROLES = ("pad_id", "unk_id", "cls_id", "sep_id", "mask_id")


def read_vocab_txt(path: Path) -> dict[str, int]:
    """A WordPiece vocab.txt: one token per line, the line number (from 0) is the id; a token on two lines is
    refused (the ids of every later token would shift, an IndexError at the first forward), and so is a vocabulary
    without one of BERT's special tokens (``BERT_ROLES``): its template and MLM need every one."""
    vocab: dict[str, int] = {}
    for number, token in iter_lines(path):
        if not token.strip():
            raise DataError(f"{path}:{number}: empty token; expected one WordPiece token per line")
        if token in vocab:
            raise DataError(
                f"{path}:{number}: {token!r} again (line {vocab[token] + 1}); a token's line number is its id, so "
                "each line must hold a different token"
            )
        vocab[token] = number - 1
    if not vocab:
        raise DataError(f"vocab file {path} is empty; expected one WordPiece token per line")
    for role in BERT_ROLES:  # fail now, naming the file, if a special token is missing
        if not any(token in vocab for token in ROLE_TOKENS[role]):
            names = " or ".join(ROLE_TOKENS[role])
            raise DataError(f"tokenizer file {path} has no {names} token; expected BERT's special tokens")
    return vocab


def read_bpe_files(vocab_path: Path, merges: Path) -> models.BPE:
    """The BPE model of a vocab.json (token -> id) and its merges.txt (``#version`` header, one ``a b`` per line)."""
    if not merges.is_file():
        raise DataError(f"{vocab_path}: no {merges.name} beside it; a byte-level BPE vocabulary needs both")
    vocab = read_json(vocab_path)
    if not isinstance(vocab, dict) or not all(isinstance(i, int) and not isinstance(i, bool) for i in vocab.values()):
        raise DataError(f"{vocab_path}: expected a JSON object of token -> integer id")
    pairs = []
    for number, line in iter_lines(merges):
        if line.startswith("#version") or not line.strip():
            continue
        pair = line.split(" ")
        if len(pair) != 2:
            raise DataError(f"{merges}:{number}: {line!r}; expected one merge per line, two pieces and one space")
        pairs.append((pair[0], pair[1]))
    try:
        return models.BPE(vocab, pairs)
    except Exception as e:  # noqa: BLE001 - the Rust side raises plain Exceptions
        first = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise DataError(f"{vocab_path} with {merges.name} does not load as a byte-level BPE ({first})") from e


def check_ids(tokenizer: Tokenizer, path: Path) -> None:
    """Refuse a vocabulary in which two tokens share an id: one of them could never be told from the other. (Ids
    with gaps are fine: the model gets a row for every id up to the highest, ``vocabulary_size``.)"""
    owners: dict[int, str] = {}
    for token, index in sorted(
        tokenizer.get_vocab(with_added_tokens=True).items(), key=lambda item: (item[1], item[0])
    ):
        if index in owners:
            raise DataError(f"{path}: tokens {owners[index]!r} and {token!r} share id {index}; expected one id each")
        owners[index] = token


def vocabulary_size(tokenizer: Tokenizer) -> int:
    """The rows an embedding table needs for every id of ``tokenizer``: its highest id + 1 (its count of tokens,
    unless a loaded vocabulary skips ids)."""
    ids = tokenizer.get_vocab(with_added_tokens=True).values()
    return max(ids, default=-1) + 1
