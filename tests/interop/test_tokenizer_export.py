"""plm-export's tokenizer files: ``AutoTokenizer.from_pretrained(export)`` with the Auto model gives the run's ids,
padding and generation, for every family transformers has and every fine-tuned head kind, each with the tokenizer kind
the family trains by default (WordPiece, byte-level BPE, unigram), trained on the bundled corpus."""

import dataclasses
import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from omegaconf import OmegaConf
from tokenizers import Tokenizer

from plm_toolkit.commands import generate
from plm_toolkit.commands.export import main
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core import registry
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.data_schema import DataConfig, TokenizerConfig
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.tokenization.tokenizer import load_or_train_tokenizer, vocab_from_tokenizer
from plm_toolkit.interop.hf import ADAPTERS
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.checkpoint_head import export_pad_id
from tests.tasks.test_export_heads import AUTO, EXPORTABLE, FAMILIES, NO_BIAS, fine_tuned, scores
from tests.training.conftest import generate_config

transformers = pytest.importorskip("transformers")

TOLERANCE = 1e-5
TEXTS = ["The history of the city", 'Zürich\'s 1984 census --  "twice"!!', "a"]
PAIRS = [("Who built it?", "The city was built in 1984 by the river."), ("Why?", "It rained .")]
# family -> the tokenizer kind it trains by default (model.tokenizer) and its vocabulary size here.
KINDS = {"wordpiece": 400, "bpe": 400, "gpt2_bpe": 400, "unigram": 300, "t5_unigram": 400}
DEFAULT_KIND = {
    "bert": "wordpiece",
    "albert": "wordpiece",
    "electra": "wordpiece",
    "ernie": "wordpiece",
    "roberta": "bpe",
    "gpt2": "gpt2_bpe",
    "openai-gpt": "gpt2_bpe",
    "xlnet": "unigram",
    "t5": "t5_unigram",
}
T5_FIELDS = dict(hidden_size=36, head_size=7, num_heads=5, intermediate_size=37, num_layers=2,
                 relative_attention_num_buckets=11, relative_attention_max_distance=9, feed_forward="gated_gelu",
                 tie_word_embeddings=False)  # fmt: skip
# ELECTRA's generator at a third of the width, as plm-train's rtd builds it.
OBJECTIVE_OPTIONS = {"rtd": dict(generator_hidden_size=12, generator_num_heads=3, generator_intermediate_size=19)}
CAUSAL = ("gpt2", "openai-gpt")
# Families whose transformers model reads the last position, so their tokenizer pads on the left.
LEFT = ("xlnet",)


@pytest.fixture(scope="session")
def tokenizers(tmp_path_factory) -> dict[str, Tokenizer]:
    """Each kind trained as plm-train trains it (``data.tokenizer.kind``), on the bundled WikiText excerpt."""
    root = tmp_path_factory.mktemp("tokenizers")
    corpus = root / "corpus.txt"
    corpus.write_text("\n".join(Path(resource_path("corpora/wikitext2/train.txt")).read_text().splitlines()[:300]))
    trained = {}
    for kind, size in KINDS.items():
        settings = TokenizerConfig(kind=kind, vocab_size=size)
        trained[kind] = load_or_train_tokenizer(
            DataConfig(train_files=[str(corpus)], cache_dir=str(root), tokenizer=settings)
        )
    return trained


def family_model(family: str, tokenizer: Tokenizer):
    """A random tiny odd-sized model of ``family`` over ``tokenizer``, the objective its export's heads come from,
    and that objective's config."""
    load_all()
    name, fields = ("t5", T5_FIELDS) if family == "t5" else FAMILIES[family]
    entry = registry.MODELS.get(name)
    known = {f.name for f in dataclasses.fields(entry.config_cls)}
    vocab = vocab_from_tokenizer(tokenizer)
    pad = {"pad_token_id": vocab.pad_id} if "pad_token_id" in known and vocab.pad_id is not None else {}
    config = entry.config_cls(
        vocab_size=tokenizer.get_vocab_size(), **{k: v for k, v in fields.items() if k in known} | pad
    )
    torch.manual_seed(0)
    model = entry.builder(config)
    objective_name = ADAPTERS.for_config(config).objective
    objective_entry = registry.OBJECTIVES.get(objective_name)
    objective_config = objective_entry.config_cls(**OBJECTIVE_OPTIONS.get(objective_name, {}))
    objective = objective_entry.builder(objective_config, model, vocab)
    with torch.no_grad():  # off the init's zero biases and unit norms
        for parameter in [*model.parameters(), *objective.parameters()]:
            parameter.add_(torch.randn_like(parameter) * 0.05)
    return model.eval(), objective.eval(), objective_config


