"""plm-glue: fine-tune one backbone on every GLUE task in a folder, with BERT's protocol, and report it as papers do.

plm-glue model.checkpoint=runs/demo/checkpoints/last data.glue_dir=glue_data
plm-glue model.checkpoint=/models/minilm data.glue_dir=glue_data glue.tasks=[sst2,rte] glue.learning_rates=[3e-5]
plm-glue model.checkpoint=PATH data.glue_dir=glue_data hydra.run.dir=runs/glue/2025-01-01/10-00-00   # continue

Compose -> validate -> find the tasks in data.glue_dir and read all their files -> plan the sub-runs (each task x
glue.learning_rates x its seeds, every one a plm-finetune run in a folder of its own: glue_runs.py) -> run them, one
after another in this process, or one per GPU in worker processes when several GPUs are visible (glue_schedule.py) ->
write glue_results.json, glue_results.md and the test-set submission folder (glue_summary.py). Running it again in
the same run directory skips the finished sub-runs and resumes the others.
"""

from __future__ import annotations

import json
import logging
import math
import signal
from pathlib import Path

import hydra
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.commands import run_harness
from plm_toolkit.commands.fitting import in_run_directory
from plm_toolkit.commands.glue.runs import (
    SubRun,
    load,
    plan,
    prepare,
    prune,
    record,
    run_subrun,
    select,
    subrun_config,
    typed,
)
from plm_toolkit.commands.glue.schedule import Job, failure_line, launch_worker, schedule, visible_gpus
from plm_toolkit.commands.glue.summary import RESULTS_MD, summarize, write_submission, write_summary
from plm_toolkit.commands.run_harness import run_command
from plm_toolkit.config.checks import training_problems
from plm_toolkit.config.resolve import model_class
from plm_toolkit.config.validate import validate
from plm_toolkit.core.checkpoint import plm_checkpoint_dir
from plm_toolkit.core.errors import ConfigError, TrainingError
from plm_toolkit.interop.checkpoint_reader import model_config_of
from plm_toolkit.models.base import ENCODER_DECODER
from plm_toolkit.tasks.glue.suite import TASKS, GlueTask, check_files, find_tasks
from plm_toolkit.training.preemption import EXIT_REQUEUE, Preempted

log = logging.getLogger("plm_toolkit")

# The keys of a sub-run the suite sets itself, which glue.task_overrides may not.
GRID_KEYS = ("optimizer.lr", "trainer.seed", "data.train_file", "data.validation_file", "task.name")


def glue_problems(cfg: DictConfig) -> list[str]:
    """Every impossible setting of plm-glue's own keys, one message each (each sub-run's plm-finetune config is
    validated as plm-finetune validates it, once planned)."""
    out = []
    if OmegaConf.is_missing(cfg.model, "checkpoint"):
        out.append("model.checkpoint is not set: give a plm-train checkpoint or a local Hugging Face folder")
    elif not Path(cfg.model.checkpoint).expanduser().exists():
        out.append(f"model.checkpoint={cfg.model.checkpoint}: no such file or directory")
    if OmegaConf.is_missing(cfg.data, "glue_dir"):
        out.append("data.glue_dir is not set: give the GLUE folder (SST-2/train.tsv, RTE/train.tsv, ...)")
    for key in ("train_file", "validation_file"):
        if cfg.data[key]:
            out.append(
                f"data.{key}={cfg.data[key]}: plm-glue reads each task's files from data.glue_dir; leave it null"
            )
    g = cfg.glue
    rates = list(g.learning_rates)
    if not rates or not all(math.isfinite(lr) and lr > 0 for lr in rates) or len(set(rates)) < len(rates):
        out.append(f"glue.learning_rates={rates}: expected one or more distinct finite rates above 0")
    for key in ("seeds", "small_tasks_seeds"):
        if not g[key] or min(g[key]) < 0 or len(set(g[key])) < len(g[key]):
            out.append(f"glue.{key}={list(g[key])}: expected one or more distinct seeds, 0 or positive")
    for key, names in (("small_tasks", list(g.small_tasks)), ("task_overrides", list(g.task_overrides))):
        unknown = [name for name in names if name not in TASKS]
        if unknown:
            out.append(f"glue.{key}: unknown task(s) {', '.join(unknown)}; the GLUE tasks are {', '.join(TASKS)}")
    for name, keys in g.task_overrides.items():
        if not isinstance(keys, DictConfig):
            out.append(
                f"glue.task_overrides.{name}={keys}: expected plm-finetune keys (glue.task_overrides.{name}.KEY)"
            )
            continue
        grid = [key for key in GRID_KEYS if OmegaConf.select(keys, key) is not None]
        if grid:
            out.append(f"glue.task_overrides.{name}.{grid[0]}: set by the suite (glue.learning_rates, glue.seeds, "
                       "data.glue_dir), not per task")  # fmt: skip
    if g.max_parallel is not None and g.max_parallel < 1:
        out.append(f"glue.max_parallel={g.max_parallel}: must be at least 1 (or null: one sub-run per visible GPU)")
    if str(cfg.trainer.resume) not in ("auto", "none"):
        out.append(f"trainer.resume={cfg.trainer.resume}: each sub-run resumes from its own folder; leave it auto")
    # Every sub-run trains (its test predictions come from its final checkpoint): no evaluation-only length.
    return out + training_problems(cfg.trainer, cfg.optimizer, d_model_from_backbone=True)


def encoder_decoder(checkpoint: Path) -> bool:
    """Whether the backbone is an encoder-decoder (T5), read from its config alone."""
    step = plm_checkpoint_dir(checkpoint)
    if step is not None:
        return ENCODER_DECODER in model_class(model_config_of(step).name).capabilities
    config = checkpoint / "config.json"
    return config.is_file() and bool(json.loads(config.read_text()).get("is_encoder_decoder"))


