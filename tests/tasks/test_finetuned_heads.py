# ruff: noqa: E501  (the tables of cases read best one case a line)
"""A plm-finetune run as model.checkpoint: its task module (head, task encoder, KBQA's two heads) starts a task of the
same name, finetune.mode and labels, through the path a fine-tuned Hugging Face folder's head takes
(``load_backbone(with_task_head=True)`` -> ``start_from_checkpoint_head``); anything else keeps a fresh head with one
warning saying why, and ``trainer.epochs=0`` on a finished run gives back the run's own eval_results.json."""

import json
import logging
import re
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import pytest
import torch
from hydra import compose, initialize_config_module
from tokenizers import Tokenizer

from plm_toolkit.commands.finetune import run
from plm_toolkit.core.command_schema import FinetuneMode, FinetuneModeConfig
from plm_toolkit.data.tokenization.tokenizer import vocab_from_tokenizer
from plm_toolkit.interop.pretrained import load_backbone
from plm_toolkit.tasks.base import TaskData
from plm_toolkit.tasks.checkpoint_head import checkpoint_labels, start_from_checkpoint_head
from plm_toolkit.tasks.classification import ClassificationConfig, SequenceClassification
from plm_toolkit.tasks.kbqa.task import KbqaConfig, KnowledgeBaseQA
from plm_toolkit.tasks.ner import NerConfig, TokenClassification
from plm_toolkit.tasks.squad.data import SquadConfig
from plm_toolkit.tasks.squad.task import QuestionAnswering
from tests.conftest import save_finetuned
from tests.tasks.conftest import QUIET, SST2_DEV, SST2_TRAIN
from tests.training.conftest import read_metrics

TAGS = ["O", "B-PER", "I-PER", "B-LOC", "I-LOC"]
RELATIONS = ["capital", "currency", "language"]
# finetune.mode=features with an odd task encoder: 7 per direction, 2 layers.
FEATURES = FinetuneModeConfig(mode=FinetuneMode.features, encoder_hidden_size=7, encoder_layers=2, dropout=0.0)


def make_task(kind: str, model, tokenizer: Tokenizer, labels=None, finetune=None, **config):
    """A task of ``kind`` over ``model``; ``labels`` and ``config`` (task.* keys) as given."""
    vocab = vocab_from_tokenizer(tokenizer)
    if kind in ("sequence", "regression"):
        regression = kind == "regression"
        labels = [] if regression else labels or ["entailment", "not_entailment"]
        name = config.pop("name", "stsb" if regression else "rte")
        task_config = ClassificationConfig(name, labels=labels, regression=regression, **config)
        return SequenceClassification(task_config, model, vocab, TaskData([], None, labels=labels), finetune=finetune)
    if kind == "token":
        labels = labels or TAGS
        return TokenClassification(
            NerConfig(labels=labels), model, vocab, TaskData([], None, labels=labels), finetune=finetune
        )
    if kind == "kbqa":
        labels = labels or RELATIONS
        return KnowledgeBaseQA(KbqaConfig(labels=labels), model, vocab, TaskData([], None, labels=labels))
    return QuestionAnswering(SquadConfig(), model, vocab, TaskData([], None), finetune=finetune)


def fine_tuned_run(root: Path, checkpoint: Path, kind: str, **options):
    """A plm-finetune checkpoint of ``kind`` over the tiny BERT, its task's weights moved off their init; returns
    (checkpoint, the task, the tokenizer)."""
    loaded = load_backbone(checkpoint)
    torch.manual_seed(1)
    task = make_task(kind, loaded.model, loaded.tokenizer, **options)
    with torch.no_grad():
        for parameter in task.parameters():
            parameter.add_(torch.randn_like(parameter) * 0.1)
    return save_finetuned(root, loaded.model, task, loaded.tokenizer), task.eval(), loaded.tokenizer


def reload(step: Path, kind: str, **options):
    """The run's backbone and head (read as plm-finetune reads them), and a new task of ``kind`` over it."""
    loaded = load_backbone(step, with_task_head=True)
    torch.manual_seed(2)  # another init than the run's
    return loaded, make_task(kind, loaded.model, loaded.tokenizer, **options)


