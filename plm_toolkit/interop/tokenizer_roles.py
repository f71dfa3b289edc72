"""Whether a tokenizer belongs to a family's weights: its template must put the special tokens where the family
reads them. A tokenizer.json of the same size from another family loads without complaint: GPT-2's byte-level BPE in
a BERT folder sends every text in without [CLS] or [SEP], BERT's WordPiece in a GPT-2 folder starts every text with a
[CLS] the weights never saw. Fine-tuned, embedded, exported or generated from, the model gives results that look
like a model's and are not. The template of one text is checked against the family's.

Each family's class says what its tokenizer must do (``summary_token`` and ``summary_position`` for the encoders, which
read a text's summary from a special token: BERT's ``[CLS] A [SEP]``, XLNet's ``A [SEP] [CLS]``; ``text_template`` for
the causal and encoder-decoder families, which read a text from its first token: GPT-2's ``A <|endoftext|>``, the
Transformer's ``<s> A </s>``). Transformer-XL and ELMo say neither: whichever their tokenizer, a special token comes
first.

A plm-train run may train a GPT, T5 or Transformer over any kind (a character-level GPT: ``[CLS] A [SEP]``), which
no template tells from a swapped file: a checkpoint whose config.yaml says its run chose its tokenizer keeps it, and so
does a Hugging Face folder whose tokenizer_config.json names the token before the text (plm-export's of such a run).
"""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

import yaml
from tokenizers import Tokenizer

from plm_toolkit.config.resolve import model_class
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.choices import choice
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.core.registry import MODELS
from plm_toolkit.data.tokenization.template import Template


def check_tokenizer_roles(family: str, tokenizer: Tokenizer, template: Template, tokenizer_file: Path) -> None:
    """CheckpointError naming ``tokenizer_file`` when ``template`` (its tokenizer's of one text) lacks the special
    token where ``family`` (a model config's name) reads the text's summary, or, for a family that reads a text from
    its first token, puts a special token before the text that the family's own tokenizer does not."""
    pieces = template.pieces
    shown = " ".join(p if p in ("A", "B") else str(tokenizer.id_to_token(p)) for p, _ in pieces)
    load_all()
    family_class = model_class(family) if family in MODELS else None
    if family_class is not None and family_class.summary_token is not None:
        where, token = family_class.summary_position, family_class.summary_token
        if pieces[0 if where == "first" else -1][0] not in ("A", "B"):
            return
        side = "before" if where == "first" else "after"
        problem = f"with no {token} {side} it where model={family} reads a text's summary"
    elif family_class is not None and family_class.text_template is not None:
        own = family_class.text_template
        first = pieces[0][0]
        if first in ("A", "B"):
            return
        token = tokenizer.id_to_token(first)
        before = own.split()[: own.split().index("A")]  # what the family's own template puts before a text
        if token in before or _chosen_by_its_run(tokenizer_file, _auto_kind(family), token):
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


def _auto_kind(family: str) -> str:
    """The tokenizer kind ``data.tokenizer.kind=auto`` trains for ``family``: its config's ``tokenizer`` default."""
    fields = {f.name: f for f in dataclasses.fields(MODELS.get(family).config_cls)}
    return choice(fields["tokenizer"].default)


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