def save_run(root: Path, model, objective, objective_config, tokenizer: Tokenizer) -> Path:
    """``model`` and ``objective`` as plm-train writes its checkpoint."""
    sections = {"model": OmegaConf.structured(model.config), "objective": OmegaConf.structured(objective_config)}
    yaml = OmegaConf.to_yaml({key: OmegaConf.to_container(value) for key, value in sections.items()})
    state = {"step": 1, "samples_seen": 0}
    return ckpt.save_checkpoint(root, 1, model, objective, state, yaml, tokenizer.to_str(), keep_last=0)


def run_rows(tokenizer: Tokenizer, inputs, template: bool = True) -> list[dict]:
    """The run's encodings of texts or pairs: ids and token types, with the template's special tokens or without."""
    encodings = [tokenizer.encode(*item if isinstance(item, tuple) else (item,), add_special_tokens=template)
                 for item in inputs]  # fmt: skip
    return [{"input_ids": e.ids, "token_type_ids": e.type_ids} for e in encodings]


def real(values: torch.Tensor, mask: torch.Tensor) -> list[torch.Tensor]:
    """Each row's values at its real positions, in order: what left and right padding share."""
    return [row[keep.bool()] for row, keep in zip(values, mask, strict=True)]


def assert_tokenizes_as_the_run(folder: Path, tokenizer: Tokenizer, side: str, pad_id: int, template: bool = True):
    """AutoTokenizer reads the folder as PreTrainedTokenizerFast, gives the run's ids and token types for texts and
    pairs, and pads on ``side`` with ``pad_id``, which config.json names too; returns it."""
    theirs = transformers.AutoTokenizer.from_pretrained(folder)
    assert type(theirs).__name__ in ("TokenizersBackend", "PreTrainedTokenizerFast")
    config = json.loads((folder / "config.json").read_text())
    types = "token_type_ids" in theirs.model_input_names
    for inputs in (TEXTS, PAIRS):
        expected = run_rows(tokenizer, inputs, template)
        for item, row in zip(inputs, expected, strict=True):
            got = theirs(*item) if isinstance(item, tuple) else theirs(item)
            assert got["input_ids"] == row["input_ids"], item
            assert got.get("token_type_ids") == (row["token_type_ids"] if types else None)
    assert (theirs.padding_side, theirs.pad_token_id, config["pad_token_id"]) == (side, pad_id, pad_id)
    padded = theirs(TEXTS, padding=True, return_tensors="pt")
    rows = run_rows(tokenizer, TEXTS, template)
    width = max(len(row["input_ids"]) for row in rows)
    for row, ids, mask in zip(rows, padded["input_ids"], padded["attention_mask"], strict=True):
        fill = [pad_id] * (width - len(row["input_ids"]))
        assert ids.tolist() == (fill + row["input_ids"] if side == "left" else row["input_ids"] + fill)
        assert mask.sum() == len(row["input_ids"])
    vocab = vocab_from_tokenizer(tokenizer)
    assert config["eos_token_id"] == vocab.eos_id  # generate stops there (GPT-2's <|endoftext|>; null for BERT's)
    assert config.get("bos_token_id", vocab.bos_id) == vocab.bos_id  # T5's config class has none
    return theirs


