"""Whether a tokenizer belongs to a family's weights: its template must put the special tokens where the family
reads them. A tokenizer.json of the same size from another family (GPT-2's byte-level BPE in a BERT folder) loads
without complaint and every text then goes in without [CLS] or [SEP]: fine-tuned, embedded and exported, it gives
results that look like a model's and are not. The template of one text is checked against the family's.
"""

from __future__ import annotations

from pathlib import Path

from tokenizers import Tokenizer

from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.template import template_of

# Family -> (where its summary token goes, what it is called): the encoders read a text's summary from a special
# token before it ([CLS], RoBERTa's <s>); XLNet from one after it (<cls>).
_SUMMARY = {
    "bert": ("first", "[CLS] (or <s>)"),
    "albert": ("first", "[CLS]"),
    "electra": ("first", "[CLS]"),
    "ernie": ("first", "[CLS]"),
    "xlnet": ("last", "<cls>"),
}


def check_tokenizer_roles(family: str, tokenizer: Tokenizer, tokenizer_file: Path) -> None:
    """CheckpointError naming ``tokenizer_file`` when its template of one text lacks the special token where
    ``family`` (a model config's name) reads the text's summary."""
    if family not in _SUMMARY:
        return
    where, token = _SUMMARY[family]
    pieces = template_of(tokenizer, pair=False).pieces
    piece = pieces[0 if where == "first" else -1][0]
    if piece not in ("A", "B"):
        return
    shown = " ".join(p if p in ("A", "B") else str(tokenizer.id_to_token(p)) for p, _ in pieces)
    raise CheckpointError(
        f"{tokenizer_file}: wraps a text as '{shown}', with no {token} {'before' if where == 'first' else 'after'} "
        f"it where model={family} reads a text's summary; this tokenizer does not belong to these weights (give "
        "the tokenizer.json of the checkpoint they came from)"
    )
