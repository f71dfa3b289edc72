"""A Hydra sweep's summary (``plm-finetune -m optimizer.lr=1e-4,3e-4``, ``plm-train -m ...``): which job folder had
which overrides, its figures, best first, written to ``<sweep dir>/sweep_summary.md`` and ``sweep_summary.json`` when
the sweep ends (a Hydra callback, configured in configs/train.yaml and configs/finetune.yaml), as plm-glue does for
its grid.

A job's figures are its eval_results.json (plm-finetune: the best model's, when it keeps one) or its last
evaluation in metrics.jsonl, and its last training loss. Jobs are ranked by trainer.metric_for_best_model, else the
task's first metric (SQuAD, NER: f1), else the evaluation loss; a job that failed or has no figure is listed last.
"""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path
from typing import Any

from hydra.experimental.callback import Callback
from omegaconf import DictConfig, OmegaConf

from plm_toolkit.config.resolve import task_class
from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.catalog import load_all
from plm_toolkit.core.registry import TASKS

log = logging.getLogger("plm_toolkit")

SUMMARY_JSON = "sweep_summary.json"
SUMMARY_MD = "sweep_summary.md"
# Metric names (their endings) where lower is better, as training/selection.py ranks them (not imported: plm-prepare's
# sweeps load this callback without the training package).
LOWER_IS_BETTER = ("loss", "perplexity")


def job_figures(folder: Path) -> dict[str, float]:
    """The job's evaluation figures (eval_ prefixed) and its last training loss."""
    figures: dict[str, float] = {}
    records = []
    if (folder / "metrics.jsonl").is_file():
        for line in (folder / "metrics.jsonl").read_text(encoding="utf-8", errors="replace").splitlines():
            try:
                records.append(json.loads(line))
            except ValueError:
                continue
    training = [r for r in records if isinstance(r, dict) and "lr" in r]
    if training:
        figures["loss"] = float(training[-1]["loss"])
    if (folder / "eval_results.json").is_file():  # the run's model's (its best evaluation's), not the last step's
        results = json.loads((folder / "eval_results.json").read_text())
        return figures | {f"eval_{k}": float(v) for k, v in results.items() if _number(v)}
    evaluations = [r for r in records if isinstance(r, dict) and any(str(k).startswith("eval_") for k in r)]
    if evaluations:
        figures |= {k: float(v) for k, v in evaluations[-1].items() if k.startswith("eval_") and _number(v)}
    return figures


def _number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def ranking_metric(config: dict) -> tuple[str, bool]:
    """(the eval_ key jobs are ranked by, whether higher is better) from a job's config."""
    trainer, task = config.get("trainer", {}), config.get("task") or {}
    name = trainer.get("metric_for_best_model") or ""
    if not name and task:
        metrics = task.get("metrics") or []
        name = metrics[0] if metrics else main_metric(str(task.get("name", ""))) or "loss"
    key = name if name.startswith("eval_") else f"eval_{name or 'loss'}"
    greater = trainer.get("greater_is_better")
    return key, (not key.endswith(LOWER_IS_BETTER)) if greater is None else bool(greater)


def main_metric(task: str) -> str | None:
    """The main metric of the task registered as ``task`` (its class's ``main_metric``), None where it has none."""
    load_all()
    return getattr(task_class(task), "main_metric", None) if task in TASKS else None


def summarize(sweep_dir: Path) -> dict:
    jobs = []
    for folder in sorted((p for p in sweep_dir.iterdir() if (p / ".hydra").is_dir()), key=_job_order):
        overrides = (
            OmegaConf.load(folder / ".hydra" / "overrides.yaml")
            if (folder / ".hydra" / "overrides.yaml").is_file()
            else []
        )
        config_file = folder / ".hydra" / "config.yaml"
        config = OmegaConf.to_container(OmegaConf.load(config_file)) if config_file.is_file() else {}
        jobs.append({"folder": folder.name, "overrides": list(overrides), "figures": job_figures(folder),
                     "metric": ranking_metric(config)})  # fmt: skip
    key, greater = jobs[0]["metric"] if jobs else ("eval_loss", False)

    def rank(job: dict) -> tuple:
        value = job["figures"].get(key)
        if value is None:  # failed, or never evaluated: last
            return (1, 0.0)
        return (0, -value if greater else value)

    jobs.sort(key=rank)
    for job in jobs:
        del job["metric"]
    return {"sweep_dir": str(sweep_dir), "ranked_by": key, "higher_is_better": greater, "jobs": jobs}


def _job_order(folder: Path) -> tuple:
    return (0, int(folder.name), "") if folder.name.isdigit() else (1, 0, folder.name)


def markdown(summary: dict) -> str:
    jobs, key = summary["jobs"], summary["ranked_by"]
    varied = _varied_overrides(jobs)
    columns = [key] + sorted({k for job in jobs for k in job["figures"]} - {key})
    better = "higher" if summary["higher_is_better"] else "lower"
    lines = [
        f"# Sweep {summary['sweep_dir']}",
        "",
        f"{len(jobs)} jobs, best first by {key} ({better} is better); the overrides every job shares are left out.",
        "",
        "| folder | overrides | " + " | ".join(columns) + " |",
        "| --- | --- | " + " | ".join("---" for _ in columns) + " |",
    ]
    for job in jobs:
        shown = " ".join(o for o in job["overrides"] if o in varied) or " ".join(job["overrides"])
        values = [f"{job['figures'][c]:.4g}" if c in job["figures"] else "-" for c in columns]
        lines.append(f"| {job['folder']} | {shown} | " + " | ".join(values) + " |")
    return "\n".join(lines) + "\n"


def _varied_overrides(jobs: list[dict]) -> set[str]:
    """The overrides that not every job has (what the sweep varied)."""
    if not jobs:
        return set()
    shared = set(jobs[0]["overrides"]).intersection(*(set(job["overrides"]) for job in jobs[1:]))
    return {o for job in jobs for o in job["overrides"]} - shared


class SweepSummary(Callback):
    """Hydra callback: the sweep's summary when a multirun ends."""

    def on_multirun_end(self, config: DictConfig, **kwargs: Any) -> None:
        sweep_dir = Path(config.hydra.sweep.dir)
        if not sweep_dir.is_dir():
            return
        summary = summarize(sweep_dir)
        if not summary["jobs"]:
            return
        for name, text in ((SUMMARY_JSON, json.dumps(summary, indent=2) + "\n"), (SUMMARY_MD, markdown(summary))):
            write_text(sweep_dir / name, text)
        best = summary["jobs"][0]
        value = best["figures"].get(summary["ranked_by"])
        shown = "no figure" if value is None else f"{summary['ranked_by']}={value:.4g}"
        log.info(
            "sweep summary: %s; best: %s (%s, %s)",
            sweep_dir / SUMMARY_MD,
            best["folder"],
            " ".join(best["overrides"]),
            shown,
        )
