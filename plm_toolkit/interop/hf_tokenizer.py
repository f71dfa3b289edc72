"""The tokenizer of an exported Hugging Face folder, so that ``AutoTokenizer.from_pretrained(folder)`` and the Auto
model give the run's ids, padding and generation.

Each family's adapter declares what its export needs (``TokenizerLayout``: padding side, the inputs its transformers
model reads, whether texts keep the run's template, the special-token ids its config class holds); this module writes
it, for every family alike:

- ``tokenizer.json``: the run's pipeline as it is, so that nothing is rebuilt. A causal language model's export
  encodes a text alone (a template that adds nothing), as ``plm-generate`` encodes a prompt, as the ``clm`` objective
  reads running text and as transformers' GPT-2 tokenizer does; a fine-tuned one keeps the run's template (GPT-2's
  ``A <|endoftext|>``, whose last token its head reads). A byte-level BPE is also written as ``vocab.json`` +
  ``merges.txt``.
- ``tokenizer_config.json``: ``PreTrainedTokenizerFast``, which reads tokenizer.json exactly (transformers' family
  classes rebuild their own normalization around the vocabulary: ``AlbertTokenizer`` expects a unigram model,
  ``OpenAIGPTTokenizer`` a lower-casing BPE of its own); the special tokens by role (T5's sentinels as additional
  special tokens); ``padding_side``; ``model_max_length`` (the position table's length, where there is one);
  ``model_input_names``; and ``clean_up_tokenization_spaces: false``, so that decoding gives the run's text.
- ``config.json``: ``pad_token_id``, ``bos_token_id``, ``eos_token_id`` where the config class holds them (null where
  the vocabulary has no such token, over transformers' defaults of another vocabulary), so that ``generate`` stops at
  the end of a text. The tokenizer pads with config.json's ``pad_token_id``: the model's own, or the id a task class
  reads past (GPT's sequence classifiers, ``hf_heads.task_head_export``); without one, with the id the run pads with.
"""

from __future__ import annotations

import json
import logging
import shutil
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tokenizers import Tokenizer, models, pre_tokenizers, processors

from plm_toolkit.core.errors import DataError
from plm_toolkit.data.tokenization.tokenizer import (
    BPE_MERGES_FILE,
    BPE_VOCAB_FILE,
    TOKENIZER_FILE,
    load_tokenizer,
    vocab_from_tokenizer,
)
from plm_toolkit.data.tokenization.vocab import Vocab

log = logging.getLogger("plm_toolkit")

CONFIG_FILE = "tokenizer_config.json"
# The class that reads tokenizer.json as it is (transformers 5's TokenizersBackend, under its long-standing name).
TOKENIZER_CLASS = "PreTrainedTokenizerFast"
# Vocabulary role -> tokenizer_config.json's key for its token.
ROLE_KEYS = {
    "bos_id": "bos_token",
    "eos_id": "eos_token",
    "unk_id": "unk_token",
    "sep_id": "sep_token",
    "pad_id": "pad_token",
    "cls_id": "cls_token",
    "mask_id": "mask_token",
}
WITH_TOKEN_TYPES = ("input_ids", "token_type_ids", "attention_mask")
WITHOUT_TOKEN_TYPES = ("input_ids", "attention_mask")


@dataclass(frozen=True)
class TokenizerLayout:
    """What one family's export says about its tokenizer (``Adapter.tokenizer_layout``)."""

    # The side transformers pads on: right, or left where the model reads the last position (XLNet's summary) or
    # continues a prompt (a causal language model).
    padding_side: str = "right"
    # What the tokenizer returns and the model reads: without token_type_ids where transformers' model would embed
    # them as something the run never fed (GPT-2 adds wte(token_type_ids); T5 takes none).
    model_input_names: tuple[str, ...] = WITH_TOKEN_TYPES
    # Whether a text is wrapped in the run's template; False: encoded alone, as a causal LM continues a prompt.
    template: bool = True
    # The special-token ids the family's transformers config class holds (config.json keys without ``_token_id``).
    config_roles: tuple[str, ...] = ("pad", "bos", "eos")


