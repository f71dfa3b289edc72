"""Typed schema of ``plm-glue`` (configs/glue.yaml): plm-finetune's model, finetune, data, optimizer, hardware and
trainer sections, shared by every sub-run, plus the GLUE folder and the suite's protocol (``glue.*``)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING

from plm_toolkit.core.choices import choices
from plm_toolkit.core.schema import (
    BackboneSourceConfig,
    FinetuneModeConfig,
    HardwareConfig,
    OptimizerConfig,
    TaskDataConfig,
    TrainerConfig,
)

KeepCheckpoints = choices("KeepCheckpoints", "best", "all", "none")


@dataclass
class GlueDataConfig(TaskDataConfig):
    # The GLUE folder in the layout of GLUE's download script: <glue_dir>/SST-2/{train,dev,test}.tsv, RTE/...,
    # MNLI/{train,dev_matched,dev_mismatched,test_matched,test_mismatched}.tsv, diagnostic/diagnostic.tsv (AX).
    # data.train_file and data.validation_file stay null: each sub-run gets its task's files from here.
    glue_dir: str = MISSING


@dataclass
class GlueSuiteConfig:
    # Tasks to run, by preset name (cola, sst2, mrpc, stsb, qqp, mnli, qnli, rte, wnli); empty: every GLUE task
    # whose train.tsv is in data.glue_dir.
    tasks: list[str] = field(default_factory=list)
    # Peak learning rates tried on every task; the best run on dev is reported (BERT, Devlin et al. 2019 section 4.1:
    # 5e-5, 4e-5, 3e-5 and 2e-5).
    learning_rates: list[float] = field(default_factory=lambda: [5e-5, 4e-5, 3e-5, 2e-5])
    # Seeds (trainer.seed) of the tasks not in glue.small_tasks: one sub-run per learning rate and seed.
    seeds: list[int] = field(default_factory=lambda: [1234])
    # Tasks fine-tuned with several random restarts, the best on dev kept (BERT section 4.1: fine-tuning "was
    # sometimes unstable on small datasets, so we ran several random restarts"): those under 10k training examples.
    small_tasks: list[str] = field(default_factory=lambda: ["cola", "mrpc", "stsb", "rte", "wnli"])
    # Seeds of the tasks in glue.small_tasks.
    small_tasks_seeds: list[int] = field(default_factory=lambda: [1234, 1235, 1236, 1237, 1238])
    # Per task, plm-finetune keys for its sub-runs, set over the shared ones: +glue.task_overrides.<task>.<key>=VALUE,
    # e.g. +glue.task_overrides.sst2.data.max_train_samples=8000 (the grid's keys stay the suite's).
    task_overrides: dict[str, Any] = field(default_factory=dict)
    # Sub-runs at a time, each in a process of its own on a GPU of its own: null takes one per visible GPU; 1 runs
    # them one after another in this process (as on a CPU or a single GPU).
    max_parallel: int | None = None
    # Predict every test file of data.glue_dir with each sub-run and write the selected ones as a submission folder
    # in the GLUE server's format (<run dir>/submission).
    predict_test: bool = True
    # Checkpoints kept once a task's sub-runs finish: best (the selected sub-run's), all, or none.
    keep_checkpoints: KeepCheckpoints = KeepCheckpoints.best


@dataclass
class GlueConfig:
    model: BackboneSourceConfig = field(default_factory=BackboneSourceConfig)
    finetune: FinetuneModeConfig = field(default_factory=FinetuneModeConfig)
    data: GlueDataConfig = field(default_factory=GlueDataConfig)
    optimizer: OptimizerConfig = MISSING
    hardware: HardwareConfig = MISSING
    trainer: TrainerConfig = field(default_factory=TrainerConfig)
    glue: GlueSuiteConfig = field(default_factory=GlueSuiteConfig)


def register_glue_schema() -> None:
    ConfigStore.instance().store(name="glue_schema", node=GlueConfig)
