"""A deterministic failure that repeats on every restart is shown once, then counted (review
finding 10): before, each of the 30 attempts printed its own warning line."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.runtime import ManualClock
from accelflow.runtime.jobmanager._repeats import EVERY, INTERVAL_S, RepeatedFailures

ATTEMPTS = 30
JOB = f"""\
import sys
from accelflow import Environment
env = Environment({{"execution.checkpointing.interval": "100 ms",
                   "execution.checkpointing.dir": sys.argv[1], "parallelism.default": 2,
                   "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": {ATTEMPTS},
                   "restart-strategy.fixed-delay.delay": "0 s"}})
def explode(x):
    raise ValueError("bad record")
env.from_sequence(1, 100).map(explode).print()
env.execute("boom")
"""


def test_a_map_that_always_raises_prints_far_fewer_lines_than_attempts(tmp_path: Path) -> None:
    (tmp_path / "job.py").write_text(JOB, encoding="utf-8")
    env = dict(os.environ)
    env.pop("ACCELFLOW_CONF", None)
    accelflow = Path(sys.executable).with_name("accelflow")
    out = subprocess.run([str(accelflow), "run", str(tmp_path / "job.py"), str(tmp_path / "ckpt")],
                         env=env, capture_output=True, text=True, timeout=300)
    assert out.returncode == 1, out.stderr
    assert out.stderr.endswith("  ValueError: bad record\naccelflow: run with -v for the traceback\n")
    warnings = [line for line in out.stderr.splitlines() if line.startswith("accelflow: warning:")]
    assert len(warnings) <= ATTEMPTS // 3, out.stderr  # a cause or two, and the counts
    counts = [re.search(r"job-1: the same failure again \(attempt (\d+), (\d+) repeats? in [0-9.]+ s\): "
                        r"subtask sequence -> map -> print \([12]/2\) on taskexecutor-1 ", line)
              for line in warnings]
    shown = [(int(m[1]), int(m[2])) for m in counts if m]
    assert shown[0][1] == 1 and shown[-1][1] >= ATTEMPTS // 2, out.stderr  # names the count
    hint = "it gives up after restart-strategy.fixed-delay.attempts (30) restarts"
    assert sum(hint in line for line in warnings) == 1, out.stderr


def _messages(caplog: pytest.LogCaptureFixture, level: int) -> list[str]:
    return [r.getMessage() for r in caplog.records if r.levelno == level]


def test_repeats_are_counted_once_per_every_attempts_or_interval(caplog: pytest.LogCaptureFixture) -> None:
    clock = ManualClock()
    repeats = RepeatedFailures("job-7", 2**31 - 1, clock)
    error = ValueError("subtask map (1/2) on taskexecutor-1 failed\nValueError: bad 3")
    caplog.set_level(logging.INFO, logger="accelflow.runtime")
    for attempt in range(2, 4 + 2 * EVERY):
        repeats.warning("%s failed, restarting (attempt %d)", "job-7", attempt, attempt=attempt, error=error)
    clock.sleep(INTERVAL_S)  # a slow restart: the next repeat is shown, however few came since
    repeats.warning("%s failed", "job-7", attempt=40, error=ValueError(
        "subtask map (2/2) on taskexecutor-2 failed\nValueError: bad 3"))
    repeats.warning("%s failed: another cause", "job-7", attempt=41, error=ValueError("bad 4"))
    warnings = _messages(caplog, logging.WARNING)
    assert warnings == [
        "job-7 failed, restarting (attempt 2)",
        "job-7: the same failure again (attempt 3, 1 repeat in 0.0 s): subtask map (1/2) on taskexecutor-1 "
        f"failed; shown again once per {EVERY} attempts or 30 s (each one with -v); it restarts until it is "
        "cancelled: set restart-strategy.fixed-delay.attempts to give up after that many restarts "
        "(unbounded restarts are Flink's default with checkpointing on)",
        f"job-7: the same failure again (attempt {3 + EVERY}, {1 + EVERY} repeats in 0.0 s): subtask map "
        "(1/2) on taskexecutor-1 failed",
        f"job-7: the same failure again (attempt {3 + 2 * EVERY}, {1 + 2 * EVERY} repeats in 0.0 s): "
        "subtask map (1/2) on taskexecutor-1 failed",
        f"job-7: the same failure again (attempt 40, {2 + 2 * EVERY} repeats in 30.0 s): subtask map (2/2) "
        "on taskexecutor-2 failed",
        "job-7 failed: another cause",
    ]
    assert len(_messages(caplog, logging.INFO)) == 2 * EVERY + 2  # every repeat, for -v and the logs
