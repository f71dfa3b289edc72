"""Inputs that were read as something else than they say, through the real command line (the harness of
test_bad_inputs.py; docs/bad-input-rules.md has the rules): files read by the checked reader (``data/sources/user_files.py``),
numbers outside their domain, weights checked wherever they are loaded, the cache folder, text typed on the command
line. A bad one gets exit status 1 and one ``error:`` line naming the file, line or key; one that is unusual but
legal (a byte-order mark, a line separator inside a line, a prompt that looks like a number) gets the right result,
which its test checks.

The input files are written by ``prepared`` (their bytes are the point: byte-order marks, lone surrogates, U+2028),
under ``{prepared}``; ``{bert}`` is a tiny BERT checkpoint (plm-finetune's and plm-embed's), ``{xl}`` a tiny
Transformer-XL with its CLM head (plm-generate's).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from omegaconf import OmegaConf
from safetensors.torch import load_file, save_file
from torch import nn

from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.resources import resource_path
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.models.gpt import GPT, GPT2Config
from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig
from plm_toolkit.objectives.clm import CausalLanguageModeling, ClmConfig
from tests.bad_inputs.test_bad_inputs import BERT, FILES, Case, assert_one_error_line, command_line
from tests.tasks.conftest import save_tiny_checkpoint, tiny_tokenizer
from tests.training.conftest import QUIET


@dataclass(frozen=True)
class InputCase(Case):
    # Environment variables of the command (a value of None removes the variable).
    env: tuple[tuple[str, str | None], ...] = ()


TEXT = ("task=classification", "data.validation_file=null")
CLASSIFY = ("task=classification", "trainer.max_steps=1", "trainer.epochs=null", "trainer.save_every=0")
SQUAD = ("task=squad2", "data.max_seq_len=48", "task.doc_stride=16", "task.max_query_length=8")
GENERATE = ("checkpoint={xl}", "max_new_tokens=2")
EMBED = ("checkpoint={bert}", "output_file={tmp}/out.hdf5")
FIFO = "{prepared}/fifo"
# plm-train's tiny BERT with the default cache folder (no data.cache_dir), for one step.
GPT2 = ("model=gpt2_tiny", "objective=clm", "data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}",
        "data.max_seq_len=32", "data.tokenizer.vocab_size=300", "trainer.batch_size=4", *QUIET)  # fmt: skip
DEFAULT_CACHE = (
    *(a for a in BERT if not a.startswith("data.cache_dir")),
    "trainer.max_steps=1",
    "trainer.save_every=0",
)

CASES = [
    # --- the checked reader: JSON types, Unicode, files that are no regular files -----------------------------------
    InputCase("jsonl_label_null", "finetune", (*TEXT, "data.train_file={prepared}/label_null.jsonl"), "{prepared}/label_null.jsonl:2: 'label' is null; expected a string or a number"),
    InputCase("jsonl_row_not_an_object", "finetune", (*TEXT, "data.train_file={prepared}/row_array.jsonl"), "{prepared}/row_array.jsonl:2: expected a JSON object (one per line), found an array"),
    InputCase("jsonl_row_a_string", "finetune", (*TEXT, "data.train_file={prepared}/row_string.jsonl"), "{prepared}/row_string.jsonl:3: expected a JSON object (one per line), found a string"),
    InputCase("jsonl_text_an_array", "finetune", (*TEXT, "data.train_file={prepared}/text_array.jsonl"), "{prepared}/text_array.jsonl:1: 'text' is an array; expected a string or a number"),
    InputCase("jsonl_lone_surrogate", "finetune", (*TEXT, "data.train_file={prepared}/surrogate.jsonl"), "{prepared}/surrogate.jsonl:2: 'text' holds a lone surrogate escape"),
    InputCase("jsonl_nan_label", "finetune", (*TEXT, "task.regression=true", "task.metrics=[pearson]", "data.train_file={prepared}/nan_label.jsonl"), "{prepared}/nan_label.jsonl:2: not valid JSON (NaN is not JSON)"),
    InputCase("tsv_regression_label_nan", "finetune", (*TEXT, "task.regression=true", "task.metrics=[pearson]", "data.train_file={prepared}/nan_score.tsv"), "{prepared}/nan_score.tsv:3: label 'nan' is not a finite number (task.regression)"),
    InputCase("squad_duplicate_id", "finetune", (*SQUAD, "data.train_file={prepared}/squad_duplicate_id.json"), "{prepared}/squad_duplicate_id.json: data[0].paragraphs[0].qas[1] has id=q1, as data[0].paragraphs[0].qas[0] does"),
    InputCase("squad_lone_surrogate", "finetune", (*SQUAD, "data.train_file={prepared}/squad_surrogate.json"), "{prepared}/squad_surrogate.json: 'data[0].paragraphs[0].qas[0].question' holds a lone surrogate escape"),
    InputCase("squad_impossible_a_string", "finetune", (*SQUAD, "data.train_file={prepared}/squad_impossible_string.json"), "{prepared}/squad_impossible_string.json: data[0].paragraphs[0].qas[0].is_impossible: expected true/false, found a string"),
    InputCase("squad_answer_start_true", "finetune", (*SQUAD, "data.train_file={prepared}/squad_start_true.json"), "{prepared}/squad_start_true.json: data[0].paragraphs[0].qas[0].answers[0].answer_start: expected an integer, found true/false"),
    InputCase("embed_fifo", "embed", (*EMBED, f"input_file={FIFO}"), f"input_file={FIFO}: a FIFO (named pipe); expected a regular file"),
    InputCase("generate_prompts_fifo", "generate", (*GENERATE, f"prompts_file={FIFO}"), f"prompts_file={FIFO}: a FIFO (named pipe); expected a regular file"),
    InputCase("finetune_train_file_fifo", "finetune", (*TEXT, f"data.train_file={FIFO}"), f"data.train_file: {FIFO} is not a file (a FIFO (named pipe))"),
    InputCase("train_corpus_fifo", "train", (f"data.train_files=[{FIFO}]",), f"data.train_files: {FIFO} is not a file (a FIFO (named pipe))"),
    InputCase("embed_input_a_directory", "embed", (*EMBED, "input_file={prepared}"), "input_file={prepared}: a directory; expected a regular file"),
    # --- vocabularies: one id per token ------------------------------------------------------------------------------
    InputCase("vocab_txt_duplicate_line", "train", ("data.tokenizer.path={prepared}/duplicate/vocab.txt",), "{prepared}/duplicate/vocab.txt:9: 'the' again (line 7); a token's line number is its id"),
    InputCase("vocab_json_shared_id", "train", ("data.tokenizer.path={prepared}/shared_id/vocab.json", "data.tokenizer.kind=bpe"), "{prepared}/shared_id/vocab.json: tokens 'a' and 'b' share id 9; expected one id each"),
    InputCase("finetune_labels_repeated", "finetune", (*TEXT, "data.train_file={prepared}/bom.tsv", "task.labels=[positive,negative,positive]"), "task.labels=['positive', 'negative', 'positive']: 'positive' more than once; each class needs a name of its own"),
    InputCase("tokenizer_json_bom_and_duplicate", "train", ("data.tokenizer.path={prepared}/shared_id/tokenizer.json",), "{prepared}/shared_id/tokenizer.json: tokens"),
    # --- weights: every safetensors file a command loads is checked, the objective's as the model's ------------------
    InputCase("generate_head_nan", "generate", ("checkpoint={prepared}/xl_nan_head", "prompt=The", "max_new_tokens=2"), "{prepared}/xl_nan_head/objective.safetensors: bias holds 1 NaN and 0 infinite value(s); expected finite weights"),
    InputCase("generate_head_extra_tensor", "generate", ("checkpoint={prepared}/xl_extra_head", "prompt=The", "max_new_tokens=2"), "{prepared}/xl_extra_head/objective.safetensors: does not match the CausalLanguageModeling it loads into (missing keys: none; unexpected keys: adaptive.head.weight)"),
    InputCase("generate_head_missing", "generate", ("checkpoint={prepared}/xl_no_head", "prompt=The", "max_new_tokens=2"), "{prepared}/xl_no_head/objective.safetensors: weights file not found"),
    InputCase("export_head_nan", "export", ("{prepared}/bert_nan_head", "{tmp}/hf"), "{prepared}/bert_nan_head/objective.safetensors: mlm.head.bias holds 1 NaN and 0 infinite value(s)"),
    InputCase("average_nan", "average", ("{prepared}/xl_run", "2", "{tmp}/averaged"), "objective.safetensors: bias holds 1 NaN and 0 infinite value(s)"),
    # --- numbers: no key takes NaN, an infinity, a subnormal or more than 64 bits; each key its own domain ---------
    InputCase("generate_temperature_nan", "generate", (*GENERATE, "prompt=The", "do_sample=true", "temperature=nan"), "temperature=nan: expected a finite number in (0, inf)"),
    InputCase("generate_temperature_inf", "generate", (*GENERATE, "prompt=The", "do_sample=true", "temperature=inf"), "temperature=inf: expected a finite number in (0, inf)"),
    InputCase("generate_temperature_subnormal", "generate", (*GENERATE, "prompt=The", "do_sample=true", "temperature=1e-310"), "temperature=1e-310: a subnormal number"),
    InputCase("generate_length_penalty_extreme", "generate", (*GENERATE, "prompt=The", "num_beams=2", "length_penalty=1e308"), "length_penalty=1e+308: expected a finite number in [-10, 10]"),
    InputCase("generate_top_k_past_64_bits", "generate", (*GENERATE, "prompt=The", "do_sample=true", "top_k=99999999999999999999"), "top_k=99999999999999999999: does not fit in 64 bits"),
    InputCase("generate_seed_negative", "generate", (*GENERATE, "prompt=The", "seed=-1"), "seed=-1: must be 0 or positive"),
    InputCase("generate_max_length_a_past_positions", "generate", ("checkpoint={gpt2}", "prompt=The", "max_new_tokens=2", "max_length_a=50", "slide_context=false"), "prompt: 1 tokens, with max_new_tokens=2 + max_length_a=50.0 x 1 53 positions, more than the model's 32"),
    InputCase("train_vocab_size_three", "train", ("data.tokenizer.vocab_size=3",), "data.tokenizer.vocab_size=3: expected a size from 6 (a wordpiece vocabulary holds 5 special tokens and a piece)"),
    InputCase("train_vocab_size_negative", "train", ("data.tokenizer.vocab_size=-1",), "data.tokenizer.vocab_size=-1: expected a size from 6"),
    InputCase("train_bpe_vocab_below_bytes", "train", ("data.tokenizer.kind=bpe", "data.tokenizer.vocab_size=200"), "data.tokenizer.vocab_size=200: expected a size from 261 (a bpe vocabulary holds 5 special tokens and the 256 byte symbols)"),
    InputCase("train_min_frequency_negative", "train", ("data.tokenizer.min_frequency=-1",), "data.tokenizer.min_frequency=-1: must be 0 or positive"),
    InputCase("train_vocab_below_the_alphabet", "train", ("data.tokenizer.vocab_size=40",), "data.tokenizer.vocab_size=40: a wordpiece vocabulary of {corpus} holds at least"),
    InputCase("train_unigram_vocab_below_the_alphabet", "train", ("data.tokenizer.kind=unigram", "data.tokenizer.vocab_size=40"), "data.tokenizer.vocab_size=40: a unigram vocabulary of {corpus} holds every distinct character"),
    InputCase("train_layer_norm_eps_subnormal", "train", ("model.layer_norm_eps=1e-320",), "model.layer_norm_eps=1e-320: a subnormal number"),
    InputCase("train_max_steps_past_64_bits", "train", ("trainer.max_steps=99999999999999999999",), "trainer.max_steps=99999999999999999999: does not fit in 64 bits"),
    InputCase("finetune_seed_past_64_bits", "finetune", ("trainer.seed=18446744073709551616",), "trainer.seed=18446744073709551616: does not fit in 64 bits"),
    InputCase("embed_batch_size_past_64_bits", "embed", (*EMBED, "input_file={prepared}/sentences.txt", "batch_size=99999999999999999999"), "batch_size=99999999999999999999: does not fit in 64 bits"),
    InputCase("translation_length_penalty_nan", "finetune", ("task=translation", "task.length_penalty=nan"), "task.length_penalty=nan: expected a finite number in [-10, 10]"),
    # --- the command line: text Hydra's grammar cannot read gets the quoting that works; a user's own config file ----
    InputCase("generate_prompt_comma", "generate", (*GENERATE, "prompt=Hello, world"), """cannot read the override prompt=Hello, world: its comma makes a list or a sweep; to give it as text, quote it for Hydra inside the shell's quotes: 'prompt="Hello, world"', or put the prompt in a file: prompts_file=PATH"""),
    InputCase("generate_prompt_apostrophe", "generate", (*GENERATE, "prompt=it's"), r"""cannot parse the override prompt=it's (a character that Hydra's grammar allows only inside quotes); to give it as text, quote it for Hydra inside the shell's quotes: "prompt=\"it's\"", or put the prompt in a file"""),
    InputCase("generate_prompt_angle_bracket", "generate", (*GENERATE, "prompt=a<b"), """cannot parse the override prompt=a<b (a character that Hydra's grammar allows only inside quotes); to give it as text, quote it for Hydra inside the shell's quotes: 'prompt="a<b"'"""),
    InputCase("generate_prompt_double_quotes", "generate", (*GENERATE, 'prompt=say "hi"'), 'cannot parse the override prompt=say "hi" (extraneous input \'"hi"\' expecting <EOF>); to give it as text, quote it for Hydra inside the shell\'s quotes: "prompt=\'say \\"hi\\"\'"'),
    InputCase("finetune_file_with_a_comma", "finetune", ("data.train_file=my file, v2.tsv",), """cannot read the override data.train_file=my file, v2.tsv: its comma makes a list or a sweep; to give it as text, quote it for Hydra inside the shell's quotes: 'data.train_file="my file, v2.tsv"'"""),
    InputCase("own_config_invalid_yaml", "train", ("--config-dir={prepared}/configs", "--config-name=broken"), "{prepared}/configs/broken.yaml:6:1: not valid YAML (while parsing a flow sequence from line 5, column 14: expected ',' or ']', but got '<stream end>')"),
    InputCase("own_config_duplicate_key", "train", ("--config-dir={prepared}/configs", "--config-name=twice"), "{prepared}/configs/twice.yaml:6:3: not valid YAML (while constructing a mapping from line 5, column 3: found duplicate key max_steps)"),
    InputCase("own_model_preset_invalid_yaml", "train", ("model=mine", "--config-dir={prepared}/configs"), "{prepared}/configs/model/mine.yaml:3:1: not valid YAML"),
    # --- outputs: checked before any work, never half-written -------------------------------------------------------
    InputCase("embed_output_a_directory", "embed", ("checkpoint={bert}", "input_file={prepared}/sentences.txt", "output_file={prepared}/out.hdf5"), "output_file={prepared}/out.hdf5: a directory; expected the name of a file to write"),
    InputCase("embed_output_under_a_file", "embed", ("checkpoint={bert}", "input_file={prepared}/sentences.txt", "output_file={prepared}/bom.tsv/out.hdf5"), "output_file={prepared}/bom.tsv/out.hdf5: {prepared}/bom.tsv is a file, not a folder"),
    InputCase("generate_output_a_directory", "generate", (*GENERATE, "prompt=The", "output_file={prepared}/out.hdf5"), "output_file={prepared}/out.hdf5: a directory; expected the name of a file to write"),
    # --- messages that name the file -------------------------------------------------------------------------------
    InputCase("validation_file_shorter_than_a_window", "train", ("data.validation_files=[{prepared}/short.txt]",), "data.validation_files=[{prepared}/short.txt]: the corpus has", base=GPT2),
    # --- the cache folder ------------------------------------------------------------------------------------------
    InputCase("cache_read_only", "train", ("data.cache_dir={read_only}",), "data.cache_dir={read_only}: cannot create or write the data cache there (Permission denied)"),
    InputCase("cache_under_a_file", "train", ("data.cache_dir={prepared}/bom.tsv/cache",), "data.cache_dir={prepared}/bom.tsv/cache: cannot create or write the data cache there (Not a directory)"),
]  # fmt: skip