@dataclass
class ExportedTokenizer:
    """A tokenizer ready to be written into an export (``write``), and the ids config.json gets (``ids``)."""

    # The run's tokenizer as the export holds it; None for a source that does not load, which is copied as it is.
    tokenizer: Tokenizer | None
    settings: dict[str, Any]
    ids: dict[str, int | None] = field(default_factory=dict)
    # Files written as they are: a vocab.txt, or a vocab.json with its merges.txt, that the tokenizer came from.
    copies: list[Path] = field(default_factory=list)

    def write(self, folder: Path) -> None:
        for source in self.copies:
            if source.resolve() != (folder / source.name).resolve():
                shutil.copyfile(source, folder / source.name)
        if self.tokenizer is None:
            return
        self.tokenizer.save(str(folder / TOKENIZER_FILE))
        if _byte_level(self.tokenizer):  # what transformers' slow GPT-2 and RoBERTa tokenizers read
            self.tokenizer.model.save(str(folder))
        (folder / CONFIG_FILE).write_text(json.dumps(self.settings, indent=2, sort_keys=True) + "\n")


def special_ids(layout: TokenizerLayout, hf_config: dict, vocab: Vocab | None) -> dict[str, int | None]:
    """config.json's special-token ids: the pad id the adapter wrote (the model's, or a task class's), else the one
    the run pads with; bos and eos from the vocabulary's roles (without a tokenizer: what the adapter wrote); null for
    a role no token fills."""
    ids: dict[str, int | None] = {}
    for role in layout.config_roles:
        key = f"{role}_token_id"
        written = hf_config.get(key)
        if vocab is None:
            ids[key] = written
        elif role == "pad":
            ids[key] = written if written is not None else vocab.padding_id
        else:
            ids[key] = getattr(vocab, f"{role}_id")
    return ids


def export_tokenizer(
    source: str | Path, layout: TokenizerLayout, hf_config: dict, max_length: int | None
) -> ExportedTokenizer:
    """The run's tokenizer (``source``: a tokenizer.json, vocab.txt or vocab.json) as the export of a model whose
    config.json is ``hf_config`` writes it; ``max_length``: the model's position table (None where positions are
    relative). A vocab.txt or vocab.json is also copied as it is, and only copied (with a warning) where it does not
    load as plm_toolkit reads it; a tokenizer.json that does not load is a DataError naming the file."""
    source = Path(source)
    copies = [] if source.name == TOKENIZER_FILE else [source]
    if source.name == BPE_VOCAB_FILE:
        copies.append(source.with_name(BPE_MERGES_FILE))
    try:
        tokenizer = load_tokenizer(source)
    except DataError as error:
        if not copies:
            raise
        log.warning("%s; copied as it is, without %s", error, CONFIG_FILE)
        return ExportedTokenizer(None, {}, special_ids(layout, hf_config, None), copies)
    tokenizer.no_padding()  # the export's padding and truncation are tokenizer_config.json's
    tokenizer.no_truncation()
    vocab = vocab_from_tokenizer(tokenizer)
    if not layout.template:
        tokenizer.post_processor = processors.TemplateProcessing(single="$A", pair="$A $B:1", special_tokens=[])
    ids = special_ids(layout, hf_config, vocab)
    roles = {role: getattr(vocab, role) for role in ROLE_KEYS}
    roles["pad_id"] = ids.get("pad_token_id", vocab.padding_id)
    settings: dict[str, Any] = {ROLE_KEYS[role]: tokenizer.id_to_token(i) for role, i in roles.items() if i is not None}
    if vocab.sentinel_ids:
        settings["additional_special_tokens"] = [tokenizer.id_to_token(i) for i in vocab.sentinel_ids]
    settings |= {
        "tokenizer_class": TOKENIZER_CLASS,
        "padding_side": layout.padding_side,
        "truncation_side": "right",
        "model_input_names": list(layout.model_input_names),
        "clean_up_tokenization_spaces": False,
    }
    if max_length is not None:
        settings["model_max_length"] = max_length
    if _byte_level(tokenizer):
        settings["add_prefix_space"] = bool(json.loads(tokenizer.to_str())["pre_tokenizer"].get("add_prefix_space"))
    return ExportedTokenizer(tokenizer, settings, ids, copies)


def _byte_level(tokenizer: Tokenizer) -> bool:
    return isinstance(tokenizer.model, models.BPE) and isinstance(tokenizer.pre_tokenizer, pre_tokenizers.ByteLevel)
