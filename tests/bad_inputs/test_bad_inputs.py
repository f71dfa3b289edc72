"""Every bad input through the real command line: exit status 1, exactly one line on stderr that starts with
``error:`` and names the file or key, no traceback anywhere, checkpoints left as they were and nothing half-written
beside them.

To add a case (every new reader should): put its input file in ``files/`` (or build it in ``pretrained_run`` when it
cannot be a static file) and add a row to CASES: the command, its arguments and a fragment of the expected line.
Placeholders in both: ``{files}`` (this folder's files/), ``{tmp}`` (the case's own directory), ``{checkpoint}``
(a plm-train checkpoint of a tiny BERT), ``{prepared}`` (the folders ``pretrained_run`` builds: checkpoints of other
families, broken copies) and ``{run}`` (the case's run directory). A case with ``resume=True`` runs in a copy of a
finished plm-train run, whose checkpoints must come out untouched; a case with ``untouched`` names a folder that must
come out as it was (files, links and folders). A case's directory must hold nothing else afterwards (no output file,
no temporary folder).

The cases run as subprocesses, several at a time, once per session; each test then reads its own outcome.
"""

from __future__ import annotations

import json
import os
import pickle
import shutil
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module

from plm_toolkit.commands.train import run as train_run
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.resources import resource_path
from plm_toolkit.core.weights import read_weights
from plm_toolkit.interop.hf import export_hf
from plm_toolkit.interop.pretrained import load_backbone
from tests.conftest import save_finetuned, save_untrained, tiny_transformer, tree_digest
from tests.training.conftest import QUIET, TINY

FILES = Path(__file__).parent / "files"

# The command -> its module. train, finetune, generate and embed take Hydra overrides; export and average take
# positional arguments (see their ``main``).
MODULES = {
    "train": "plm_toolkit.commands.train",
    "finetune": "plm_toolkit.commands.finetune",
    "generate": "plm_toolkit.commands.generate",
    "embed": "plm_toolkit.commands.embed",
    "export": "plm_toolkit.commands.export",
    "average": "plm_toolkit.commands.average",
    "prepare": "plm_toolkit.commands.prepare",
}


@dataclass(frozen=True)
class Case:
    name: str
    # A key of MODULES.
    command: str
    # Overrides, or the positional arguments of export and average.
    overrides: tuple[str, ...]
    # A fragment of the one error line, after placeholders are filled in.
    expected: str
    # Run in a copy of a finished plm-train run ({run}, checkpoints/ present; plm-train resumes it).
    resume: bool = False
    # plm-train: the overrides the case's own ones follow (a tiny BERT on a small corpus unless given).
    base: tuple[str, ...] | None = None
    # A folder (placeholders allowed) whose whole tree must come out unchanged.
    untouched: str | None = None


SQUAD = ("task=squad2", "data.max_seq_len=48", "task.doc_stride=16", "task.max_query_length=8")
BERT = (*TINY, "data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}")
ERNIE = (*BERT, "model=ernie", "model.hidden_size=36", "model.num_heads=3", "model.intermediate_size=37")
ELMO = ("model=elmo", "model.char_embedding_size=5", "model.filters=[[1,7],[2,9]]", "model.hidden_size=13",
        "model.cell_size=29", "data=text_files", "data.train_files=[{corpus}]", "data.cache_dir={cache}",
        "data.max_seq_len=12", *QUIET)  # fmt: skip
TRANSLATION = ("model=transformer", "model.hidden_size=32", "model.num_heads=2", "model.intermediate_size=48",
               "model.max_position_embeddings=64", "data.max_seq_len=48", "data.tokenizer.vocab_size=600",
               "data.cache_dir={cache}", *QUIET)  # fmt: skip
EMBED = ("input_file={files}/sentences.txt", "output_file={tmp}/out.hdf5")

