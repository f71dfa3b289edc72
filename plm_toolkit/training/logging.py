"""Where training metrics go: metrics.jsonl (one JSON object per record), TensorBoard scalars, the started trackers.
The console's progress bar and step lines are ``training/progress.py``'s."""

from __future__ import annotations

import json
import logging
import math
from pathlib import Path

from plm_toolkit.core.atomic import write_text
from plm_toolkit.training.trackers import Trackers

log = logging.getLogger("plm_toolkit")

METRICS_FILE = "metrics.jsonl"


def read_metrics(path: Path) -> list[dict]:
    """The records of a metrics.jsonl. A line that is not a JSON object (the torn last line of a run killed in the
    middle of an append) is dropped with a warning naming the file and the line, instead of stopping every reader."""
    records = []
    for number, line in enumerate(Path(path).read_text(encoding="utf-8", errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        try:
            record = json.loads(line)
        except ValueError:
            record = None
        if not isinstance(record, dict) or not isinstance(record.get("step"), int):
            log.warning("%s:%d: not a complete metrics record (a write cut short?); dropped", path, number)
            continue
        records.append(record)
    return records


class MetricsWriter:
    """Appends records to ``metrics.jsonl`` and mirrors numeric values to TensorBoard and the started trackers
    (``training/trackers.py``: MLflow, W&B), rank 0 only."""

    def __init__(
        self,
        run_dir: Path,
        tensorboard: bool,
        enabled: bool = True,
        jsonl: bool = True,
        trackers: Trackers | None = None,
    ):
        self.enabled = enabled
        self.jsonl = jsonl
        self.trackers = trackers if trackers is not None else Trackers([])
        self.path = run_dir / METRICS_FILE
        if enabled:
            run_dir.mkdir(parents=True, exist_ok=True)
        self.tb = None
        if enabled and tensorboard:
            try:
                from torch.utils.tensorboard import SummaryWriter
            except ImportError:  # tensorboard is a dependency, but a trimmed environment may lack it
                log.warning("tensorboard is not installed; writing metrics.jsonl only")
            else:
                self.tb = SummaryWriter(log_dir=str(run_dir / "tensorboard"))

    def write(self, record: dict) -> None:
        if not self.enabled:
            return
        if self.jsonl:
            with self.path.open("a") as f:
                f.write(json.dumps(record) + "\n")
        self.trackers.log(record)
        if self.tb is not None:
            step = record["step"]
            for key, value in record.items():
                if key != "step" and isinstance(value, (int, float)) and math.isfinite(value):
                    self.tb.add_scalar(key, value, step)

    def truncate_after(self, step: int) -> None:
        """On resume, drop records past the checkpoint (on a fresh start, step 0: all of them) so the file reads as
        one uninterrupted run; a torn line goes too."""
        if not (self.enabled and self.path.exists()):
            return
        kept = [record for record in read_metrics(self.path) if record["step"] <= step]
        write_text(self.path, "".join(json.dumps(record) + "\n" for record in kept))

    def has_evaluation(self, step: int) -> bool:
        """Whether the file holds an evaluation record of ``step``."""
        if not self.path.exists():
            return False
        return any(r["step"] == step and any(k.startswith("eval_") for k in r) for r in read_metrics(self.path))

    def close(self) -> None:
        self.trackers.close()
        if self.tb is not None:
            self.tb.close()
