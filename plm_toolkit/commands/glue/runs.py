"""plm-glue's sub-runs: one plm-finetune run (``finetune.run``) per task, learning rate and seed, each in a folder of
its own under the suite's run directory (``<task>/lr<rate>-seed<seed>``) that holds everything it needs and makes:

- ``subrun.yaml``: its plm-finetune config (``finetune``: the task's preset, the suite's shared keys, the task's
  overrides, its learning rate and seed) and what the suite adds (``suite``: the GLUE folder, test predictions);
- plm-finetune's run: checkpoints, ``eval_results.json`` (the dev figures), finetune.log;
- the extras, from the final checkpoint: ``eval_results_<name>.json`` for a task's further dev files (MNLI's
  mismatched section) and ``test_predictions/<Task>.tsv`` in the GLUE server's format;
- ``glue_subrun.json``, written last: its GLUE figures and score (the mark that it is finished).

A sub-run with glue_subrun.json is skipped when plm-glue runs again in the same run directory; one with
eval_results.json only gets its extras; any other resumes from its newest checkpoint (``trainer.resume=auto``).

    python -m plm_toolkit.commands.glue.runs RUN_DIR/rte/lr2e-05-seed1234   # one sub-run (plm-glue's workers)
"""

from __future__ import annotations

import copy
import gc
import json
import logging
import shutil
import sys
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from hydra import compose, initialize_config_module
from hydra.core.global_hydra import GlobalHydra
from omegaconf import DictConfig, OmegaConf
from omegaconf.errors import OmegaConfBaseException

from plm_toolkit.commands import failures, finetune
from plm_toolkit.commands.run_harness import EVAL_RESULTS, write_json
from plm_toolkit.core import checkpoint as ckpt
from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.errors import CheckpointError, ConfigError
from plm_toolkit.tasks.base import limit
from plm_toolkit.tasks.classification import label_targets, read_rows
from plm_toolkit.tasks.glue.predict import load_classifier, predict
from plm_toolkit.tasks.glue.suite import TASKS, GlueTask, read_test_rows
from plm_toolkit.tasks.metrics import METRICS
from plm_toolkit.training.precision import resolve_runtime
from plm_toolkit.training.preemption import EXIT_REQUEUE, Preempted

log = logging.getLogger("plm_toolkit")

SUBRUN_CONFIG = "subrun.yaml"
RECORD = "glue_subrun.json"
PREDICTIONS = "test_predictions"
LOG_FILE = "finetune.log"
# Keys that may differ when a sub-run is continued: they change how it runs or reports, not what it computes.
COSMETIC = ("trainer.progress_bar", "trainer.tensorboard", "trainer.loggers", "trainer.log_every", "data.num_workers",
            "hardware")  # fmt: skip


@dataclass(frozen=True)
class SubRun:
    task: str
    learning_rate: float
    seed: int

    @property
    def name(self) -> str:
        return f"{self.task}/lr{self.learning_rate:g}-seed{self.seed}"


def plan(cfg: DictConfig, tasks: list[GlueTask]) -> list[SubRun]:
    """Every sub-run of the suite, task by task in GLUE's order: each learning rate with each of the task's seeds
    (glue.small_tasks_seeds for a small task, glue.seeds for the others)."""
    out = []
    for task in tasks:
        seeds = cfg.glue.small_tasks_seeds if task.name in cfg.glue.small_tasks else cfg.glue.seeds
        out += [SubRun(task.name, float(lr), int(seed)) for lr in cfg.glue.learning_rates for seed in seeds]
    return out


def compose_finetune(task: str) -> DictConfig:
    """plm-finetune's config of ``task=<task>``, inside plm-glue's Hydra app or outside any (a worker, a test);
    composed once per process and task (a quarter of a second each), then copied."""
    if task not in _COMPOSED:
        if GlobalHydra.instance().is_initialized():
            _COMPOSED[task] = compose("finetune", overrides=[f"task={task}"])
        else:
            with initialize_config_module(config_module="plm_toolkit.configs", version_base="1.3"):
                _COMPOSED[task] = compose("finetune", overrides=[f"task={task}"])
    return copy.deepcopy(_COMPOSED[task])


_COMPOSED: dict[str, DictConfig] = {}