CASES = [
    # --- config keys and values ---------------------------------------------------------------------------------
    Case("unknown_key_added", "train", ("+trainer.max_step=5",), "trainer.max_step: unknown key; did you mean trainer.max_steps?"),
    Case("misspelt_key", "train", ("trainer.max_step=5",), "trainer.max_step: unknown key; did you mean trainer.max_steps?"),
    Case("misspelt_group", "train", ("modle=bert_base",), "modle: unknown key; did you mean model?"),
    Case("unknown_option", "train", ("model=bert_huge",), "model=bert_huge: no such option in the config group 'model'; did you mean bert_large?"),
    Case("not_a_group", "finetune", ("model=bert_base",), "model: not a config group of this command; set its keys as model.<key>=<value>"),
    Case("unknown_task", "finetune", ("task=squad3",), "task=squad3: no such option in the config group 'task'; did you mean squad2?"),
    Case("wrong_type", "train", ("trainer.max_steps=abc",), "trainer.max_steps=abc: Value 'abc' of type 'str' could not be converted to Integer"),
    Case("bad_choice", "train", ("hardware.device=tpu",), "hardware.device=tpu: Invalid value 'tpu', expected one of [auto, cpu, cuda]"),
    Case("lr_nan", "train", ("optimizer.lr=nan",), "optimizer.lr=nan: expected a finite number in (0, inf)"),
    Case("lr_negative", "finetune", ("optimizer.lr=-1",), "optimizer.lr=-1.0: expected a finite number in (0, inf)"),
    Case("warmup_inf", "train", ("optimizer.warmup_ratio=inf",), "optimizer.warmup_ratio=inf: expected a finite number in [0, 1)"),
    Case("width_zero", "train", ("model.hidden_size=0",), "model.hidden_size=0: must be at least 1"),
    Case("dropout_above_one", "train", ("model=gpt2_tiny", "objective=clm", "model.embedding_dropout=1.2"), "model.embedding_dropout=1.2: expected a finite number in [0, 1)"),
    Case("memory_negative", "train", ("model.mem_len=-3",), "model.mem_len=-3: must be 0 or positive", base=("model=xlnet_tiny", "objective=plm", *QUIET)),
    Case("seed_negative", "finetune", ("trainer.seed=-5",), "trainer.seed=-5: must be 0 or positive"),
    Case("pair_draws_zero", "train", ("data.pair_draws=0",), "data.pair_draws=0: expected how many times to draw the sentence pairs, 1 or more"),
    Case("head_activation_unknown", "finetune", ("task.head_activation=relu",), "task.head_activation=relu: expected null or one of tanh, gelu"),
    Case("head_bias_not_a_bool", "finetune", ("task.head_bias=maybe",), "task.head_bias=maybe: Value 'maybe' is not a valid bool (type str)"),
    Case("workers_negative", "train", ("data.num_workers=-1",), "data.num_workers=-1: must be 0 (load in the training process) or positive"),
    Case("steps_and_epochs", "finetune", ("trainer.max_steps=10", "trainer.epochs=2"), "trainer.max_steps=10 and trainer.epochs=2.0: give exactly one length"),
    Case("run_dir_not_writable", "train", ("hydra.run.dir={files}/blank_corpus.txt/run",), "hydra.run.dir: cannot create or write the run directory ({files}/blank_corpus.txt"),
    Case("bilm_subword_tokenizer", "train", ("data.tokenizer.kind=wordpiece",), "data.tokenizer.kind=wordpiece: objective=bilm predicts whole words; set data.tokenizer.kind=word", base=ELMO),
    # --- pretraining corpora and checkpoints ---------------------------------------------------------------------
    Case("corpus_nul_byte", "train", ("data.train_files=[{files}/binary_corpus.txt]",), "{files}/binary_corpus.txt:2: NUL byte"),
    Case("corpus_not_utf8", "train", ("data.train_files=[{files}/latin1_corpus.txt]",), "{files}/latin1_corpus.txt:1: not valid UTF-8"),
    Case("corpus_blank", "train", ("data.train_files=[{files}/blank_corpus.txt]",), "corpus file {files}/blank_corpus.txt has no text"),
    Case("resume_missing", "train", ("trainer.resume={tmp}/nowhere",), "trainer.resume={tmp}/nowhere: no checkpoint there"),
    Case("resume_other_shape", "train", ("model.hidden_size=48", "trainer.resume_changes=accept"), "model.safetensors: incompatible shapes", resume=True),
    Case("resume_nan_lr", "train", ("optimizer.lr=nan",), "optimizer.lr=nan", resume=True),
    # --- parallel text (data=parallel, objective=translation) ------------------------------------------------------
    Case("parallel_target_missing", "train", ("data.train_files=[{files}/only_source]",), "data.train_files: {files}/only_source is read as the prefix of only_source.en and only_source.de (data.source_lang=en, data.target_lang=de); missing: {files}/only_source.de", base=TRANSLATION),
    Case("parallel_line_counts", "train", ("data.train_files=[{files}/uneven]",), "{files}/uneven.en has 3 lines but {files}/uneven.de has 2; parallel files must be line-aligned", base=TRANSLATION),
    Case("parallel_jsonl_no_key", "train", ("data.train_files=[{files}/no_target_key.jsonl]",), "{files}/no_target_key.jsonl:3: no key 'de' (data.target_lang); the row has 'en', 'fr'", base=TRANSLATION),
    # --- ERNIE's knowledge units ----------------------------------------------------------------------------------
    Case("span_noise_density_one_or_more", "train", ("objective.noise_density=1.5",), "objective.noise_density=1.5: expected a share in (0, 1)", base=("model=t5",)),
    Case("gazetteer_not_utf8", "train", ("objective.entity_gazetteer={files}/latin1_gazetteer.txt",), "{files}/latin1_gazetteer.txt:2: not valid UTF-8", base=ERNIE),
    Case("lexicon_empty", "train", ("objective.phrase_lexicon={files}/blank_corpus.txt",), "objective.phrase_lexicon={files}/blank_corpus.txt: no entries of 2 word(s) or more", base=ERNIE),
    Case("entity_tagger_not_ner", "train", ("objective.entity_tagger={checkpoint}",), "objective.entity_tagger={checkpoint} is a pretraining checkpoint (no task); expected a named-entity tagger from plm-finetune task=ner", base=ERNIE),
    Case("units_corpus_no_letters", "train", ("data.train_files=[{files}/digits_corpus.txt]",), "{files}/digits_corpus.txt has no letters", base=ERNIE),
    # --- fine-tuning data --------------------------------------------------------------------------------------
    Case("squad_no_usable_example", "finetune", (*SQUAD, "data.train_file={files}/squad_answer_start.json"), "no usable training examples in {files}/squad_answer_start.json (1 skipped: answer_start does not match the answer text"),
    Case("squad_impossible_false", "finetune", (*SQUAD, "data.train_file={files}/squad_impossible_false.json"), "data[0].paragraphs[0].qas[1] (id=q-contradiction): is_impossible is false but there are no answers"),
    Case("squad_malformed", "finetune", (*SQUAD, "data.train_file={files}/squad_malformed.json"), "{files}/squad_malformed.json:3:"),
    Case("tsv_extra_fields", "finetune", ("data.train_file={files}/extra_fields.tsv",), "{files}/extra_fields.tsv:3: 3 fields, more than the header's 2"),
    Case("train_file_missing", "finetune", ("data.train_file={tmp}/train.tsv",), "data.train_file: {tmp}/train.tsv is not a file"),
    Case("evaluate_without_validation_file", "finetune", ("trainer.epochs=0", "data.validation_file=null"), "trainer.epochs=0 evaluates without training: give data.validation_file"),
    # --- backbones for fine-tuning ---------------------------------------------------------------------------------
    Case("checkpoint_missing", "finetune", ("model.checkpoint={tmp}/none",), "model.checkpoint={tmp}/none: no such file or directory"),
    Case("checkpoint_yaml", "finetune", ("model.checkpoint={prepared}/bad_yaml",), "{prepared}/bad_yaml/config.yaml:2:13: not valid YAML"),
    Case("hf_pickle", "finetune", ("model.checkpoint={prepared}/hf_pickle",), "{prepared}/hf_pickle/pytorch_model.bin: refused: besides tensors this pickle holds argparse.Namespace, and unpickling it could run code"),
    Case("hf_config_heads", "finetune", ("model.checkpoint={prepared}/hf_heads",), "{prepared}/hf_heads/config.json: inconsistent config"),
    Case("checkpoint_truncated", "finetune", ("model.checkpoint={prepared}/truncated",), "{prepared}/truncated/model.safetensors: not a readable safetensors file"),
    Case("checkpoint_nan", "finetune", ("model.checkpoint={prepared}/nan",), "{prepared}/nan/model.safetensors: embeddings.word_embeddings.weight holds 36 NaN and 0 infinite value(s); expected finite weights"),
    Case("checkpoint_int_weights", "embed", ("checkpoint={prepared}/int_weights", *EMBED), "{prepared}/int_weights/model.safetensors: embeddings.word_embeddings.weight is int64; expected floating-point weights (float32, float16 or bfloat16)"),
    Case("checkpoint_yaml_not_utf8", "export", ("{prepared}/yaml_latin1", "{tmp}/hf"), "{prepared}/yaml_latin1/config.yaml: not UTF-8 text (byte 0); expected a YAML mapping"),
    Case("checkpoint_yaml_negative", "export", ("{prepared}/yaml_negative", "{tmp}/hf"), "{prepared}/yaml_negative/config.yaml: model.num_layers=-2: must be at least 1"),
    Case("checkpoint_tokenizer_larger", "finetune", ("model.checkpoint={prepared}/big_tokenizer",), "{prepared}/big_tokenizer/tokenizer.json: 650 tokens, but the model's word embeddings have 600 rows"),
    Case("resume_infinite_weights", "train", ("trainer.resume={prepared}/inf",), "{prepared}/inf/model.safetensors: embeddings.word_embeddings.weight holds 0 NaN and 1 infinite value(s)"),
    Case("hf_config_list", "finetune", ("model.checkpoint={prepared}/hf_list",), "{prepared}/hf_list/config.json: holds a JSON list; expected an object of config keys"),
    Case("hf_config_string_size", "embed", ("checkpoint={prepared}/hf_string_size", *EMBED), '{prepared}/hf_string_size/config.json: hidden_size is "36"; expected a number'),
    Case("hf_config_negative_size", "finetune", ("model.checkpoint={prepared}/hf_negative",), "{prepared}/hf_negative/config.json: model.intermediate_size=-37: must be at least 1"),
    Case("hf_pickle_code", "finetune", ("model.checkpoint={prepared}/hf_code",), "{prepared}/hf_code/pytorch_model.bin: refused: besides tensors this pickle holds posix.system, and unpickling it could run code"),
    Case("hf_pickle_raw", "embed", ("checkpoint={prepared}/hf_raw_pickle", *EMBED), "{prepared}/hf_raw_pickle/pytorch_model.bin: not a PyTorch weights file that loads safely"),
    Case("hf_task_head_shape", "finetune", ("model.checkpoint={prepared}/hf_classifier",), "{prepared}/hf_classifier/model.safetensors: classifier.weight has shape (3, 36); expected (2, 36) (config.json's id2label has 2 label(s); hidden size 36)"),
    # --- plm-generate ------------------------------------------------------------------------------------------------
    Case("generate_unknown_key", "generate", ("checkpoint={checkpoint}", "prompt=a", "top_q=0.5"), "top_q: unknown key; did you mean top_p?"),
    Case("generate_top_p_zero", "generate", ("checkpoint={checkpoint}", "prompt=a", "top_p=0"), "top_p=0.0: expected a probability in (0, 1]"),
    Case("generate_bidirectional", "generate", ("checkpoint={checkpoint}", "prompt=a"), "model=bert is bidirectional: it cannot generate text"),
    Case("generate_prompt_too_long", "generate", ("checkpoint={prepared}/transformer", "prompts_file={files}/long_prompt.txt"), "{files}/long_prompt.txt:3: 201 tokens with the end token, more than the model's 128 (max_position_embeddings)"),
    # --- plm-embed and ELMo's bilm-tf files ------------------------------------------------------------------------
    Case("embed_blank_line", "embed", ("checkpoint={prepared}/elmo", "input_file={files}/blank_line.txt", "output_file={tmp}/out.hdf5"), "{files}/blank_line.txt:2: empty line; expected one sentence per line"),
    Case("embed_output_suffix", "embed", ("checkpoint={prepared}/elmo", *EMBED[:1], "output_file={tmp}/out.txt"), "output_file={tmp}/out.txt: expected a .hdf5, .h5 or .safetensors file"),
    Case("bilm_tf_options_field", "embed", ("checkpoint={prepared}/elmo_no_field", *EMBED), "{prepared}/elmo_no_field/options.json: missing field 'lstm.projection_dim'"),
    Case("bilm_tf_no_dataset", "embed", ("checkpoint={prepared}/elmo_no_dataset", *EMBED), "{prepared}/elmo_no_dataset/weights.hdf5: no dataset 'CNN_high_0/W_carry'"),
    Case("bilm_tf_wrong_shape", "embed", ("checkpoint={prepared}/elmo_wrong_shape", *EMBED), "{prepared}/elmo_wrong_shape/weights.hdf5: dataset 'CNN/b_cnn_1' has shape (8,), the options imply (7,)"),
    # --- plm-export and plm-average ----------------------------------------------------------------------------------
    Case("export_missing", "export", ("{tmp}/nothing", "{tmp}/hf"), "{tmp}/nothing: no plm-train checkpoint here"),
    Case("export_out_not_a_folder", "export", ("{checkpoint}", "{files}/blank_corpus.txt/hf"), "{files}/blank_corpus.txt/hf: cannot be created: {files}/blank_corpus.txt is a file, not a folder"),
    Case("export_no_transformers_class", "export", ("{prepared}/transformer_xl", "{tmp}/hf"), "model=transformer_xl has no Hugging Face adapter (transformers has no such model)"),
    Case("export_over_other_files", "export", ("{checkpoint}", "{prepared}/mine/hf"), "{prepared}/mine/hf: holds files plm-export did not write (notes.txt); give a new or empty folder", untouched="{prepared}/mine"),
    Case("export_bilm_tf_not_elmo", "export", ("{checkpoint}", "{tmp}/elmo", "--format", "bilm-tf"), "--format bilm-tf holds model=elmo only; this checkpoint is model=bert: export it with --format hf"),
    Case("export_elmo_as_hf", "export", ("{prepared}/elmo_run", "{tmp}/hf"), "model=elmo has no Hugging Face adapter (transformers has no such model); families with one: albert, bert,"),
    Case("export_task_head_without_class", "export", ("{prepared}/electra_rte", "{tmp}/hf"), "objective.safetensors: task=rte's head is a sequence classifier over the first token's state, which no transformers electra class computes; ElectraForSequenceClassification is a sequence classifier with its own dense layer and gelu over the first token's state (plm-finetune task.head_activation=gelu trains that head) (--backbone-only exports the model without the task's head)"),
    Case("export_unknown_format", "export", ("{prepared}/elmo_run", "{tmp}/hf", "--format", "bilm"), "argument --format: invalid choice: 'bilm' (choose from"),
    Case("average_too_many", "average", ("{run}", "5", "{tmp}/averaged"), "{run}: asked to average 5 checkpoints but it has 1 (step_2); train with trainer.keep_last >= 5", resume=True),
    Case("average_over_a_run", "average", ("{run}", "1", "{run}"), "{run} exists and is not an averaged checkpoint; give a new folder", resume=True),
    Case("average_count_not_a_number", "average", ("{run}", "five", "{tmp}/averaged"), "count: invalid int value: 'five'", resume=True),
]  # fmt: skip


