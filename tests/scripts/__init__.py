"""Tests of scripts/: each runs a script through its real command line, on tiny inputs, and checks what it prints."""

import json
import os
import subprocess
import sys
from pathlib import Path

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def run_script(name: str, *args, env: dict[str, str] | None = None, cwd: Path | None = None) -> str:
    """The stdout of ``python scripts/<name> args`` (run by this interpreter), which must exit with status 0."""
    command = [sys.executable, str(SCRIPTS / name), *(str(a) for a in args)]
    done = subprocess.run(command, capture_output=True, text=True, env={**os.environ, **(env or {})}, cwd=cwd)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stderr[-4000:]}"
    return done.stdout


def run_json(name: str, *args, **kwargs) -> dict:
    """The one JSON object a benchmark script prints."""
    return json.loads(run_script(name, *args, **kwargs))
