"""The GLUE benchmark as a whole (Wang et al. 2019): where each task's files are in the layout of GLUE's download
script, the metrics GLUE scores it with, its test files and the names the GLUE server expects for their
predictions, and the checks and readers of those files.

GLUE's score of a task is the unweighted mean of its metrics (MRPC and QQP: F1 and accuracy; STS-B: Pearson and
Spearman; MNLI: matched and mismatched accuracy), and its ``average`` the mean of those scores over the tasks
(Wang et al. 2019, section 3.4 and table 6). The rows of each task's files are read by the task's preset
(``configs/task/<name>.yaml``) through ``tasks/classification.py``, the class each task of ``BENCHMARK`` is registered
with; the test files have no label and an ``index`` column (QQP's: ``id``), and CoLA's test file, unlike its training
and dev files, has a header.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from plm_toolkit.core import registry
from plm_toolkit.core.errors import ConfigError, DataError
from plm_toolkit.tasks.classification import (
    ClassificationConfig,
    Row,
    SequenceClassification,
    label_targets,
    read_columns,
    read_rows,
)


@dataclass(frozen=True)
class Score:
    # The summary's name of the figure (accuracy, f1, mismatched_accuracy).
    key: str
    # The metric (tasks/metrics.py) as the sub-run's evaluation names it.
    metric: str
    # Which dev file: "dev" (the sub-run's validation file) or the name of one of the task's ``extra_dev`` files.
    evaluation: str = "dev"


@dataclass(frozen=True)
class TestFile:
    # Relative to the task's folder.
    path: str
    # The name of its predictions in a submission (what the GLUE server reads).
    submission: str


@dataclass(frozen=True)
class GlueTask:
    # The task's preset (configs/task/<name>.yaml).
    name: str
    # Its folder in GLUE's download, also its name in tables (SST-2, STS-B).
    folder: str
    # The figures GLUE reports for it; its score is their mean.
    scores: tuple[Score, ...]
    dev: str = "dev.tsv"
    # Further dev files, evaluated with each sub-run's model: name -> file (MNLI's mismatched section).
    extra_dev: tuple[tuple[str, str], ...] = ()
    tests: tuple[TestFile, ...] = ()
    # The text column of the test file where it differs from the preset's (CoLA's train and dev have no header).
    test_text_column: str | None = None
    # The range a regression's test predictions are clipped to (STS-B's 0-5 scale, as jiant writes them).
    clip: tuple[float, float] | None = None

    def files(self, glue_dir: Path) -> dict[str, Path]:
        """The task's training and dev files: train, dev and each extra dev file by its name."""
        folder = glue_dir / self.folder
        return {"train": folder / "train.tsv", "dev": folder / self.dev} | {n: folder / f for n, f in self.extra_dev}

    def test_files(self, glue_dir: Path) -> list[tuple[Path, str]]:
        """(path, submission name) of the test files present."""
        found = [((glue_dir / self.folder / t.path), t.submission) for t in self.tests]
        return [(path.resolve(), name) for path, name in found if path.is_file()]


ACCURACY = (Score("accuracy", "accuracy"),)
F1_ACCURACY = (Score("f1", "f1"), Score("accuracy", "accuracy"))
CORRELATIONS = (Score("pearson", "pearson"), Score("spearman", "spearman"))
MNLI = (Score("matched_accuracy", "accuracy"), Score("mismatched_accuracy", "accuracy", "mismatched"))


def test_tsv(submission: str) -> tuple[TestFile, ...]:
    return (TestFile("test.tsv", submission),)


