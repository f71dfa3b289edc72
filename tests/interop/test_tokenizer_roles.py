"""check_tokenizer_roles: every family's own tokenizer (trained as plm-train trains it with data.tokenizer.kind=auto,
or read from a Hugging Face folder as interop reads it) passes, and another family's of the same size is refused in
one line: GPT-2's byte-level BPE in a BERT folder, BERT's WordPiece in a GPT-2, T5 or Transformer folder. The
command-line form of the refusals is in tests/bad_inputs/test_bad_inputs_roles.py and test_bad_inputs_round3.py."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from hydra import compose, initialize_config_module
from omegaconf import OmegaConf
from tokenizers import Tokenizer, models, pre_tokenizers
from tokenizers import processors as post_processors

import plm_toolkit.commands.train  # noqa: F401  (registers schemas, registries and resolvers)
from plm_toolkit.config.resolve import resolved_tokenizer_kind
from plm_toolkit.core.errors import CheckpointError
from plm_toolkit.data.tokenization.template import template_of
from plm_toolkit.data.tokenization.tokenizer import load_tokenizer
from plm_toolkit.data.tokenization.vocabulary_training import train_on_texts
from plm_toolkit.interop.tokenizer_roles import check_tokenizer_roles

TEXTS = [f"Document {k} starts. Its second line; number {k}." for k in range(300)]
SIZES = {"wordpiece": 120, "character": 60, "bpe": 300, "gpt2_bpe": 300, "unigram": 120, "t5_unigram": 160, "word": 0}
# Every family's template of one text with the tokenizer plm-train trains for it (data.tokenizer.kind=auto).
OWN = {
    "bert_tiny": ("wordpiece", "[CLS] A [SEP]"),
    "roberta": ("bpe", "<s> A </s>"),
    "albert": ("wordpiece", "[CLS] A [SEP]"),
    "electra": ("wordpiece", "[CLS] A [SEP]"),
    "ernie": ("wordpiece", "[CLS] A [SEP]"),
    "xlnet": ("unigram", "A [SEP] [CLS]"),
    "gpt": ("gpt2_bpe", "A <|endoftext|>"),
    "gpt2": ("gpt2_bpe", "A <|endoftext|>"),
    "t5": ("t5_unigram", "A </s>"),
    "transformer": ("bpe", "<s> A </s>"),
    "transformer_xl": ("wordpiece", "[CLS] A [SEP]"),
    "elmo": ("word", "<S> A </S>"),
}


def trained(kind: str) -> Tokenizer:
    data = {"tokenizer": {"kind": kind, "vocab_size": SIZES[kind], "min_frequency": 1, "lowercase": None}}
    return train_on_texts(OmegaConf.create(data), lambda: TEXTS)


def shown(tokenizer: Tokenizer) -> str:
    pieces = template_of(tokenizer, pair=False).pieces
    return " ".join(p if p in ("A", "B") else tokenizer.id_to_token(p) for p, _ in pieces)


def check_roles(family: str, tokenizer: Tokenizer, tokenizer_file: Path) -> None:
    """check_tokenizer_roles as the checkpoint reader calls it, with the tokenizer's template of one text."""
    check_tokenizer_roles(family, tokenizer, template_of(tokenizer, pair=False), tokenizer_file)


def family_of(preset: str) -> tuple[str, str]:
    """(model config name, resolved data.tokenizer.kind) of ``model=preset``, as plm-train composes it."""
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=[f"model={preset}"])
    return cfg.model.name, resolved_tokenizer_kind(cfg)


def folder(tmp_path: Path, config: dict | None = None) -> Path:
    """A tokenizer.json path in a folder: a plm-train checkpoint's when ``config`` (its config.yaml) is given, else
    a Hugging Face folder's, which records nothing of how its tokenizer was made."""
    if config is not None:
        (tmp_path / "config.yaml").write_text(yaml.safe_dump(config))
    return tmp_path / "tokenizer.json"


@pytest.mark.parametrize("preset", sorted(OWN))
def test_each_family_passes_with_the_tokenizer_plm_train_trains_for_it(preset, tmp_path):
    family, kind = family_of(preset)
    assert (kind, shown(tokenizer := trained(kind))) == OWN[preset]
    check_roles(family, tokenizer, folder(tmp_path))  # a Hugging Face folder: nothing says it was chosen
    run = {"model": {"name": family, "checkpoint": None}, "data": {"tokenizer": {"kind": kind, "path": None}}}
    check_roles(family, tokenizer, folder(tmp_path, run))