@dataclass(frozen=True)
class Handled:
    """An unusual but legal input: the command succeeds, and ``check(outcome)`` asserts the result."""

    name: str
    command: str
    overrides: tuple[str, ...]
    base: tuple[str, ...] | None = None
    env: tuple[tuple[str, str | None], ...] = ()


HANDLED = [
    Handled("tsv_header_bom", "finetune", (*CLASSIFY, "data.train_file={prepared}/bom.tsv", "data.validation_file={prepared}/bom.tsv")),
    Handled("prompts_with_line_separators_and_bom", "generate", (*GENERATE, "prompts_file={prepared}/prompts.txt", "output_file={tmp}/out.jsonl")),
    Handled("vocab_txt_bom", "train", ("data.tokenizer.path={prepared}/bom/vocab.txt", "trainer.max_steps=1", "trainer.save_every=0")),
    Handled("prompt_looks_like_a_number", "generate", (*GENERATE, "prompt=1e3", "output_file={tmp}/out.jsonl")),
    Handled("warmup_longer_than_the_run", "finetune", ("trainer.max_steps=1", "trainer.epochs=null", "trainer.save_every=0", "optimizer.warmup_steps=5")),
    Handled("cache_variable_empty", "train", (), base=DEFAULT_CACHE, env=(("PLM_TOOLKIT_CACHE", ""), ("HOME", "{tmp}/home"))),
]  # fmt: skip