def subrun_config(cfg: DictConfig, run: SubRun, glue_dir: Path) -> DictConfig:
    """The sub-run's ``subrun.yaml``: its plm-finetune config and the suite's part."""
    files = TASKS[run.task].files(glue_dir)
    shared = {key: cfg[key] for key in ("finetune", "optimizer", "hardware", "trainer")}
    data = {key: cfg.data[key] for key in ("max_seq_len", "max_train_samples", "max_eval_samples", "num_workers")}
    data |= {"train_file": str(files["train"]), "validation_file": str(files["dev"])}
    model = {"checkpoint": str(Path(cfg.model.checkpoint).expanduser().resolve()), "dropout": cfg.model.dropout}
    merged = OmegaConf.merge(compose_finetune(run.task), shared, {"model": model, "data": data})
    overrides = cfg.glue.task_overrides.get(run.task)
    if overrides is not None:
        try:
            merged = OmegaConf.merge(merged, overrides)
        except OmegaConfBaseException as err:
            raise ConfigError(f"glue.task_overrides.{run.task}: {err.msg.splitlines()[0]}") from None
    merged.optimizer.lr = run.learning_rate
    merged.trainer.seed = run.seed
    suite = {"task": run.task, "learning_rate": run.learning_rate, "seed": run.seed, "glue_dir": str(glue_dir),
             "predict_test": bool(cfg.glue.predict_test)}  # fmt: skip
    return OmegaConf.create({"finetune": OmegaConf.to_container(merged, resolve=True), "suite": suite})


def prepare(folder: Path, config: DictConfig) -> None:
    """Write ``subrun.yaml`` into a new sub-run folder, or check that a started one was started with the same
    settings (``COSMETIC`` keys aside): continuing it with others would mix two experiments in one result."""
    path = folder / SUBRUN_CONFIG
    if path.is_file():
        before = _flat(OmegaConf.to_container(OmegaConf.load(path)))
        after = _flat(OmegaConf.to_container(config))
        changed = [k for k in sorted(before.keys() | after.keys()) if before.get(k) != after.get(k)]
        changed = [k for k in changed if not k.startswith(COSMETIC)]
        if changed:
            shown = ", ".join(f"{k}: {before.get(k)} -> {after.get(k)}" for k in changed[:3])
            raise ConfigError(
                f"{path}: this sub-run was started with other settings ({shown}); run plm-glue with the same "
                "settings to continue it, or give a new hydra.run.dir"
            )
        return
    folder.mkdir(parents=True, exist_ok=True)
    write_text(path, OmegaConf.to_yaml(config))


def _flat(tree, prefix: str = "") -> dict:
    """A nested mapping as {dotted key: value}, the finetune section's keys without their prefix."""
    if isinstance(tree, dict) and tree:
        return {k: v for key, value in tree.items() for k, v in _flat(value, f"{prefix}{key}.").items()}
    return {prefix.removesuffix(".").removeprefix("finetune."): tree}


def typed(config: DictConfig) -> DictConfig:
    """The typed plm-finetune config of a sub-run's ``subrun.yaml`` content (its task's preset under it)."""
    return OmegaConf.merge(compose_finetune(config.finetune.task.name), config.finetune)


def load(folder: Path) -> tuple[DictConfig, DictConfig]:
    """(the typed plm-finetune config, the suite's part) of a prepared sub-run."""
    saved = OmegaConf.load(folder / SUBRUN_CONFIG)
    return typed(saved), saved.suite


def record(folder: Path) -> dict | None:
    """The finished sub-run's figures (glue_subrun.json), or None while it is not finished."""
    path = folder / RECORD
    return json.loads(path.read_text()) if path.is_file() else None