def same_state(a: torch.nn.Module, b: torch.nn.Module) -> bool:
    ours, theirs = a.state_dict(), b.state_dict()
    return ours.keys() == theirs.keys() and all(torch.equal(ours[k], theirs[k]) for k in ours)


@pytest.mark.parametrize(
    ("kind", "options"),
    [
        ("sequence", {}),
        ("sequence", {"head_activation": "gelu", "head_bias": False}),
        ("regression", {}),
        ("token", {}),
        ("span", {}),
        ("kbqa", {}),
        ("sequence", {"finetune": FEATURES}),
        ("token", {"finetune": FEATURES}),
        ("span", {"finetune": FEATURES}),
    ],
    ids=[
        "sequence",
        "dense-no-bias",
        "regression",
        "token",
        "span",
        "kbqa",
        "features-seq",
        "features-tok",
        "features-span",
    ],
)
def test_a_runs_whole_task_module_starts_the_same_task(tiny_checkpoint, tmp_path, caplog, kind, options):
    step, trained, _ = fine_tuned_run(tmp_path / "run", tiny_checkpoint, kind, **options)
    loaded, task = reload(step, kind, **options)
    assert loaded.task_head is not None and loaded.task_head.trained.name == trained.config.name
    assert not same_state(task, trained)  # a fresh task differs: the load below is what makes them equal
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        assert start_from_checkpoint_head(task, loaded.model, loaded.task_head, loaded.initialized_keys)
    assert same_state(task, trained)
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]
    assert f"task={trained.config.name} starts from the task={trained.config.name} head" in caplog.text


def test_a_dense_layer_and_a_missing_bias_come_back_where_the_task_does_not_ask_for_them(tiny_checkpoint, tmp_path):
    """The run trained task.head_activation=gelu task.head_bias=false; the evaluation's task.* say nothing: the head
    gets its dense layer and loses its bias, and scores as the run's."""
    step, trained, _ = fine_tuned_run(
        tmp_path / "run", tiny_checkpoint, "sequence", head_activation="gelu", head_bias=False
    )
    loaded, task = reload(step, "sequence")
    assert start_from_checkpoint_head(task, loaded.model, loaded.task_head)
    assert task.head.activation_name == "gelu" and task.head.linear.bias is None
    inputs = {
        "input_ids": torch.tensor([[2, 9, 17, 31, 3], [2, 40, 3, 0, 0]]),
        "attention_mask": torch.tensor([[1] * 5, [1, 1, 1, 0, 0]]),
    }
    with torch.no_grad():
        assert torch.equal(task.eval().logits(loaded.model.eval(), inputs), trained.logits(loaded.model, inputs))


def test_labels_in_another_order_get_the_heads_rows_in_the_tasks_order(tiny_checkpoint, tmp_path, caplog):
    step, trained, _ = fine_tuned_run(tmp_path / "run", tiny_checkpoint, "token")
    loaded, task = reload(step, "token", labels=list(reversed(TAGS)))
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        assert start_from_checkpoint_head(task, loaded.model, loaded.task_head)
    assert torch.equal(task.head.linear.weight, trained.head.linear.weight.flip(0))
    assert "its labels are task=ner's in another order" in caplog.text