def _check_tsv_header_bom(outcome: dict) -> None:
    """The header's first column is 'text' (not '\\ufefftext'): the labels are the file's, and it trained."""
    saved = OmegaConf.load(Path(outcome["places"]["run"]) / "checkpoints" / "last" / ckpt.CONFIG_FILE)
    assert list(saved.task.labels) == ["negative", "positive"]
    assert "byte-order mark" in outcome["done"].stderr + _logs(outcome)


def _check_prompts(outcome: dict) -> None:
    """One row per line of the file, each prompt exactly its line (U+2028, U+0085 and a form feed inside it, the
    byte-order mark dropped)."""
    text = (Path(outcome["places"]["tmp"]) / "out.jsonl").read_text(encoding="utf-8")
    rows = [json.loads(line) for line in text.split("\n") if line]  # not splitlines(): U+2028 is inside a row
    assert [row["prompt"] for row in rows] == PROMPTS


def _check_cache_variable_empty(outcome: dict) -> None:
    """PLM_TOOLKIT_CACHE set to nothing counts as unset: the cache is under $HOME/.cache/plm_toolkit, and the
    working directory holds nothing but the run (it once held the whole cache)."""
    assert outcome["left"] == ["home"], outcome["left"]
    cache = Path(outcome["places"]["tmp"]) / "home" / ".cache" / "plm_toolkit"
    assert list((cache / "tokenizers").glob("*.json")), sorted(p.name for p in cache.iterdir())


