"""Whether a tokenizer belongs to a family's weights: its template must put the special tokens where the family
reads them. A tokenizer.json of the same size from another family loads without complaint: GPT-2's byte-level BPE in
a BERT folder sends every text in without [CLS] or [SEP], BERT's WordPiece in a GPT-2 folder starts every text with a
[CLS] the weights never saw. Fine-tuned, embedded, exported or generated from, the model gives results that look
like a model's and are not. The template of one text is checked against the family's.

The families' own templates of one text (what plm-train trains with data.tokenizer.kind=auto, what interop reads
from a Hugging Face folder):

- encoders: BERT, ELECTRA, ALBERT, ERNIE ``[CLS] A [SEP]``, RoBERTa ``<s> A </s>``, XLNet ``A [SEP] [CLS]``;
- GPT, GPT-2 ``A <|endoftext|>`` (gpt2_bpe; GPT-2's tokenizer.json and vocab.json, and a causal export, load with
  it); openai-gpt's tokenizer.json ``A``; T5 ``A </s>`` (t5_unigram and released T5); the Transformer
  ``<s> A </s>`` (bpe);
- Transformer-XL ``[CLS] A [SEP]`` (auto is wordpiece) or ``<S> A </S>`` (word, the WikiText-103 recipe), ELMo
  ``<S> A </S>``: either way a special token comes first, so neither is checked.

A plm-train run may train a GPT, T5 or Transformer over any kind (a character-level GPT: ``[CLS] A [SEP]``), which
no template tells from a swapped file: a checkpoint whose config.yaml says its run chose its tokenizer keeps it, and so
does a Hugging Face folder whose tokenizer_config.json names the token before the text (plm-export's of such a run).
"""

from __future__ import annotations

import json
from pathlib import Path

import yaml
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
# Family -> (the special tokens its own template may put before a text, that template, its data.tokenizer.kind=auto):
# the causal and encoder-decoder families read a text from its first token.
_TEXT_FIRST = {
    "gpt": ((), "A <|endoftext|>", "gpt2_bpe"),
    "gpt2": ((), "A <|endoftext|>", "gpt2_bpe"),
    "t5": ((), "A </s>", "t5_unigram"),
    "transformer": (("<s>",), "<s> A </s>", "bpe"),
}


def check_tokenizer_roles(family: str, tokenizer: Tokenizer, tokenizer_file: Path) -> None:
    """CheckpointError naming ``tokenizer_file`` when its template of one text lacks the special token where
    ``family`` (a model config's name) reads the text's summary, or, for a family that reads a text from its first
    token, puts a special token before the text that the family's own tokenizer does not."""
    pieces = template_of(tokenizer, pair=False).pieces
    shown = " ".join(p if p in ("A", "B") else str(tokenizer.id_to_token(p)) for p, _ in pieces)
    if family in _SUMMARY:
        where, token = _SUMMARY[family]
        if pieces[0 if where == "first" else -1][0] not in ("A", "B"):
            return
        side = "before" if where == "first" else "after"
        problem = f"with no {token} {side} it where model={family} reads a text's summary"
    elif family in _TEXT_FIRST:
        allowed, own, kind = _TEXT_FIRST[family]
        first = pieces[0][0]
        if first in ("A", "B"):
            return
        token = tokenizer.id_to_token(first)
        if token in allowed or _chosen_by_its_run(tokenizer_file, kind, token):
            return
        problem = (
            f"with {token} before it where model={family} reads a text from its first token "
            f"(its own tokenizer wraps it as '{own}')"
        )
    else:
        return
    raise CheckpointError(
        f"{tokenizer_file}: wraps a text as '{shown}', {problem}; this tokenizer does not belong to these weights "
        "(give the tokenizer.json of the checkpoint they came from)"
    )


def _chosen_by_its_run(tokenizer_file: Path, own_kind: str, first: str) -> bool:
    """Whether the folder of ``tokenizer_file`` says the weights were trained with it, though it is not the family's
    own kind: a plm-train checkpoint's config.yaml records another data.tokenizer.kind (a character-level GPT), a
    data.tokenizer.path, the model.checkpoint its run started from (a continued or fine-tuned run), or no
    data.tokenizer at all; a Hugging Face folder's tokenizer_config.json names ``first`` (the token before a text)
    by its role, as plm-export writes it for a fine-tuned GPT over a WordPiece vocabulary. A tokenizer.json put in
    place of another is not named there: GPT-2's tokenizer_config.json names <|endoftext|> alone."""
    folder = tokenizer_file.parent
    if not (folder / "config.yaml").is_file():
        try:
            settings = json.loads((folder / "tokenizer_config.json").read_text(encoding="utf-8"))
        except (OSError, UnicodeDecodeError, ValueError):
            return False
        return isinstance(settings, dict) and first in settings.values()
    try:
        saved = yaml.safe_load((folder / "config.yaml").read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, yaml.YAMLError):
        return False
    if not isinstance(saved, dict):
        return False
    model, data = saved.get("model"), saved.get("data")
    if isinstance(model, dict) and model.get("checkpoint"):
        return True
    tokenizer = data.get("tokenizer") if isinstance(data, dict) else None
    if not isinstance(tokenizer, dict):
        return True
    return bool(tokenizer.get("path")) or tokenizer.get("kind", "auto") not in ("auto", own_kind)