@pytest.mark.parametrize(
    ("kind", "trained_options", "options", "why"),
    [
        ("sequence", {"name": "sst2", "labels": ["0", "1"]}, {"name": "classification", "labels": ["0", "1"]},
         "it was fine-tuned for task=sst2, not task=classification"),
        ("token", {}, {"labels": ["O", "B-ORG", "I-ORG", "B-LOC", "I-LOC"]},
         "the checkpoint's labels are not task=ner's: it has B-PER, I-PER that the task lacks and lacks B-ORG, I-ORG"),
        ("sequence", {"labels": ["a", "b", "c"]}, {"labels": ["a", "b"]}, "3 labels in the checkpoint, 2 in task=rte"),
        ("kbqa", {}, {"labels": ["capital", "currency", "anthem"]}, "it has language that the task lacks and lacks anthem"),
        ("sequence", {}, {"finetune": FEATURES}, "it reads the backbone's states (finetune.mode=full); this run's finetune.mode=features"),
        ("span", {"finetune": FEATURES}, {}, "it reads a task encoder (finetune.mode=features); this run's finetune.mode=full"),
        ("token", {"finetune": FEATURES}, {"finetune": FinetuneModeConfig(mode=FinetuneMode.features, encoder_hidden_size=9, encoder_layers=2)},
         "its task encoder has finetune.encoder_hidden_size=7 and finetune.encoder_layers=2, this run's 9 and 2"),
        ("sequence", {"head_activation": "gelu"}, {"head_activation": "tanh"}, "task.head_activation=tanh asks for one with tanh"),
        ("sequence", {}, {"head_bias": False}, "its classifier has a bias; task.head_bias=false asks for one without"),
    ],
    ids=["other-task", "other-tags", "other-count", "other-relations", "features-now", "full-now", "encoder-size", "activation", "bias"],
)  # fmt: skip
def test_a_run_head_that_does_not_fit_keeps_a_fresh_head_with_one_warning(
    tiny_checkpoint, tmp_path, caplog, kind, trained_options, options, why
):
    step, trained, _ = fine_tuned_run(tmp_path / "run", tiny_checkpoint, kind, **trained_options)
    loaded, task = reload(step, kind, **options)
    before = {k: v.clone() for k, v in task.state_dict().items()}
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        assert not start_from_checkpoint_head(task, loaded.model, loaded.task_head)
    (warning,) = [r.getMessage() for r in caplog.records if r.levelno >= logging.WARNING]
    assert warning.startswith(f"{step / 'objective.safetensors'}: task head ") and f"{why}); " in warning
    assert warning.endswith(f"task={task.config.name} starts from a fresh head")
    assert all(torch.equal(before[k], v) for k, v in task.state_dict().items())  # nothing of the run's taken


def test_an_evaluation_without_a_training_file_takes_the_runs_labels_for_the_same_task(tiny_checkpoint, tmp_path):
    step, _, _ = fine_tuned_run(tmp_path / "run", tiny_checkpoint, "token", labels=["O", "B-X", "I-X"])
    head = load_backbone(step, with_task_head=True).task_head
    assert checkpoint_labels(TokenClassification, "ner", head) == ["O", "B-X", "I-X"]
    assert checkpoint_labels(KnowledgeBaseQA, "kbqa", head) == []  # another task's labels are not this one's


@pytest.mark.parametrize(
    ("damage", "expected"),
    [
        ("objective", "objective.safetensors: weights file not found"),
        ("task", "config.yaml: task.name=sst5 is no task known here; known: "),
    ],
)
def test_a_run_without_its_objective_file_or_with_an_unknown_task_is_refused(
    tiny_checkpoint, tmp_path, damage, expected
):
    from plm_toolkit.core.errors import CheckpointError

    step, _, _ = fine_tuned_run(tmp_path / "run", tiny_checkpoint, "sequence", name="sst2", labels=["0", "1"])
    if damage == "objective":
        (step / "objective.safetensors").unlink()
    else:
        (step / "config.yaml").write_text((step / "config.yaml").read_text().replace("name: sst2", "name: sst5"))
    with pytest.raises(CheckpointError, match="^" + re.escape(f"{step}/{expected}")):
        load_backbone(step, with_task_head=True)


def test_other_commands_read_the_backbone_alone(tiny_checkpoint, tmp_path, caplog):
    """plm-embed and the others load_backbone without with_task_head: objective.safetensors is not even read."""
    step, _, _ = fine_tuned_run(tmp_path / "run", tiny_checkpoint, "sequence")
    (step / "objective.safetensors").write_bytes(b"not a safetensors file")
    with caplog.at_level(logging.WARNING, logger="plm_toolkit"):
        loaded = load_backbone(step)
    assert loaded.task_head is None and not caplog.records


def test_an_encoder_decoders_run_is_the_whole_model(t5_checkpoint, tmp_path, caplog):
    """A text-to-text run has no weights beside its model: nothing to load, and its labels still come along."""
    from plm_toolkit.tasks.seq2seq import TextToTextClassification

    loaded = load_backbone(t5_checkpoint)
    vocab = vocab_from_tokenizer(loaded.tokenizer)
    info = {"tokenizer": loaded.tokenizer, "gold": [], "words": ["negative", "positive"], "longest": 2}
    config = ClassificationConfig("sst2", labels=["0", "1"], label_words=["negative", "positive"])
    task = TextToTextClassification(config, loaded.model, vocab, TaskData([], None, eval_info=info, labels=["0", "1"]))
    step = save_finetuned(tmp_path / "run", loaded.model, task, loaded.tokenizer)
    again = load_backbone(step, with_task_head=True)
    assert again.task_head.state == {} and again.task_head.labels == ["0", "1"]
    assert checkpoint_labels(TextToTextClassification, "sst2", again.task_head) == ["0", "1"]
    with caplog.at_level(logging.INFO, logger="plm_toolkit"):
        assert not start_from_checkpoint_head(task, again.model, again.task_head)
    assert "is an encoder-decoder: the whole model, no head to load" in caplog.text
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