def _check_warmup(outcome: dict) -> None:
    """Legal, so it trains; but one line says that the learning rate never reaches its peak."""
    assert (
        "optimizer.warmup_steps=5 lasts the whole run of 1 optimizer step(s): the learning rate climbs to 20% of its peak"
        in (outcome["done"].stderr + _logs(outcome))
    )


def _check_vocab_txt_bom(outcome: dict) -> None:
    """A vocab.txt that starts with a byte-order mark: [PAD] keeps id 0 (it was "no [PAD] token"), and it trained."""
    from tokenizers import Tokenizer

    tokenizer = Tokenizer.from_file(str(Path(outcome["places"]["run"]) / "checkpoints" / "last" / ckpt.TOKENIZER_FILE))
    assert tokenizer.token_to_id("[PAD]") == 0 and tokenizer.token_to_id("\ufeff[PAD]") is None
    assert "byte-order mark" in outcome["done"].stderr + _logs(outcome)


def _check_number_prompt(outcome: dict) -> None:
    """prompt=1e3 reaches the model as the text typed, not as Hydra's float 1000.0."""
    row = json.loads((Path(outcome["places"]["tmp"]) / "out.jsonl").read_text())
    assert row["prompt"] == "1e3"


CHECKS = {
    "vocab_txt_bom": _check_vocab_txt_bom,
    "prompt_looks_like_a_number": _check_number_prompt,
    "warmup_longer_than_the_run": _check_warmup,
    "tsv_header_bom": _check_tsv_header_bom,
    "prompts_with_line_separators_and_bom": _check_prompts,
    "cache_variable_empty": _check_cache_variable_empty,
}