# In the GLUE paper's order (its table 1), which is also the order of papers' GLUE tables.
BENCHMARK = (
    GlueTask("cola", "CoLA", (Score("matthews", "matthews"),), tests=test_tsv("CoLA.tsv"), test_text_column="sentence"),
    GlueTask("sst2", "SST-2", ACCURACY, tests=test_tsv("SST-2.tsv")),
    GlueTask("mrpc", "MRPC", F1_ACCURACY, tests=test_tsv("MRPC.tsv")),
    GlueTask("stsb", "STS-B", CORRELATIONS, tests=test_tsv("STS-B.tsv"), clip=(0.0, 5.0)),
    GlueTask("qqp", "QQP", F1_ACCURACY, tests=test_tsv("QQP.tsv")),
    # The diagnostic set (AX) is predicted with the MNLI model; the server scores it apart from the average.
    GlueTask("mnli", "MNLI", MNLI, dev="dev_matched.tsv", extra_dev=(("mismatched", "dev_mismatched.tsv"),),
             tests=(TestFile("test_matched.tsv", "MNLI-m.tsv"), TestFile("test_mismatched.tsv", "MNLI-mm.tsv"),
                    TestFile("../diagnostic/diagnostic.tsv", "AX.tsv"))),
    GlueTask("qnli", "QNLI", ACCURACY, tests=test_tsv("QNLI.tsv")),
    GlueTask("rte", "RTE", ACCURACY, tests=test_tsv("RTE.tsv")),
    GlueTask("wnli", "WNLI", ACCURACY, tests=test_tsv("WNLI.tsv")),
)  # fmt: skip
TASKS = {task.name: task for task in BENCHMARK}
for _task in BENCHMARK:
    registry.TASKS.register(_task.name, ClassificationConfig, cls=SequenceClassification)(SequenceClassification)
# Every file name a complete submission holds.
SUBMISSION_FILES = tuple(t.submission for task in BENCHMARK for t in task.tests)


def find_tasks(glue_dir: Path, wanted: list[str]) -> list[GlueTask]:
    """The tasks to run, in GLUE's order: ``wanted`` (glue.tasks), or every task whose train.tsv is in
    ``glue_dir``. A wanted task without its files, or a folder with none, is a DataError that names what is missing
    or every path looked for."""
    unknown = [name for name in wanted if name not in TASKS]
    if unknown:
        raise ConfigError(f"glue.tasks: unknown {', '.join(unknown)}; the GLUE tasks are {', '.join(TASKS)}")
    if not glue_dir.is_dir():
        raise DataError(f"data.glue_dir={glue_dir}: no such folder")
    chosen = (
        [t for t in BENCHMARK if t.name in wanted]
        if wanted
        else [t for t in BENCHMARK if t.files(glue_dir)["train"].is_file()]
    )
    if not chosen:
        looked = ", ".join(f"{t.folder}/train.tsv" for t in BENCHMARK)
        raise DataError(f"data.glue_dir={glue_dir}: no GLUE task found; looked for {looked} (GLUE's download layout)")
    for task in chosen:
        missing = [str(path) for path in task.files(glue_dir).values() if not path.is_file()]
        if missing:
            raise DataError(f"data.glue_dir={glue_dir}: task {task.folder} lacks {', '.join(missing)}")
    return chosen


def check_files(task: GlueTask, config: ClassificationConfig, glue_dir: Path, with_tests: bool) -> dict[str, int]:
    """Read every file of ``task`` with its preset ``config`` before any training: a missing column, a stray tab or a
    label outside the preset's is a DataError naming file:line. Returns the rows of each file (train, dev, ...)."""
    counts = {}
    for name, path in task.files(glue_dir).items():
        rows = read_rows(path, config)
        if config.regression or config.labels:
            label_targets(rows, list(config.labels), config.regression, path)
        counts[name] = len(rows)
    if with_tests:
        for path, submission in task.test_files(glue_dir):
            counts[submission] = len(read_test_rows(path, task, config))
    return counts


def read_test_rows(path: Path, task: GlueTask, config: ClassificationConfig) -> list[tuple[str, Row]]:
    """(index, row) of every row of an unlabeled test file (GLUE's test.tsv: an ``index`` or ``id`` column, the
    texts, no label); the rows' ``label`` is empty. No row is skipped: a submission needs a prediction for each."""
    specs = {"index": "index|id", "text_column": task.test_text_column or config.text_column}
    if config.text_pair_column:
        specs["text_pair_column"] = config.text_pair_column
    return [
        (values["index"], Row(number, values["text_column"], values.get("text_pair_column"), ""))
        for number, values in read_columns(path, specs, header=True)
    ]
