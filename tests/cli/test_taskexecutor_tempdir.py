"""A SIGKILLed TaskExecutor leaves nothing in ``$TMPDIR``: multiprocessing's ``pymp-*``
directory (its forkserver's socket) lives in the cluster's working directory, which goes
with the cluster (before, each kill left one ``pymp-*`` in ``$TMPDIR``). Real processes:
``accelflow run`` with a TMPDIR of the test's own, a TaskExecutor forked by the zygote or
spawned as a fresh interpreter, SIGKILLed while its subtask runs."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

JOB = """\
import time
from accelflow import Environment
env = Environment()
env.from_sequence(1, 2000).map(lambda x: (time.sleep(0.01), x)[1]).add_sink(lambda x: None)
env.execute("slow")
"""


def _te_pid(trace: Path) -> int | None:
    """The TaskExecutor that has forked a subtask (its start-up trace says so)."""
    if not trace.exists():
        return None
    for line in trace.read_text(encoding="utf-8").splitlines():
        _, pid, event = line.split(" ", 2)
        if event.startswith("subtask forked"):
            return int(pid)
    return None


@pytest.mark.parametrize("method", ["zygote", "spawn"])
def test_a_sigkilled_taskexecutor_leaves_no_pymp_directory(tmp_path: Path, method: str) -> None:
    tmp = tmp_path / "tmp"
    tmp.mkdir()
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    trace = tmp_path / "trace"
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    env.update(TMPDIR=str(tmp), ACCELFLOW_STARTUP_TRACE=str(trace))
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelflow", "run", "--no-progress", "-D", f"local.start-method={method}",
         str(script)], cwd=tmp_path, env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 60
        while (pid := _te_pid(trace)) is None:
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        os.kill(pid, signal.SIGKILL)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
    assert proc.returncode == 1, stderr
    assert "taskexecutor-1 died while running job-1 (slow)" in stderr
    assert sorted(p.name for p in tmp.iterdir()) == []  # no pymp-*, no accelflow-* left