def test_the_tokenizers_interop_reads_from_hugging_face_folders_pass(tmp_path):
    # GPT-2's tokenizer.json (and plm-export's of a causal LM) adds nothing: it loads with GPT-2's template.
    gpt2 = trained("gpt2_bpe")
    gpt2.post_processor = post_processors.ByteLevel(trim_offsets=False)
    (tmp_path / "tokenizer.json").write_text(gpt2.to_str())
    loaded = load_tokenizer(tmp_path / "tokenizer.json")
    assert shown(loaded) == "A <|endoftext|>"
    check_roles("gpt2", loaded, tmp_path / "tokenizer.json")
    # openai-gpt's: a BPE with no special token and no template.
    openai = Tokenizer(models.BPE({"a": 0, "b": 1, "<unk>": 2}, [], unk_token="<unk>"))
    openai.pre_tokenizer = pre_tokenizers.Whitespace()
    assert shown(openai) == "A"
    check_roles("gpt", openai, tmp_path / "tokenizer.json")
    # A released T5 tokenizer.json is laid out as t5_unigram trains it: A </s>.
    check_roles("t5", trained("t5_unigram"), tmp_path / "tokenizer.json")


@pytest.mark.parametrize(
    ("family", "expected"),
    [("gpt2", "A <|endoftext|>"), ("gpt", "A <|endoftext|>"), ("t5", "A </s>"), ("transformer", "<s> A </s>")],
)
def test_a_bert_tokenizer_in_a_text_first_family_is_refused(family, expected, tmp_path):
    bert = trained("wordpiece")
    message = (
        f"{tmp_path / 'tokenizer.json'}: wraps a text as '[CLS] A [SEP]', with [CLS] before it where model={family} "
        f"reads a text from its first token (its own tokenizer wraps it as '{expected}'); this tokenizer does not "
        "belong to these weights (give the tokenizer.json of the checkpoint they came from)"
    )
    with pytest.raises(CheckpointError) as error:
        check_roles(family, bert, folder(tmp_path))
    assert str(error.value) == message
    # A plm-train checkpoint whose config says its run trained the family's own kind: the same.
    run = {"model": {"name": family, "checkpoint": None}, "data": {"tokenizer": {"kind": OWN[family][0], "path": None}}}
    with pytest.raises(CheckpointError, match="does not belong to these weights"):
        check_roles(family, bert, folder(tmp_path, run))


def test_roberta_and_word_tokenizers_in_a_gpt2_folder_are_refused(tmp_path):
    for kind, first in (("bpe", "<s>"), ("word", "<S>")):
        with pytest.raises(CheckpointError, match=f"with {first} before it where model=gpt2 reads a text from"):
            check_roles("gpt2", trained(kind), folder(tmp_path))


@pytest.mark.parametrize(
    "tokenizer_section",
    [{"kind": "character", "path": None}, {"kind": "wordpiece", "path": None}, {"kind": "auto", "path": "vocab.txt"}],
)
def test_a_tokenizer_the_run_chose_passes(tokenizer_section, tmp_path):
    """A character-level GPT-2 (tinyshakespeare), a GPT-2 over a WordPiece vocabulary, one given a vocab.txt: the
    run that wrote the weights trained them with this tokenizer, whatever its template."""
    run = {"model": {"name": "gpt2", "checkpoint": None}, "data": {"tokenizer": tokenizer_section}}
    check_roles("gpt2", trained("character"), folder(tmp_path, run))


@pytest.mark.parametrize(
    "run",
    [
        {"model": {"name": "gpt2", "checkpoint": "/runs/char_gpt2"}, "data": {"tokenizer": {"kind": "gpt2_bpe"}}},
        {"model": {"name": "gpt2"}, "objective": {"name": "clm"}},
    ],
    ids=["started_from_a_checkpoint", "no_tokenizer_record"],
)
def test_a_checkpoint_that_does_not_say_its_run_trained_the_familys_own_kind_keeps_its_tokenizer(run, tmp_path):
    check_roles("gpt2", trained("character"), folder(tmp_path, run))


def test_a_gpt2_tokenizer_in_a_bert_folder_is_still_refused(tmp_path):
    with pytest.raises(CheckpointError, match="wraps a text as 'A <|endoftext|>', with no \\[CLS\\] \\(or <s>\\)"):
        check_roles("bert", trained("gpt2_bpe"), folder(tmp_path))


def test_a_hugging_face_folder_keeps_the_tokenizer_its_tokenizer_config_names(tmp_path):
    """plm-export of a GPT-2 fine-tuned over a WordPiece vocabulary names [CLS] in tokenizer_config.json; GPT-2's
    own names <|endoftext|> alone, so a BERT tokenizer.json put beside it is refused."""
    bert = trained("wordpiece")
    (tmp_path / "tokenizer_config.json").write_text('{"cls_token": "[CLS]", "sep_token": "[SEP]"}')
    check_roles("gpt2", bert, tmp_path / "tokenizer.json")
    (tmp_path / "tokenizer_config.json").write_text('{"bos_token": "<|endoftext|>", "eos_token": "<|endoftext|>"}')
    with pytest.raises(CheckpointError, match="with \\[CLS\\] before it where model=gpt2"):
        check_roles("gpt2", bert, tmp_path / "tokenizer.json")