def command_line(case: Case, places: dict[str, str]) -> list[str]:
    if case.command == "train":
        args = [*(case.base or BERT), "hydra.run.dir={run}", *case.overrides]
    elif case.command == "finetune":
        sst2 = [resource_path("corpora/sst2/train.tsv"), resource_path("corpora/sst2/dev.tsv")]
        args = ["model.checkpoint={checkpoint}", f"data.train_file={sst2[0]}", f"data.validation_file={sst2[1]}"]
        args += ["data.max_seq_len=48", "trainer.progress_bar=false", "trainer.tensorboard=false", "hardware=cpu"]
        args += ["hydra.run.dir={run}", *case.overrides]
    elif case.command in ("generate", "embed"):
        args = ["device=cpu", *(["progress_bar=false"] if case.command == "embed" else []), *case.overrides]
    else:
        args = list(case.overrides)
    return [sys.executable, "-m", MODULES[case.command], *(a.format(**places) for a in args)]


def prepare_hf(prepared: Path, checkpoint: Path) -> None:
    """A Hugging Face export with an impossible head count, one whose weights are a pickle with more than tensors,
    and a BertForSequenceClassification whose classifier has a row more than its two labels."""
    from safetensors.torch import save_file

    backbone = load_backbone(checkpoint).model
    export_hf(prepared / "hf_classifier", backbone, None, checkpoint / "tokenizer.json")
    weights = {f"bert.{k}": v for k, v in read_weights(prepared / "hf_classifier" / "model.safetensors").items()}
    width = backbone.config.hidden_size
    weights |= {"classifier.weight": torch.zeros(3, width), "classifier.bias": torch.zeros(2)}
    save_file(weights, str(prepared / "hf_classifier" / "model.safetensors"))
    hf_config = json.loads((prepared / "hf_classifier" / "config.json").read_text())
    hf_config |= {"architectures": ["BertForSequenceClassification"], "id2label": {"0": "neg", "1": "pos"}}
    (prepared / "hf_classifier" / "config.json").write_text(json.dumps(hf_config))

    objective = read_weights(checkpoint / ckpt.OBJECTIVE_FILE)
    export_hf(prepared / "hf_heads", backbone, objective, checkpoint / "tokenizer.json")
    hf_config = json.loads((prepared / "hf_heads" / "config.json").read_text())
    (prepared / "hf_heads" / "config.json").write_text(json.dumps({**hf_config, "num_attention_heads": 5}))
    shutil.copytree(prepared / "hf_heads", prepared / "hf_pickle")
    (prepared / "hf_pickle" / "config.json").write_text(json.dumps(hf_config))
    (prepared / "hf_pickle" / "model.safetensors").unlink()
    import argparse

    state = {k: v.clone() for k, v in read_weights(prepared / "hf_heads" / "model.safetensors").items()}
    torch.save({**state, "args": argparse.Namespace(lr=1e-4)}, prepared / "hf_pickle" / "pytorch_model.bin")