PROMPTS = ["The history of\u2028the city", "A line\x85with a next-line", "and a\x0cform feed"]


def _logs(outcome: dict) -> str:
    run = Path(outcome["places"]["run"])
    return "".join(p.read_text() for p in run.glob("*.log")) if run.is_dir() else ""


def write_files(root: Path) -> None:
    """The input files of the cases, byte for byte."""
    rows = [{"text": "a fine film", "label": "pos"}, {"text": "dull", "label": None}, {"text": "ok", "label": "neg"}]
    (root / "label_null.jsonl").write_text("".join(json.dumps(r) + "\n" for r in rows))
    (root / "row_array.jsonl").write_text('{"text": "a", "label": "pos"}\n["b", "neg"]\n')
    (root / "row_string.jsonl").write_text('{"text": "a", "label": "pos"}\n\n"b"\n')
    (root / "text_array.jsonl").write_text('{"text": ["a", "b"], "label": "pos"}\n')
    (root / "surrogate.jsonl").write_text('{"text": "fine", "label": "pos"}\n{"text": "bad \\ud800", "label": "neg"}\n')
    (root / "nan_label.jsonl").write_text('{"text": "a", "label": 1.5}\n{"text": "b", "label": NaN}\n')
    (root / "nan_score.tsv").write_text("text\tlabel\na\t1.5\nb\tnan\n")
    (root / "bom.tsv").write_bytes(b"\xef\xbb\xbftext\tlabel\na fine film\tpositive\ndull\tnegative\n")
    prompts = "\ufeff" + PROMPTS[0] + "\n" + PROMPTS[1] + "\r\n\n" + PROMPTS[2] + "\n"
    (root / "prompts.txt").write_text(prompts, encoding="utf-8", newline="")
    question = {"question": "who?", "id": "q1", "answers": [{"text": "Ada", "answer_start": 0}], "is_impossible": False}

    def squad(name: str, *questions: dict) -> None:
        paragraph = {"context": "Ada wrote the first program.", "qas": list(questions)}
        text = json.dumps({"version": "v2.0", "data": [{"title": "t", "paragraphs": [paragraph]}]})
        (root / name).write_text(text.replace("SURROGATE", "\\udc00"))

    squad("squad_duplicate_id.json", question, {**question, "question": "what?"})
    squad("squad_surrogate.json", {**question, "question": "who SURROGATE?"})
    squad("squad_impossible_string.json", {**question, "is_impossible": "false"})
    squad("squad_start_true.json", {**question, "answers": [{"text": "Ada", "answer_start": True}]})
    os.mkfifo(root / "fifo")
    (root / "out.hdf5").mkdir()
    (root / "sentences.txt").write_text("the cat sat\non the mat\n")
    (root / "short.txt").write_text("The cat.\n")
    configs = root / "configs"
    (configs / "model").mkdir(parents=True)
    (configs / "broken.yaml").write_text("defaults:\n  - train\n  - _self_\ntrainer:\n  max_steps: [1\n")
    (configs / "twice.yaml").write_text("defaults:\n  - train\n  - _self_\ntrainer:\n  max_steps: 1\n  max_steps: 2\n")
    (configs / "model" / "mine.yaml").write_text("name: bert\nhidden_size: [\n")