def squad_file(path: Path) -> Path:
    """A SQuAD 2.0 file of 14 questions over 7 contexts made of SST-2 sentences, two of them unanswerable."""
    sentences = [line.split("\t")[0] for line in Path(SST2_DEV).read_text().splitlines()[1:15]]
    paragraphs = []
    for i in range(7):
        context = f"{sentences[2 * i]} {sentences[2 * i + 1]}"
        words = context.split()
        qas = []
        for j, word in enumerate((words[3], words[-2])):
            start = context.index(f" {word}") + 1
            impossible = (i, j) in ((2, 1), (5, 0))
            answers = [] if impossible else [{"text": word, "answer_start": start}]
            question = f"which word follows {words[2]}?" if j == 0 else f"what comes before {words[-1]}?"
            qas.append({"id": f"q{i}-{j}", "question": question, "answers": answers, "is_impossible": impossible})
        paragraphs.append({"context": context, "qas": qas})
    path.write_text(json.dumps({"version": "v2.0", "data": [{"title": "sst", "paragraphs": paragraphs}]}))
    return path


def conll_files(folder: Path) -> tuple[Path, Path]:
    tagged = ["Mary B-PER", "Smith I-PER", "went O", "to O", "New B-LOC", "York I-LOC", "today O"]
    plain = [f"{word} O" for word in ("the", "film", "is", "a", "mess", "of", "love", "and", "loss")]
    conll = "\n".join(tagged) + "\n\n" + "\n".join(plain) + "\n"
    (folder / "train.conll").write_text(conll * 4)
    (folder / "dev.conll").write_text(conll + "\n" + "\n".join(reversed(tagged)) + "\n")
    return folder / "train.conll", folder / "dev.conll"


SST2 = [f"data.train_file={SST2_TRAIN}", f"data.validation_file={SST2_DEV}", "data.max_eval_samples=41"]
FAST = ["model.dropout=0", "optimizer.lr=1e-2", "optimizer.warmup_ratio=0"]
FEATURE_KEYS = [
    "finetune.mode=features",
    "finetune.encoder_hidden_size=7",
    "finetune.encoder_layers=2",
    "finetune.dropout=0",
]


CASES = ["sst2", "classification-features", "ner", "squad2"]


@pytest.fixture(scope="module")
def evaluations(tmp_path_factory, tiny_checkpoint) -> dict[str, tuple[Path, subprocess.CompletedProcess]]:
    """Each case trained for 8 steps in this process, then evaluated as a user would, ``plm-finetune task=X
    model.checkpoint=<run> trainer.epochs=0`` (two commands at a time): case -> (its folder, the finished command)."""

    def one(case: str) -> tuple[Path, list[str]]:
        root = tmp_path_factory.mktemp(case)
        if case == "ner":
            train, dev = conll_files(root)
            files, task = [f"data.train_file={train}", f"data.validation_file={dev}"], ["task=ner"]
        elif case == "squad2":
            squad = squad_file(root / "squad.json")
            files = [f"data.train_file={squad}", f"data.validation_file={squad}"]
            task = ["task=squad2", "task.doc_stride=11", "task.max_query_length=9"]
        else:
            files = [*SST2, "data.max_train_samples=48"]
            task = (
                ["task=sst2"] if case == "sst2" else ["task=classification", "task.text_column=sentence", *FEATURE_KEYS]
            )
        length, batch = ["data.max_seq_len=29"], ["trainer.batch_size=8"]  # SQuAD's contexts take two windows or more
        overrides = [
            f"model.checkpoint={tiny_checkpoint}",
            *QUIET,
            *task,
            *FAST,
            *files,
            *length,
            *batch,
            "trainer.max_steps=8",
        ]
        with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
            run(compose("finetune", overrides=overrides), root / "run")
        validation = [f for f in files if f.startswith(("data.validation_file", "data.max_eval"))]
        return root, [sys.executable, "-m", "plm_toolkit.commands.finetune", *task, *validation, *length, *batch,
                      "trainer.epochs=0", f"model.checkpoint={root / 'run'}", *QUIET[:4],
                      f"hydra.run.dir={root / 'evaluated'}"]  # fmt: skip

    commands = {case: one(case) for case in CASES}

    def evaluate(case: str):
        root, command = commands[case]
        return case, (root, subprocess.run(command, cwd=root, capture_output=True, text=True, timeout=300))

    with ThreadPoolExecutor(max_workers=2) as pool:
        return dict(pool.map(evaluate, CASES))


