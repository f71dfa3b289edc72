"""What every command shares around its run: the console entry point, the Hydra run directory in, expected failures out
as one line (``failures.py``), and the results files. Nothing of training here: plm-prepare runs through it too;
the commands that train add ``fitting.py``."""

from __future__ import annotations

import importlib.util
import json
import logging
import sys
from collections.abc import Callable
from pathlib import Path

from hydra.core.hydra_config import HydraConfig
from omegaconf import DictConfig

from plm_toolkit.commands import failures
from plm_toolkit.config import setup
from plm_toolkit.core.atomic import write_text
from plm_toolkit.core.errors import ConfigError

log = logging.getLogger("plm_toolkit")


# Hydra launchers that come from an optional extra: the override's prefix -> (package, extra).
LAUNCHER_EXTRAS = {"hydra/launcher=submitit": ("hydra_plugins.hydra_submitit_launcher", "slurm")}


def require_launcher_plugin(argv: list[str]) -> None:
    """Stop with the extra to install when the command line picks a launcher whose plugin is missing (Hydra alone
    would only list the launchers it has)."""
    for arg in argv:
        for prefix, (module, extra) in LAUNCHER_EXTRAS.items():
            if arg.startswith(prefix) and importlib.util.find_spec(module) is None:
                raise ConfigError(
                    f"{arg} needs the hydra-submitit-launcher package: pip install 'plm_toolkit[{extra}]'"
                )


EVAL_RESULTS = "eval_results.json"


def write_json(path: Path, value) -> None:
    write_text(path, json.dumps(value, indent=2, ensure_ascii=False) + "\n")


def write_results(run_dir: Path, objective) -> None:
    """The last evaluation's figures (``eval_results.json``) and files (``artifacts``: predictions,
    translations) of an objective or task that keeps them (``last_metrics``), into the run directory."""
    metrics = getattr(objective, "last_metrics", None)
    if not metrics:
        return
    for name, value in objective.artifacts.items():
        if isinstance(value, str):
            (run_dir / name).write_text(value)
        else:
            write_json(run_dir / name, value)
    write_json(run_dir / EVAL_RESULTS, metrics)
    log.info("eval results: %s %s", run_dir / EVAL_RESULTS, json.dumps(metrics))


def run_command(run: Callable[[DictConfig, Path], dict], cfg: DictConfig) -> float | None:
    """Run in Hydra's output directory. An expected failure (bad input, impossible config: ``failures.explain``)
    prints one line on stderr, goes to the run's log file too, and makes the command exit with status 1; anything
    else is a bug and keeps its traceback. Returns the final evaluation loss (else the training loss) for Hydra
    sweepers that optimise an objective. A command that trains wraps ``run`` in ``fitting.in_run_directory``."""
    failures.task_started()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:
        final = run(cfg, run_dir)
    except Exception as err:
        if not failures.report(err):
            raise
        _log_to_files(f"error: {failures.explain(err)}")
        return None
    return final.get("eval_loss", final.get("loss"))


def _log_to_files(message: str) -> None:
    """Write to the log files only (Hydra's <run dir>/<job>.log): the console gets the message on stderr."""
    record = log.makeRecord(log.name, logging.ERROR, __file__, 0, message, None, None)
    for handler in logging.getLogger().handlers:
        if isinstance(handler, logging.FileHandler):
            handler.handle(record)


def main(hydra_main: Callable[[], object]) -> None:
    """The console entry point around a ``@hydra.main`` function: expected failures become one line on stderr."""
    setup()

    def checked() -> None:
        require_launcher_plugin(sys.argv[1:])
        hydra_main()

    failures.guard(checked)