def write_vocabularies(root: Path, tokenizer) -> None:
    """A vocab.txt with a line repeated; a vocab.json + merges.txt and a tokenizer.json (with a byte-order mark) in
    which two tokens share an id."""
    (root / "duplicate").mkdir()
    lines = ["[PAD]", "[UNK]", "[CLS]", "[SEP]", "[MASK]", "a", "the", "cat", "the", "sat"]
    (root / "duplicate" / "vocab.txt").write_text("\n".join(lines) + "\n")
    (root / "bom").mkdir()
    tokens = sorted(tokenizer.get_vocab(), key=tokenizer.token_to_id)
    (root / "bom" / "vocab.txt").write_text("\ufeff" + "\n".join(tokens) + "\n", encoding="utf-8")
    (root / "shared_id").mkdir()
    vocab = {"<s>": 0, "<pad>": 1, "</s>": 2, "<unk>": 3, "<mask>": 4, "c": 5, "d": 6, "e": 7, "a": 9, "b": 9}
    (root / "shared_id" / "vocab.json").write_text(json.dumps(vocab))
    (root / "shared_id" / "merges.txt").write_text("#version: 0.2\n")
    shared = json.loads(tokenizer.to_str())
    model_vocab = shared["model"]["vocab"]
    model_vocab[next(t for t in model_vocab if t not in ("[PAD]", "[UNK]"))] = model_vocab["[UNK]"]
    (root / "shared_id" / "tokenizer.json").write_text("\ufeff" + json.dumps(shared), encoding="utf-8")


