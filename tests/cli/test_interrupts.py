"""Ctrl-C on ``accelflow run``, as a terminal sends it: SIGINT to the command's whole process
group (the command, its zygote, TaskExecutors and subtasks), with the real CLI.

* Early, while the command or its zygote still imports: one line, exit 130, no traceback.
* Twice, 50 ms apart, while the job is being cancelled: the second waits for the cancel,
  the resume hint still comes, no restart, no TaskExecutor traceback.
"""

from __future__ import annotations

import os
import re
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest

HERE = Path(__file__).parent
RUNTIME = HERE.parent / "runtime"
ACCELFLOW = str(Path(sys.executable).with_name("accelflow"))

JOB = """\
import time
from accelflow import Environment
env = Environment()
env.from_sequence(1, 1000).map(lambda x: (time.sleep(0.01), x)[1]).add_sink(lambda x: None)
env.execute("slow")
"""


def _environment(**extra: str) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    env["PYTHONPATH"] = os.pathsep.join([str(HERE / "slow_import"), str(RUNTIME), *[p for p in sys.path if p]])
    return dict(env, **extra)


def _start(args: list[str], env: dict[str, str], cwd: Path) -> subprocess.Popen[str]:
    """``accelflow ARGS`` in a process group of its own, as a shell runs a foreground job."""
    return subprocess.Popen([ACCELFLOW, *args], cwd=cwd, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, start_new_session=True)


def _wait_for(condition: Callable[[], object], what: str, proc: subprocess.Popen[str],
              timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if proc.poll() is not None:
            raise AssertionError(f"accelflow ended early ({proc.returncode}): {proc.communicate()}")
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.01)


def _finish(proc: subprocess.Popen[str]) -> tuple[str, str]:
    try:
        return proc.communicate(timeout=90)
    finally:
        try:
            os.killpg(proc.pid, signal.SIGKILL)  # whatever of the group is left
        except ProcessLookupError:
            pass
        proc.wait()


@pytest.mark.parametrize("who, module", [("cli", "numpy"), ("zygote", "accelflow.runtime")])
def test_ctrl_c_while_importing_prints_one_line_and_exits_130(
        tmp_path: Path, who: str, module: str) -> None:
    """``cli``: the command imports NumPy for ``run`` (before it, a 40-line traceback through
    importlib); ``zygote``: the zygote, started by ``Environment()``, imports the runtime
    (before it, the zygote's own traceback in the same terminal)."""
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    marker = tmp_path / "importing"
    env = _environment(ACCELFLOW_TEST_SLOW_IMPORT=f"{who}:{module}",
                       ACCELFLOW_TEST_SLOW_IMPORT_MARKER=str(marker))
    proc = _start(["run", "--no-progress", str(script)], env, tmp_path)
    _wait_for(marker.exists, f"the {who} to import {module}", proc)
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = _finish(proc)
    assert proc.returncode == 130, stderr
    assert "Traceback" not in stderr and "KeyboardInterrupt" not in stderr, stderr
    lines = stderr.splitlines()
    assert lines and all(line.startswith("accelflow: ") for line in lines), stderr
    if who == "cli":
        assert stderr == "accelflow: interrupted\n"


CHECKPOINTED = """\
import signal
from runtime_jobs import CommitLog, Paced
from accelflow import Environment, RichMapFunction


class Stubborn(RichMapFunction):
    \"\"\"Ignores SIGTERM: cancelling it takes the TaskExecutor's whole grace period.\"\"\"

    def open(self, ctx):
        signal.signal(signal.SIGTERM, signal.SIG_IGN)

    def map(self, x):
        return 2 * x


env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "100 ms",
                   "execution.checkpointing.dir": %r,
                   "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
                   "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3})
env.from_source(Paced(10**6, chunk=20, delay=0.01, bounded=False), name="numbers") \\
    .map(Stubborn, name="double").sink_to(CommitLog(%r), name="log")
env.execute("numbers")
"""


@pytest.mark.slow
def test_a_second_ctrl_c_while_cancelling_still_ends_with_the_resume_hint(tmp_path: Path) -> None:
    out, checkpoints = tmp_path / "out", tmp_path / "checkpoints"
    out.mkdir()
    script = tmp_path / "job.py"
    script.write_text(CHECKPOINTED % (str(checkpoints), str(out)), encoding="utf-8")
    proc = _start(["run", "--no-progress", str(script)], _environment(), tmp_path)
    _wait_for(lambda: list(checkpoints.glob("*/chk-*/_metadata")), "a checkpoint", proc)
    os.killpg(proc.pid, signal.SIGINT)
    time.sleep(0.05)  # as `timeout -s INT` twice: the subtask is still in its grace period
    os.killpg(proc.pid, signal.SIGINT)
    _, stderr = _finish(proc)
    assert proc.returncode == 130, stderr
    lines = stderr.splitlines()
    assert "accelflow: interrupted again: still cancelling; waiting for the job to end" in lines
    assert "accelflow: interrupted: cancelled job-1 (numbers)" in lines, stderr
    kept = re.search(r"^accelflow: its latest checkpoint is kept at (\S+)$", stderr, re.MULTILINE)
    assert kept and (Path(kept[1]) / "_metadata").is_file(), stderr
    assert f"accelflow: resume with: accelflow run -s {kept[1]} {script}" in lines
    assert "restarting" not in stderr and "Traceback" not in stderr, stderr