@pytest.mark.parametrize("family", sorted(DEFAULT_KIND))
def test_a_pretrained_export_tokenizes_pads_and_encodes_as_the_run(tmp_path, tokenizers, family):
    tokenizer = tokenizers[DEFAULT_KIND[family]]
    model, objective, objective_config = family_model(family, tokenizer)
    save_run(tmp_path / "run", model, objective, objective_config, tokenizer)
    folder = tmp_path / "hf"
    assert main([str(tmp_path / "run"), str(folder)]) == 0
    vocab = vocab_from_tokenizer(tokenizer)
    causal = family in CAUSAL
    side = "left" if causal or family in LEFT else "right"
    theirs = assert_tokenizes_as_the_run(folder, tokenizer, side, vocab.padding_id, template=not causal)
    settings = json.loads((folder / "tokenizer_config.json").read_text())
    assert settings["tokenizer_class"] == "PreTrainedTokenizerFast"
    assert settings.get("model_max_length") == type(model).max_length(model.config)
    if family == "t5":
        assert {"<extra_id_0>", "<extra_id_99>"} <= set(theirs.all_special_tokens)  # the sentinels
    if causal:  # plm-finetune model.checkpoint=<export> reads it back with the run's template (GPT-2's)
        again = load_backbone(folder).tokenizer
        assert [again.encode(*pair).ids for pair in PAIRS] == [tokenizer.encode(*pair).ids for pair in PAIRS]
    if causal or family == "t5":
        return  # generation below
    padded = theirs(PAIRS, padding=True, return_tensors="pt")
    batch = {key: value for key, value in padded.items()}
    ours_batch = run_batch(tokenizer, PAIRS)
    with torch.no_grad():
        expected = model(**ours_batch).hidden
        got = transformers.AutoModel.from_pretrained(folder).eval()(**batch)[0]
    for a, b in zip(real(expected, ours_batch["attention_mask"]), real(got, batch["attention_mask"]), strict=True):
        assert (a - b).abs().max() <= TOLERANCE
    if family == "electra":  # the generator's folder: the same tokenizer, and its MLM logits
        assert_tokenizes_as_the_run(folder / "generator", tokenizer, side, vocab.padding_id)
        generator = transformers.AutoModelForMaskedLM.from_pretrained(folder / "generator").eval()
        with torch.no_grad():
            embedded = model.embeddings(ours_batch["input_ids"], ours_batch["token_type_ids"])
            hidden = objective.generator(embedded, ours_batch["attention_mask"])
            ours = objective.generator.head(hidden, model.input_embeddings.weight)
            got = generator(**batch).logits
        assert (ours - got)[batch["attention_mask"].bool()].abs().max() <= TOLERANCE


def run_batch(tokenizer: Tokenizer, inputs) -> dict[str, torch.Tensor]:
    """The run's padded batch of ``inputs``: the tasks' collator, right-padded with the vocabulary's padding id."""
    from plm_toolkit.tasks.base import PadCollator

    return PadCollator(vocab_from_tokenizer(tokenizer).padding_id)(run_rows(tokenizer, inputs))


# --- generation --------------------------------------------------------------------------------------------------

PROMPTS = ["The history of the city", "In 1984 ,", "It"]


def next_logits(model, family: str, source: list[int], generated: list[int]) -> torch.Tensor:
    """The logits of the token after ``generated``: a causal model's over the prompt ``source`` and ``generated``, an
    encoder-decoder's over the source and the decoder's start token with ``generated``."""
    if family == "t5":
        decoder_input = torch.tensor([[model.config.pad_token_id, *generated]])
        return model.logits(model(torch.tensor([source]), None, decoder_input).hidden)[0, -1]
    return F.linear(model(torch.tensor([[*source, *generated]])).hidden[0, -1], model.input_embeddings.weight)


def output_rows(model, family: str) -> torch.Tensor:
    return model.lm_head.weight if family == "t5" else model.input_embeddings.weight


def end_early(model, family: str, source: list[int], eos: int) -> None:
    """Make greedy decoding of ``source`` end by its second token: the end token's output row becomes a copy of the
    second token's, scaled so that its logit there is the larger."""
    with torch.no_grad():
        first = int(next_logits(model, family, source, []).argmax())
        logits = next_logits(model, family, source, [first])
        second = int(logits.argmax())
        rows = output_rows(model, family)
        rows[eos] = rows[second] * (1.05 if logits[second] > 0 else 0.95)


