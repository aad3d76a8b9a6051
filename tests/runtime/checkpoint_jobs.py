"""User code, a job script and the ``accelflow run`` calls of the tests that fail a job after
a checkpoint and restore it (subtasks import this module by reference, so it must stay light:
no pytest, no test modules)."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from runtime_jobs import GenericPaced

from accelflow import RuntimeContext

N = 3000
RUNTIME = Path(__file__).resolve().parent
ACCELFLOW = Path(sys.executable).parent / "accelflow"

#: ``accelflow run job.py OUT CHECKPOINTS MODE NAME``: MODE ``fail`` reads an unbounded input
#: and fails once checkpoint 3 completed (its checkpoints are kept); ``finish`` reads ``N``
#: records and ends. NAME is the job's name. Records go to a FileSink in OUT.
JOB = """\
import sys
from checkpoint_jobs import N, FailsAtCheckpoint
from accelflow import Environment
from accelflow.connectors.files import FileSink

out, checkpoints, mode, name = sys.argv[1:5]
env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "100 ms",
                   "execution.checkpointing.dir": checkpoints, "restart-strategy": "none"})
env.from_source(FailsAtCheckpoint(N, fail_at=3 if mode == "fail" else None), name="numbers") \\
    .sink_to(FileSink(out), name="files")
env.execute(name)
"""


class FailsAtCheckpoint(GenericPaced):
    """``0..n-1`` in chunks of 20, with Source's default ``snapshot_split`` (a ResumeSplit
    that rereads and skips). With ``fail_at`` it is unbounded and raises once checkpoint
    ``fail_at`` completed (with ``restart-strategy: none`` the job fails and keeps its
    checkpoints); without, it is bounded and ends after ``n`` records."""

    def __init__(self, n: int, fail_at: int | None = None) -> None:
        super().__init__(n, chunk=20, delay=0.01, bounded=fail_at is None)
        self.fail_at = fail_at
        self.failing = False

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        if self.fail_at is not None and checkpoint_id >= self.fail_at:
            self.failing = True

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for chunk in super().read_chunks(split, ctx):
            if self.failing:
                raise RuntimeError(f"stopped after checkpoint {self.fail_at}")
            yield chunk


def run_cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """``accelflow run ARGS`` in ``tmp_path``, with the state directory (the signing key)
    ``tmp_path/state``."""
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    env["ACCELFLOW_STATE_DIR"] = str(tmp_path / "state")
    env["PYTHONPATH"] = os.pathsep.join([str(RUNTIME), *[p for p in sys.path if p]])
    return subprocess.run([str(ACCELFLOW), "run", *args], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=180, check=False)


def failed_job(tmp_path: Path, out: Path, name: str = "numbers") -> tuple[Path, subprocess.CompletedProcess[str]]:
    """Run :data:`JOB` (``tmp_path/job.py``) until it fails after a checkpoint: its newest
    checkpoint and the run."""
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    out.mkdir(exist_ok=True)
    ran = run_cli(tmp_path, str(script), str(out), str(tmp_path / "checkpoints"), "fail", name)
    assert ran.returncode == 1 and "stopped after checkpoint 3" in ran.stderr, ran.stderr
    (chk,) = (p.parent for p in (tmp_path / "checkpoints").glob("*/chk-*/_metadata"))
    return chk, ran


def resume(tmp_path: Path, chk: Path, out: Path, name: str = "numbers",
           *options: str) -> subprocess.CompletedProcess[str]:
    """``accelflow run [OPTIONS] -s CHK job.py``: :data:`JOB` reading its ``N`` records."""
    return run_cli(tmp_path, *options, "-s", str(chk), str(tmp_path / "job.py"), str(out),
                   str(tmp_path / "checkpoints"), "finish", name)


def published_numbers(out: Path) -> list[int]:
    """The records a FileSink published in ``out``, sorted."""
    return sorted(int(line) for p in out.glob("part-*") for line in p.read_text().splitlines())
