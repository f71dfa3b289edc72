"""Bad input under torchrun: the one error line is printed once between the ranks, by rank 0 when every rank fails
alike and by the rank that failed when only one does, and every rank exits non-zero (torchrun's own failure table,
which follows the line, gives each rank's exit code)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

import plm_toolkit

# Frames of our own code: the package's folder, whatever the checkout is called (a clone named plm_toolkit holds the
# venv's torch files under a path with that name too).
OWN_FRAME = re.compile(r'File "' + re.escape(str(Path(plm_toolkit.__file__).resolve().parent)) + r"[/\\]")

pytestmark = [pytest.mark.distributed, pytest.mark.slow]


def torchrun(args: list[str], cwd, *launcher: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
    cmd = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *launcher, *args]
    return subprocess.run(cmd, cwd=cwd, env=env, capture_output=True, text=True, timeout=120)


def exit_codes(stderr: str) -> dict[int, int]:
    """Each failed rank's exit code, from torchrun's table (a rank it stopped has -15: SIGTERM)."""
    rows = re.findall(r"rank\s*:\s*(\d+) \(local_rank: \d+\)\s*\n\s*exitcode\s*:\s*(-?\d+)", stderr)
    return {int(rank): int(code) for rank, code in rows}


def error_lines(stderr: str) -> list[str]:
    # --tee prefixes each line with its rank ([default0]:); without it the line starts with error:.
    return [line for line in stderr.splitlines() if re.match(r"(\[default\d\]:)?error: ", line)]


@pytest.mark.parametrize(
    ("override", "expected"),
    [
        ("trainer.bogus=1", "error: trainer.bogus: unknown key"),  # Hydra's composition, before the run
        ("trainer.batch_size=0", "trainer.batch_size=0: must be at least 1"),  # validation, inside the run
    ],
)
def test_every_rank_fails_alike_and_rank_0_says_it_once(override, expected, tmp_path):
    # --tee 2 prefixes each rank's stderr lines with its rank, to see which rank printed.
    result = torchrun(
        ["-m", "plm_toolkit.commands.train", override, f"hydra.run.dir={tmp_path / 'run'}"], tmp_path, "--tee=2"
    )
    assert result.returncode != 0
    lines = error_lines(result.stderr)
    assert len(lines) == 1, result.stderr[-3000:]
    assert lines[0].startswith("[default0]:error: ") and expected in lines[0]
    codes = exit_codes(result.stderr)
    assert set(codes) == {0, 1} and all(code != 0 for code in codes.values()), result.stderr[-3000:]
    # The only traceback is torchrun's own report of its failed workers: none comes from our code.
    assert not OWN_FRAME.search(result.stderr), result.stderr[-3000:]


def test_a_failure_only_rank_1_hits_is_said_once_by_rank_1(tmp_path):
    script = tmp_path / "fails_on_rank_1.py"
    script.write_text(
        textwrap.dedent(
            """
            import time

            from plm_toolkit.commands import failures
            from plm_toolkit.core.errors import DataError
            from plm_toolkit.core.launch import launched_rank

            failures.RANK0_GRACE_S = 1.0


            def main():
                if launched_rank() == 1:
                    raise DataError("shard_1.txt:3: only rank 1 reads this file")
                time.sleep(60)  # rank 0 carries on until torchrun stops it


            failures.guard(main)
            """
        )
    )
    result = torchrun([str(script)], tmp_path, "--tee=2")
    lines = error_lines(result.stderr)
    assert lines == ["[default1]:error: shard_1.txt:3: only rank 1 reads this file"], result.stderr[-3000:]
    # Rank 1 exits with status 1; torchrun then stops rank 0 (SIGTERM) instead of letting it wait for its peer.
    assert exit_codes(result.stderr) == {1: 1, 0: -15}, result.stderr[-3000:]