@pytest.mark.parametrize("family", ["gpt2", "openai-gpt", "t5"])
def test_generate_continues_and_ends_as_plm_generate(tmp_path, tokenizers, family):
    tokenizer = tokenizers[DEFAULT_KIND[family]]
    vocab = vocab_from_tokenizer(tokenizer)
    model, objective, objective_config = family_model(family, tokenizer)
    source = tokenizer.encode(PROMPTS[0], add_special_tokens=False).ids + ([vocab.eos_id] if family == "t5" else [])
    end_early(model, family, source, vocab.eos_id)
    save_run(tmp_path / "run", model, objective, objective_config, tokenizer)
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 0

    (tmp_path / "prompts.txt").write_text("\n".join(PROMPTS) + "\n")
    options = ["max_new_tokens=6", f"prompts_file={tmp_path / 'prompts.txt'}", f"output_file={tmp_path / 'out.jsonl'}"]
    rows = generate.run(generate_config(f"checkpoint={tmp_path / 'run'}", *options))
    ours = [row["token_ids"] for row in rows]
    assert ours[0][-1] == vocab.eos_id and len(ours[0]) <= 2  # ended at the end token
    assert any(len(tokens) == 6 and vocab.eos_id not in tokens for tokens in ours)  # and another ran on

    theirs_tokenizer = transformers.AutoTokenizer.from_pretrained(tmp_path / "hf")
    auto = transformers.AutoModelForSeq2SeqLM if family == "t5" else transformers.AutoModelForCausalLM
    theirs = auto.from_pretrained(tmp_path / "hf").eval()
    inputs = theirs_tokenizer(PROMPTS, padding=True, return_tensors="pt")
    prompt_ids = [ids.tolist() for ids in real(inputs["input_ids"], inputs["attention_mask"])]
    assert [row["prompt_ids"] for row in rows] == prompt_ids  # what plm-generate feeds the model
    with torch.no_grad():
        output = theirs.generate(**inputs, max_new_tokens=6, do_sample=False)
    start = 1 if family == "t5" else inputs["input_ids"].shape[1]  # after the decoder's start token, or the prompt
    for tokens, row in zip(ours, output[:, start:].tolist(), strict=True):
        ended = row[: row.index(vocab.eos_id) + 1] if vocab.eos_id in row else row
        assert ended == tokens


# --- fine-tuned heads ----------------------------------------------------------------------------------------------

# Every family and head kind transformers has, once (ELECTRA's sequence head with its own gelu layer, as transformers').
HEADS = [case for number, case in enumerate(EXPORTABLE) if case[:2] not in [c[:2] for c in EXPORTABLE[:number]]]


@pytest.mark.parametrize(("family", "kind", "activation"), HEADS)
def test_a_fine_tuned_export_tokenizes_pads_and_scores_as_the_run(tmp_path, tokenizers, family, kind, activation):
    tokenizer = tokenizers[DEFAULT_KIND[family]]
    no_bias = kind == "sequence" and family in NO_BIAS
    _, model, task = fine_tuned(tmp_path / "run", tokenizer, family, kind, activation, bias=False if no_bias else None)
    assert main([str(tmp_path / "run"), str(tmp_path / "hf")]) == 0
    vocab = vocab_from_tokenizer(tokenizer)
    # GPT's sequence classifiers read the last token that is not pad_token_id: not <|endoftext|>, which ends the text.
    pad = export_pad_id(vocab) if no_bias else vocab.padding_id
    side = "left" if family in LEFT else "right"
    theirs_tokenizer = assert_tokenizes_as_the_run(tmp_path / "hf", tokenizer, side, pad)
    theirs = getattr(transformers, "AutoModel" + AUTO[kind]).from_pretrained(tmp_path / "hf").eval()
    inputs = TEXTS if kind == "token" else PAIRS
    padded = dict(theirs_tokenizer(inputs, padding=True, return_tensors="pt"))
    ours_batch = task.collator()(run_rows(tokenizer, inputs))
    with torch.no_grad():
        output = theirs(**padded)
        got = [output.start_logits, output.end_logits] if kind == "span" else [output.logits]
        expected = scores(task, model, ours_batch)
    for a, b in zip(expected, got, strict=True):
        if kind == "sequence":
            assert (a - b).abs().max() <= TOLERANCE
            continue
        for x, y in zip(real(a, ours_batch["attention_mask"]), real(b, padded["attention_mask"]), strict=True):
            assert (x - y).abs().max() <= TOLERANCE