def prepare_corrupt(prepared: Path, checkpoint: Path, hf: Path) -> None:
    """Copies of the plm-train checkpoint and of its Hugging Face export, each broken one way: weights cut short,
    non-finite or integer, a config.yaml not UTF-8 or with a negative count, a tokenizer larger than the embeddings,
    a config.json that is a list or has a string or negative size, a pickle that would run code."""
    from safetensors.torch import save_file

    def broken(name: str, source: Path = checkpoint, weights=None) -> Path:
        shutil.copytree(source, prepared / name)
        if weights is not None:
            state = read_weights(source / "model.safetensors")
            key = "embeddings.word_embeddings.weight"
            save_file(state | {key: weights(state[key].clone())}, str(prepared / name / "model.safetensors"))
        return prepared / name

    data = (checkpoint / ckpt.MODEL_FILE).read_bytes()
    (broken("truncated") / ckpt.MODEL_FILE).write_bytes(data[: len(data) // 2])
    broken("nan", weights=lambda w: w.index_fill_(0, torch.tensor([7]), float("nan")))
    broken("inf", weights=lambda w: w.index_put_((torch.tensor([3]), torch.tensor([5])), torch.tensor(float("inf"))))
    broken("int_weights", weights=lambda w: w.long())
    (broken("yaml_latin1") / ckpt.CONFIG_FILE).write_bytes(b"\xffmodel:\n")
    yaml_text = (checkpoint / ckpt.CONFIG_FILE).read_text()
    (broken("yaml_negative") / ckpt.CONFIG_FILE).write_text(yaml_text.replace("num_layers: 2", "num_layers: -2"))
    tokenizer = json.loads((checkpoint / ckpt.TOKENIZER_FILE).read_text())
    vocab = tokenizer["model"]["vocab"]
    vocab |= {f"extra{i}": len(vocab) + i for i in range(50)}
    (broken("big_tokenizer") / ckpt.TOKENIZER_FILE).write_text(json.dumps(tokenizer))
    hf_config = json.loads((hf / "config.json").read_text())
    (broken("hf_list", hf) / "config.json").write_text(json.dumps([hf_config]))
    (broken("hf_string_size", hf) / "config.json").write_text(json.dumps({**hf_config, "hidden_size": "36"}))
    (broken("hf_negative", hf) / "config.json").write_text(json.dumps({**hf_config, "intermediate_size": -37}))
    state = read_weights(hf / "model.safetensors")
    for name, dump in (
        ("hf_code", torch.save),
        ("hf_raw_pickle", lambda obj, path: path.write_bytes(pickle.dumps(obj))),
    ):
        (broken(name, hf) / "model.safetensors").unlink()
        dump({**state, "hook": RunsCode()}, prepared / name / "pytorch_model.bin")


class RunsCode:
    """Unpickled, it would run a shell command; the loader must refuse it unread."""

    def __reduce__(self):
        return os.system, ("echo unpickled >&2",)


def prepare_finetuned(prepared: Path, checkpoint: Path) -> None:
    """A fine-tuned ELECTRA whose RTE head is one linear layer over [CLS], as plm-finetune writes it from a
    plm-train ELECTRA: transformers' ElectraForSequenceClassification puts a gelu dense layer before its linear one."""
    from tokenizers import Tokenizer

    from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
    from plm_toolkit.models.electra import Electra, ElectraConfig
    from plm_toolkit.tasks.base import TaskData
    from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification

    tokenizer = Tokenizer.from_file(str(checkpoint / ckpt.TOKENIZER_FILE))
    config = ElectraConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=36, num_layers=1, num_heads=3,
                           intermediate_size=37, embedding_size=17)  # fmt: skip
    model, labels = Electra(config), ["entailment", "not_entailment"]
    vocab, data = vocab_from_tokenizer(tokenizer), TaskData([], None, labels=labels)
    task = SequenceClassification(ClassificationConfig(name="rte", labels=labels), model, vocab, data)
    save_finetuned(prepared / "electra_rte", model, task, tokenizer)


def prepare_elmo(prepared: Path) -> None:
    """A tiny random ELMo in bilm-tf's layout, and copies with a field, a dataset or a shape wrong."""
    h5py = pytest.importorskip("h5py")
    from plm_toolkit.data.tokenization.word_vocabulary import word_tokenizer
    from plm_toolkit.interop.elmo_bilm_tf import export_bilm_tf
    from plm_toolkit.models.elmo import Elmo, ElmoConfig

    config = ElmoConfig(char_embedding_size=4, filters=[[1, 5], [2, 7]], num_highway=1, hidden_size=11, cell_size=17)
    export_bilm_tf(prepared / "elmo", Elmo(config))
    save_untrained(prepared / "elmo_run", Elmo(config), word_tokenizer(["a", "cat"]), objective="bilm")
    for name in ("elmo_no_field", "elmo_no_dataset", "elmo_wrong_shape"):
        shutil.copytree(prepared / "elmo", prepared / name)
    options = json.loads((prepared / "elmo" / "options.json").read_text())
    del options["lstm"]["projection_dim"]
    (prepared / "elmo_no_field" / "options.json").write_text(json.dumps(options))
    with h5py.File(prepared / "elmo_no_dataset" / "weights.hdf5", "a") as weights:
        del weights["CNN_high_0/W_carry"]
    with h5py.File(prepared / "elmo_wrong_shape" / "weights.hdf5", "a") as weights:
        del weights["CNN/b_cnn_1"]
        weights["CNN/b_cnn_1"] = torch.zeros(8).numpy()


def prepare_decoders(prepared: Path, tokenizer) -> None:
    """A tiny random Transformer (128 positions) and Transformer-XL, as plm-train writes them."""
    from plm_toolkit.models.transformer_xl import TransformerXL, TransformerXLConfig

    save_untrained(prepared / "transformer", tiny_transformer(tokenizer), tokenizer)
    config = TransformerXLConfig(vocab_size=tokenizer.get_vocab_size(), hidden_size=16, num_layers=1, num_heads=2,
                                 head_size=8, intermediate_size=17, mem_len=8)  # fmt: skip
    save_untrained(prepared / "transformer_xl", TransformerXL(config), tokenizer)


def train_tiny_run(root: Path) -> Path:
    """A finished 2-step plm-train run of the tiny BERT in ``root/run`` on a small corpus ``root/corpus.txt`` (data
    cache ``root/cache``); returns the corpus."""
    docs = Path(resource_path("corpora/wikitext2/train.txt")).read_text().split("\n\n")
    corpus = root / "corpus.txt"
    corpus.write_text("\n\n".join(docs[:6])[:20000])
    overrides = [*TINY, "data=text_files", f"data.train_files=[{corpus}]", f"data.cache_dir={root / 'cache'}"]
    with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
        cfg = compose("train", overrides=[*overrides, "trainer.max_steps=2"])
    train_run(cfg, root / "run")
    return corpus


@pytest.fixture(scope="session")
def pretrained_run(tmp_path_factory, bpe_tokenizer) -> dict[str, Path]:
    """A finished 2-step plm-train run (its checkpoint is the backbone of the fine-tuning cases), and the folders
    of the cases that cannot be static files."""
    root = tmp_path_factory.mktemp("bad_inputs")
    corpus = train_tiny_run(root)
    checkpoint = root / "run" / "checkpoints" / "step_2"

    prepared = root / "prepared"
    shutil.copytree(checkpoint, prepared / "bad_yaml")
    (prepared / "bad_yaml" / ckpt.CONFIG_FILE).write_text("model:\n  name: bert: large\n")
    prepare_hf(prepared, checkpoint)
    export_hf(root / "hf", load_backbone(checkpoint).model, None, checkpoint / ckpt.TOKENIZER_FILE)
    prepare_corrupt(prepared, checkpoint, root / "hf")
    prepare_elmo(prepared)
    prepare_finetuned(prepared, checkpoint)
    prepare_decoders(prepared, bpe_tokenizer)
    (prepared / "mine" / "hf").mkdir(parents=True)  # a folder plm-export did not write
    (prepared / "mine" / "hf" / "notes.txt").write_text("not an export\n")
    return {"root": root, "corpus": corpus, "checkpoint": checkpoint, "prepared": prepared, "run": root / "run"}


@pytest.fixture(scope="session")
def outcomes(pretrained_run) -> dict[str, dict]:
    """Every case run once, two at a time: name -> returncode, stdout, stderr, places, checkpoint digests and what
    is left in the case's directory besides its run."""
    env = {**os.environ, "HF_DATASETS_DISABLE_PROGRESS_BARS": "1", "TQDM_DISABLE": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        tmp = pretrained_run["root"] / "cases" / case.name
        tmp.mkdir(parents=True)
        run_dir = tmp / "run"
        if case.resume:
            shutil.copytree(pretrained_run["run"], run_dir, symlinks=True)
        places = {
            "files": str(FILES),
            "tmp": str(tmp),
            "run": str(run_dir),
            "checkpoint": str(pretrained_run["checkpoint"]),
            "prepared": str(pretrained_run["prepared"]),
            "corpus": str(pretrained_run["corpus"]),
            "cache": str(pretrained_run["root"] / "cache"),
        }
        kept = run_dir / "checkpoints" if case.resume else None
        kept = Path(case.untouched.format(**places)) if case.untouched else kept
        before = tree_digest(kept) if kept else None
        done = subprocess.run(command_line(case, places), cwd=tmp, env=env, capture_output=True, text=True, timeout=300)
        after = tree_digest(kept) if kept else None
        left = sorted(p.name for p in tmp.iterdir() if p != run_dir)
        return case.name, {"done": done, "places": places, "before": before, "after": after, "left": left}

    with ThreadPoolExecutor(max_workers=max(2, min(4, os.cpu_count() or 2))) as pool:
        return dict(pool.map(one, CASES))


def run_cases(cases: list[Case], root: Path) -> dict[str, dict]:
    """Each case's command line run in ``root`` (two at a time, one thread each, no progress bars): case name ->
    {"done": the finished process, "places": the placeholders its command filled in}."""
    env = {**os.environ, "TQDM_DISABLE": "1", "OMP_NUM_THREADS": "1"}
    env.pop("HYDRA_FULL_ERROR", None)

    def one(case: Case) -> tuple[str, dict]:
        places = {"tmp": str(root), "run": str(root / "runs" / case.name)}
        done = subprocess.run(
            command_line(case, places), cwd=root, env=env, capture_output=True, text=True, timeout=300
        )
        return case.name, {"done": done, "places": places}

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(one, cases))


def assert_one_error_line(case: Case, outcome: dict) -> None:
    """Exit status 1, no traceback, and one line on stderr: ``error:`` and the case's expected fragment."""
    done = outcome["done"]
    output = f"stdout:\n{done.stdout[-2000:]}\nstderr:\n{done.stderr[-3000:]}"
    assert done.returncode == 1, output
    assert "Traceback" not in done.stdout + done.stderr, output
    lines = done.stderr.splitlines()
    assert len(lines) == 1 and lines[0].startswith("error: "), output
    assert case.expected.format(**outcome["places"]) in lines[0], output


def check_outcome(case: Case, outcome: dict) -> None:
    """One error line (``assert_one_error_line``), nothing left beside the run, the untouched folders untouched
    (``outcome`` as ``outcomes`` gives it)."""
    assert_one_error_line(case, outcome)
    assert outcome["left"] == [], f"left in the case's directory: {outcome['left']}"
    if case.resume or case.untouched:
        assert outcome["after"] == outcome["before"] and outcome["before"], (
            "the checkpoints or the untouched folder changed"
        )


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES, ids=[c.name for c in CASES])
def test_bad_input_gets_one_line_and_loses_nothing(case, outcomes):
    check_outcome(case, outcomes[case.name])