def save_xl(root: Path, tokenizer) -> Path:
    """A tiny random Transformer-XL with its CLM objective (the output bias lives in objective.safetensors), as
    plm-train writes it, and copies whose objective file holds a NaN, an extra tensor or is missing."""
    torch.manual_seed(0)
    config = TransformerXLConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2,
                                 head_size=8, intermediate_size=17, mem_len=8)  # fmt: skip
    model = TransformerXL(config)
    objective = CausalLanguageModeling(ClmConfig(), model, vocab_from_tokenizer(tokenizer))
    sections = {"model": OmegaConf.to_container(OmegaConf.structured(config)), "objective": {"name": "clm"}}
    state = {"step": 1, "samples_seen": 0}
    step = ckpt.save_checkpoint(
        root / "xl", 1, model, objective, state, OmegaConf.to_yaml(sections), tokenizer.to_str(), 0
    )
    head = load_file(str(step / ckpt.OBJECTIVE_FILE))
    for name, broken in (
        ("xl_nan_head", {"bias": head["bias"].index_fill(0, torch.tensor([4]), float("nan"))}),
        ("xl_extra_head", {**head, "adaptive.head.weight": torch.zeros(3, 16)}),
    ):
        shutil.copytree(step, root / name)
        save_file(broken, str(root / name / ckpt.OBJECTIVE_FILE))
    shutil.copytree(step, root / "xl_no_head")
    (root / "xl_no_head" / ckpt.OBJECTIVE_FILE).unlink()
    gpt2 = GPT(GPT2Config(vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2,
                          intermediate_size=17, max_position_embeddings=32))  # fmt: skip
    sections = {"model": OmegaConf.to_container(OmegaConf.structured(gpt2.config)), "objective": {"name": "clm"}}
    ckpt.save_checkpoint(root / "gpt2", 1, gpt2, nn.Module(), state, OmegaConf.to_yaml(sections), tokenizer.to_str(), 0)
    shutil.copytree(step, root / "xl_run" / "checkpoints" / "step_1")
    shutil.copytree(root / "xl_nan_head", root / "xl_run" / "checkpoints" / "step_2")
    return step