@pytest.mark.slow
@pytest.mark.parametrize("case", CASES)
def test_evaluating_a_finished_run_through_the_command_line_gives_its_own_results(evaluations, case):
    """plm-finetune task=X model.checkpoint=<run> trainer.epochs=0: the run's eval_results.json, predictions and
    evaluation loss, exactly, and a log line that says whose head it starts from."""
    root, done = evaluations[case]
    assert done.returncode == 0, done.stderr[-3000:]
    written = sorted(path.name for path in (root / "run").glob("*.json"))
    assert "eval_results.json" in written and "predictions.json" in written
    for file in written:  # with SQuAD 2.0's null_odds.json and span_predictions.json
        trained, evaluated = (json.loads((root / d / file).read_text()) for d in ("run", "evaluated"))
        assert evaluated == trained, file
    # The evaluation's loss too, which a fresh head would not give even where it predicts the same labels.
    # The run ends with its best model (trainer.load_best_model_at_end): the evaluation of the step it kept.
    best = int((root / "run" / "checkpoints" / "best").resolve().name.removeprefix("step_"))
    trained = [r for r in read_metrics(root / "run") if "eval_loss" in r and r["step"] == best][0]
    evaluated = [r for r in read_metrics(root / "evaluated") if "eval_loss" in r][-1]
    assert evaluated.pop("step") == 0 and trained.pop("step") == best and evaluated == trained
    name = done.args[3].removeprefix("task=")
    assert f"task={name} starts from the task={name} head" in done.stdout + done.stderr
    assert "WARNING" not in done.stdout + done.stderr
    assert not (root / "evaluated" / "checkpoints").exists()


def with_finetune_section(step: Path, mode: FinetuneModeConfig) -> Path:
    """``step`` whose config.yaml records ``mode`` as plm-finetune's resolved config does (save_finetuned leaves the
    section out)."""
    from omegaconf import OmegaConf

    saved = OmegaConf.load(step / "config.yaml")
    saved.finetune = OmegaConf.structured(mode)
    (step / "config.yaml").write_text(OmegaConf.to_yaml(saved))
    return step


def test_plm_glue_and_the_entity_tagger_load_a_runs_task_module_through_the_same_path(tiny_checkpoint, tmp_path):
    """plm-glue's test predictions and ERNIE's entity tagger rebuild the run's task (finetune.mode=features here)
    and take its whole task module, or refuse it in one line: a fresh head would predict without a word."""
    from plm_toolkit.core.errors import CheckpointError
    from plm_toolkit.tasks.entity_tagger import EntityTagger
    from plm_toolkit.tasks.glue.predict import load_classifier

    step, trained, _ = fine_tuned_run(tmp_path / "rte", tiny_checkpoint, "sequence", finetune=FEATURES)
    classifier = load_classifier(with_finetune_section(step, FEATURES))
    assert same_state(classifier.task, trained)
    step, trained, _ = fine_tuned_run(tmp_path / "ner", tiny_checkpoint, "token", finetune=FEATURES)
    tagger = EntityTagger(with_finetune_section(step, FEATURES))
    assert same_state(tagger.task, trained)
    assert len(tagger([["the", "film", "is", "a", "mess"], ["it", "works"]])) == 2

    with_finetune_section(step, FinetuneModeConfig())  # config.yaml now says full mode: the head cannot serve it
    with pytest.raises(CheckpointError, match="task=ner cannot take this head .it reads a task encoder"):
        EntityTagger(step)
