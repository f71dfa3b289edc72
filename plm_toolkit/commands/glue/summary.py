"""plm-glue's summary and submission folder, from the finished sub-runs' records (glue_runs.py).

Per task, as BERT reports GLUE (Devlin et al. 2019, section 4.1): the sub-run best on dev over the learning rates and
seeds, its figures under the task's name; beside it the spread of the seeds at that learning rate (mean, sample
standard deviation, min, max). ``average`` is GLUE's: the mean over the tasks of each task's score, the mean of its
figures (Wang et al. 2019, section 3.4); ``average_of_seed_means`` the same from the seeds' means. glue_results.json
keeps the figures as fractions (as eval_results.json does); glue_results.md shows them x 100, as papers do.
"""

from __future__ import annotations

import shutil
import statistics
import zipfile
from pathlib import Path

from plm_toolkit.commands.glue.runs import PREDICTIONS, SubRun, select
from plm_toolkit.commands.run_harness import write_json
from plm_toolkit.core.atomic import atomic_file, atomic_folder, write_text
from plm_toolkit.tasks.glue.suite import SUBMISSION_FILES, TASKS

RESULTS_JSON = "glue_results.json"
RESULTS_MD = "glue_results.md"
SUBMISSION = "submission"


def spread(values: list[float]) -> dict:
    """mean, std (the sample standard deviation; null for one value), min and max."""
    std = statistics.stdev(values) if len(values) > 1 else None
    return {"mean": statistics.fmean(values), "std": std, "min": min(values), "max": max(values)}


def summarize(runs: list[SubRun], records: dict[SubRun, dict], folders: dict[SubRun, Path], settings: dict) -> dict:
    """glue_results.json's content from every planned sub-run's record (all finished), tasks in GLUE's order."""
    tasks = {}
    for name in dict.fromkeys(run.task for run in runs):
        mine = [run for run in runs if run.task == name]
        best = select([records[run] for run in mine])
        chosen = next(run for run in mine if records[run] is best)
        seeds = [records[run] for run in mine if run.learning_rate == chosen.learning_rate]
        keys = list(best["metrics"])
        tasks[TASKS[name].folder] = {
            **best["metrics"],
            "score": best["score"],
            "learning_rate": chosen.learning_rate,
            "seed": chosen.seed,
            "run": str(folders[chosen]),
            "runs": len(mine),
            "seeds": {
                "learning_rate": chosen.learning_rate,
                "runs": len(seeds),
                "score": spread([r["score"] for r in seeds]),
                **{key: spread([r["metrics"][key] for r in seeds]) for key in keys},
            },
        }
    return {
        "average": statistics.fmean(t["score"] for t in tasks.values()),
        "average_of_seed_means": statistics.fmean(t["seeds"]["score"]["mean"] for t in tasks.values()),
        "tasks": tasks,
        "settings": settings,
    }


def _percent(value: float | None) -> str:
    return "–" if value is None else f"{100 * value:.1f}"


def markdown(summary: dict) -> str:
    """glue_results.md: the paper-style line (BERT's table 1: figures x 100, two per task joined by /), then per task
    the selected run and the spread of its seeds."""
    tasks, settings = summary["tasks"], summary["settings"]
    epochs = settings.get("epochs")
    length = f"{epochs:g} epoch(s)" if epochs is not None else f"{settings.get('max_steps')} steps"
    heads = [f"{title} ({'/'.join(metric_keys(t))})" for title, t in tasks.items()]
    values = ["/".join(_percent(t[k]) for k in metric_keys(t)) for t in tasks.values()]
    lines = [
        "# GLUE results (dev)",
        "",
        f"Backbone: `{settings['checkpoint']}`. Each task: the best on dev of "
        f"{len(settings['learning_rates'])} learning rate(s) x its seeds "
        f"({length}, batch {settings['batch_size']}, max_seq_len {settings['max_seq_len']}).",
        "",
        "| " + " | ".join([*heads, "Average"]) + " |",
        "|" + " --- |" * (len(heads) + 1),
        "| " + " | ".join([*values, _percent(summary["average"])]) + " |",
        "",
        "| Task | dev score | lr | seed | runs | seeds at that lr: score mean ± std | min | max |",
        "| --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for title, t in tasks.items():
        s = t["seeds"]["score"]
        lines.append(
            f"| {title} | {_percent(t['score'])} | {t['learning_rate']:g} | {t['seed']} | {t['runs']} | "
            f"{t['seeds']['runs']}: {_percent(s['mean'])} ± {_percent(s['std'])} | {_percent(s['min'])} | "
            f"{_percent(s['max'])} |"
        )
    lines += [
        "",
        f"Average of the seeds' means: {_percent(summary['average_of_seed_means'])}. The score of a task is the mean "
        "of its figures; the average is their mean over the tasks (as GLUE computes it).",
    ]
    return "\n".join(lines) + "\n"


def metric_keys(task: dict) -> list[str]:
    """The figures of a task entry (what is neither its score nor the run's description)."""
    return [k for k in task if k not in ("score", "learning_rate", "seed", "run", "runs", "seeds")]


def write_summary(run_dir: Path, summary: dict) -> None:
    write_json(run_dir / RESULTS_JSON, summary)
    write_text(run_dir / RESULTS_MD, markdown(summary))


def write_submission(run_dir: Path, chosen: list[Path]) -> tuple[Path, list[str]] | None:
    """The test predictions of the selected sub-runs (``chosen``), gathered into ``<run dir>/submission`` and zipped
    beside it as ``submission.zip`` (the GLUE site takes the zip); None when none has test predictions. Returns the
    folder and the files of a complete submission that it lacks."""
    files = [path for folder in chosen for path in sorted((folder / PREDICTIONS).glob("*.tsv"))]
    if not files:
        return None
    folder = run_dir / SUBMISSION
    with atomic_folder(folder) as tmp:
        for path in files:
            shutil.copyfile(path, tmp / path.name)
    zip_file = run_dir / f"{SUBMISSION}.zip"
    with atomic_file(zip_file) as archive, zipfile.ZipFile(archive, "w", compression=zipfile.ZIP_DEFLATED) as zipped:
        for path in files:
            zipped.write(folder / path.name, arcname=path.name)
    return folder, [name for name in SUBMISSION_FILES if not (folder / name).is_file()]