def save_bert_nan_head(root: Path, bert: Path) -> None:
    """A copy of the BERT checkpoint with an MLM head (objective=mlm) whose output bias holds a NaN."""
    shutil.copytree(bert, root / "bert_nan_head")
    saved = OmegaConf.load(bert / ckpt.CONFIG_FILE)
    saved.objective = {"name": "mlm"}
    OmegaConf.save(saved, root / "bert_nan_head" / ckpt.CONFIG_FILE)
    rows = load_file(str(bert / ckpt.MODEL_FILE))["embeddings.word_embeddings.weight"].shape[0]
    bias = torch.zeros(rows).index_fill(0, torch.tensor([2]), float("nan"))
    save_file({"mlm.head.bias": bias}, str(root / "bert_nan_head" / ckpt.OBJECTIVE_FILE))


@pytest.fixture(scope="module")
def prepared(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("bad_inputs_inputs")
    files = root / "prepared"
    files.mkdir()
    texts = Path(resource_path("corpora/wikitext2/train.txt")).read_text().splitlines()[:400]
    tokenizer = tiny_tokenizer(texts, vocab_size=300)
    bert = save_tiny_checkpoint(root / "bert", tokenizer)
    write_files(files)
    write_vocabularies(files, tokenizer)
    xl = save_xl(files, tokenizer)
    save_bert_nan_head(files, bert)
    read_only = root / "read_only"
    read_only.mkdir()
    read_only.chmod(0o555)
    corpus = root / "corpus.txt"
    corpus.write_text(Path(resource_path("corpora/wikitext2/train.txt")).read_text()[:6000])
    return {
        "root": root,
        "prepared": files,
        "bert": bert,
        "xl": xl,
        "corpus": corpus,
        "read_only": unwritable(read_only),
    }


def unwritable(folder: Path) -> Path | None:
    """``folder`` (mode 555) where this user cannot write into it, else (root) /sys where it is read-only, else None."""
    for candidate in (folder, Path("/sys")):
        try:
            (candidate / ".probe").touch()
            (candidate / ".probe").unlink()
        except OSError:
            return candidate
    return None


@pytest.fixture(scope="module")
def outcomes(prepared) -> dict[str, dict]:
    """Every case run once, two at a time: name -> the finished process, its placeholders and what its directory
    holds afterwards besides the run directory."""
    base_env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    base_env.pop("HYDRA_FULL_ERROR", None)

    def one(case) -> tuple[str, dict]:
        tmp = prepared["root"] / "cases" / case.name
        tmp.mkdir(parents=True)
        places = {
            "files": str(FILES),
            "tmp": str(tmp),
            "run": str(tmp / "run"),
            "checkpoint": str(prepared["bert"]),
            "bert": str(prepared["bert"]),
            "xl": str(prepared["xl"]),
            "gpt2": str(prepared["prepared"] / "gpt2"),
            "prepared": str(prepared["prepared"]),
            "corpus": str(prepared["corpus"]),
            "cache": str(prepared["root"] / "cache"),
            "read_only": str(prepared["read_only"]),
        }
        env = dict(base_env)
        for key, value in case.env:
            env.pop(key, None) if value is None else env.__setitem__(key, value.format(**places))
        argv = command_line(Case(case.name, case.command, case.overrides, "", base=case.base), places)
        done = subprocess.run(argv, cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        left = sorted(p.name for p in tmp.iterdir() if p.name != "run")
        return case.name, {"done": done, "places": places, "left": left}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, [*CASES, *HANDLED]))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_one_line(case, outcomes, prepared):
    if "{read_only}" in case.expected and prepared["read_only"] is None:
        pytest.skip("no folder here that this user cannot write to")
    outcome = outcomes[case.name]
    assert_one_error_line(case, outcome)
    assert outcome["left"] == [], f"left in the case's directory: {outcome['left']}"
    assert not list(prepared["prepared"].glob(".*.tmp")), "a temporary file left beside an output"


@pytest.mark.slow
@pytest.mark.parametrize("case", HANDLED, ids=[c.name for c in HANDLED])
def test_unusual_input_gets_the_right_result(case, outcomes):
    outcome = outcomes[case.name]
    done = outcome["done"]
    assert done.returncode == 0, f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    CHECKS[case.name](outcome)