def prepared_runs(cfg: DictConfig, run_dir: Path, tasks: list[GlueTask], glue_dir: Path) -> dict[SubRun, Path]:
    """Every sub-run's folder with its subrun.yaml. Before any folder is written, each sub-run's config is validated
    as plm-finetune validates its own and every task file is read with its task's preset."""
    configs = {run: subrun_config(cfg, run, glue_dir) for run in plan(cfg, tasks)}
    checked = set()
    for run, config in configs.items():
        finetune_cfg = typed(config)
        validate(finetune_cfg)
        if run.task not in checked:
            preset = OmegaConf.to_object(finetune_cfg.task)
            counts = check_files(TASKS[run.task], preset, glue_dir, cfg.glue.predict_test)
            log.info("%s: %s", TASKS[run.task].folder, ", ".join(f"{n} {c} rows" for n, c in counts.items()))
            checked.add(run.task)
    for run, config in configs.items():
        prepare(run_dir / run.name, config)
    return {run: run_dir / run.name for run in configs}


def run(cfg: DictConfig, run_dir: Path) -> dict:
    problems = glue_problems(cfg)
    if problems:
        raise ConfigError("invalid configuration: " + "; ".join(problems))
    glue_dir = Path(cfg.data.glue_dir).expanduser().resolve()
    tasks = find_tasks(glue_dir, list(cfg.glue.tasks))
    needs_head = cfg.glue.predict_test or any(task.extra_dev for task in tasks)
    if needs_head and encoder_decoder(Path(cfg.model.checkpoint).expanduser()):
        raise ConfigError(
            f"model.checkpoint={cfg.model.checkpoint} is an encoder-decoder (text-to-text): plm-glue predicts test "
            "files and MNLI's mismatched dev with a classifier head; set glue.predict_test=false and leave out mnli"
        )
    folders = prepared_runs(cfg, run_dir, tasks, glue_dir)
    pending = [run for run in folders if record(folders[run]) is None]
    log.info(
        "plm-glue: %d task(s), %d sub-run(s), %d finished before", len(tasks), len(folders), len(folders) - len(pending)
    )

    def done(run: SubRun) -> None:
        prune([folders[r] for r in folders if r.task == run.task], cfg.glue.keep_checkpoints.value)
        finished = record(folders[run])
        if finished is not None:
            log.info("sub-run %s: %s", run.name, json.dumps(finished["metrics"]))

    gpus = visible_gpus(cfg.hardware.device.value, cfg.glue.max_parallel)
    if len(gpus) > 1 and len(pending) > 1:
        run_parallel(pending, folders, gpus, done)
    else:
        for run in pending:
            run_subrun(folders[run])
            done(run)

    records = {run: record(folders[run]) for run in folders}
    settings = {
        "checkpoint": str(Path(cfg.model.checkpoint).expanduser().resolve()),
        "glue_dir": str(glue_dir),
        "learning_rates": list(cfg.glue.learning_rates),
        "seeds": list(cfg.glue.seeds),
        "small_tasks": list(cfg.glue.small_tasks),
        "small_tasks_seeds": list(cfg.glue.small_tasks_seeds),
        "epochs": cfg.trainer.epochs,
        "max_steps": cfg.trainer.max_steps,
        "batch_size": cfg.trainer.batch_size,
        "max_seq_len": cfg.data.max_seq_len,
        "task_overrides": OmegaConf.to_container(cfg.glue.task_overrides),
    }
    summary = summarize(list(folders), records, {r: folders[r].relative_to(run_dir) for r in folders}, settings)
    write_summary(run_dir, summary)
    log.info("GLUE average %.4f over %s: %s", summary["average"], ", ".join(summary["tasks"]), run_dir / RESULTS_MD)
    chosen = [folders[r] for r in folders if records[r] is select([records[o] for o in folders if o.task == r.task])]
    written = write_submission(run_dir, chosen) if cfg.glue.predict_test else None
    if written is not None:
        folder, missing = written
        log.info("submission: %s (and %s.zip)", folder, folder)
        if missing:
            log.warning("the GLUE server expects every task's file; this submission lacks %s", ", ".join(missing))
    return {"average": summary["average"]}


def run_parallel(pending: list[SubRun], folders: dict[SubRun, Path], gpus: list[str], done) -> None:
    """The pending sub-runs on ``gpus``, one per GPU at a time; the longest (most training rows x epochs) first."""
    jobs = {run.name: run for run in pending}
    work = [Job(run.name, folders[run], _work(folders[run])) for run in pending]
    failed = schedule(work, gpus, launch_worker, lambda job, status: done(jobs[job.name]) if status == 0 else None)
    if failed:
        job, status = failed[0]
        if status == EXIT_REQUEUE:
            raise Preempted(signal.SIGTERM, f"sub-run {job.name}'s checkpoint")
        raise TrainingError(f"sub-run {job.name} failed (exit status {status}): {failure_line(job)}")


def _work(folder: Path) -> float:
    """A sub-run's expected length: its training file's bytes (a proxy for its rows) x its epochs or steps."""
    cfg, _ = load(folder)
    return float(Path(cfg.data.train_file).stat().st_size) * float(cfg.trainer.epochs or cfg.trainer.max_steps or 1)


@hydra.main(version_base="1.3", config_path="pkg://plm_toolkit.configs", config_name="glue")
def hydra_main(cfg: DictConfig) -> float | None:
    return run_command(in_run_directory(run), cfg)


def main() -> None:
    run_harness.main(hydra_main)


if __name__ == "__main__":
    main()