@contextmanager
def logged_to(path: Path):
    """Log records go to ``path`` too while inside (each sub-run's finetune.log, in plm-glue's own process)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("[%(asctime)s][%(name)s][%(levelname)s] - %(message)s"))
    logging.getLogger().addHandler(handler)
    try:
        yield
    finally:
        logging.getLogger().removeHandler(handler)
        handler.close()


def run_subrun(folder: Path) -> dict:
    """Train (or resume) the sub-run in ``folder``, then its extras; returns its record."""
    done = record(folder)
    if done is not None:
        return done
    cfg, suite = load(folder)
    with logged_to(folder / LOG_FILE):
        if not (folder / EVAL_RESULTS).is_file():
            log.info("sub-run %s: training", folder)
            finetune.run(cfg, folder)
        result = finish(folder, cfg, suite)
    gc.collect()
    if torch.cuda.is_available():
        torch.cuda.empty_cache()
    return result


def finish(folder: Path, cfg: DictConfig, suite: DictConfig) -> dict:
    """The extras of a trained sub-run (further dev files, test predictions) from its final checkpoint, then its
    record: the task's GLUE figures and their mean, the score it is selected by."""
    task = TASKS[suite.task]
    tests = task.test_files(Path(suite.glue_dir)) if suite.predict_test else []
    extra = [(name, file) for name, file in task.files(Path(suite.glue_dir)).items() if name not in ("train", "dev")]
    wanted = [name for name, _ in extra if not (folder / f"eval_results_{name}.json").is_file()]
    wanted += [name for _, name in tests if not (folder / PREDICTIONS / name).is_file()]
    if wanted:
        # The run's model: its best evaluation's (trainer.load_best_model_at_end), else its last step's.
        found = ckpt.plm_checkpoint_dir(folder)
        if found is None:
            raise CheckpointError(f"{folder}: no checkpoint to predict {', '.join(wanted)} with")
        classifier = load_classifier(found)
        runtime = resolve_runtime(cfg.hardware)
        config = classifier.task.config
        batch = 2 * cfg.trainer.batch_size
        for name, path in [(name, path) for name, path in extra if name in wanted]:
            rows = limit(read_rows(path, config), cfg.data.max_eval_samples, f"{path.name} rows")
            predicted = predict(classifier, rows, cfg.data.max_seq_len, batch, runtime)
            gold = label_targets(rows, list(config.labels), config.regression, path)
            if not config.regression:
                predicted = [config.labels.index(p) for p in predicted]
            metrics = {m: METRICS[m](predicted, gold) for m in config.metrics}
            write_json(folder / f"eval_results_{name}.json", metrics)
            log.info("%s (%d rows): %s", path, len(rows), json.dumps(metrics))
        (folder / PREDICTIONS).mkdir(exist_ok=True)
        for path, name in [(path, name) for path, name in tests if name in wanted]:
            rows = read_test_rows(path, task, config)
            predicted = predict(classifier, [row for _, row in rows], cfg.data.max_seq_len, batch, runtime)
            if task.clip is not None:
                predicted = [min(max(value, task.clip[0]), task.clip[1]) for value in predicted]
            write_text(folder / PREDICTIONS / name, submission_tsv([index for index, _ in rows], predicted))
            log.info("test predictions of %s (%d rows): %s", path, len(rows), folder / PREDICTIONS / name)
    figures = {}
    for score in task.scores:
        results = EVAL_RESULTS if score.evaluation == "dev" else f"eval_results_{score.evaluation}.json"
        figures[score.key] = float(json.loads((folder / results).read_text())[score.metric])
    out = {
        "task": suite.task, "learning_rate": suite.learning_rate, "seed": suite.seed, "metrics": figures,
        "score": float(np.mean(list(figures.values()))), "test_predictions": sorted(name for _, name in tests),
    }  # fmt: skip
    write_json(folder / RECORD, out)
    return out


def submission_tsv(indices: list[str], predictions: list) -> str:
    """Predictions as the GLUE server reads them (jiant's GLUE formatter writes the same): a header ``index
    prediction``, then one tab-separated row per test row; labels as the task's files name them (0/1, entailment,
    ...), STS-B's scores with three decimals."""
    lines = ["index\tprediction"]
    lines += [
        f"{i}\t{p:.3f}" if isinstance(p, float) else f"{i}\t{p}" for i, p in zip(indices, predictions, strict=True)
    ]
    return "\n".join(lines) + "\n"


def prune(folders: list[Path], keep: str) -> None:
    """Remove the checkpoints of a task's finished sub-runs that ``keep`` (glue.keep_checkpoints) does not keep:
    all but the best's (best), every one (none), or none of them (all)."""
    finished = [(folder, record(folder)) for folder in folders]
    finished = [(folder, done) for folder, done in finished if done is not None]
    if keep == "all" or not finished:
        return
    best = select([done for _, done in finished]) if keep == "best" else None
    for folder, done in finished:
        if done is not best and (folder / "checkpoints").is_dir():
            shutil.rmtree(folder / "checkpoints")


def select(records: list[dict]) -> dict:
    """The best sub-run on dev (the highest score; the first in plan order among equals)."""
    return max(records, key=lambda r: r["score"])


def main() -> None:
    """Run the one sub-run named on the command line (a worker of plm-glue's GPU scheduler): its log records go to
    its finetune.log, an expected failure is one ``error:`` line on stderr, a preempted run exits with
    EXIT_REQUEUE (its checkpoint saved, so that the next plm-glue resumes it)."""
    from plm_toolkit.config import setup

    setup()
    logging.getLogger().setLevel(logging.INFO)
    try:
        failures.guard(lambda: run_subrun(Path(sys.argv[1])))
    except Preempted as stopped:
        print(f"{stopped}; exiting with status {EXIT_REQUEUE}", file=sys.stderr)
        sys.exit(EXIT_REQUEUE)


if __name__ == "__main__":
    main()
