"""A process of the runtime dies with its parent even when the parent died between the fork
(or spawn) and the child's ``prctl(PR_SET_PDEATHSIG)``: the child compares the parent pid it
expects with ``os.getppid()`` after the ``prctl`` (``accelflow._parent``). Real processes:
``orphaning.py`` makes the parent exit before the child ties itself to it."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

import accelflow._parent
from accelflow import Environment
from accelflow.runtime.taskexecutor import _early

HELPER = str(Path(__file__).with_name("orphaning.py"))
KILLED = f"signal {int(signal.SIGKILL)}"


def _orphan(mode: str, *argv: str) -> str:
    done = subprocess.run([sys.executable, HELPER, mode, *argv], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    return done.stdout.splitlines()[-1]


def test_a_forked_child_whose_parent_is_already_gone_dies_at_once() -> None:
    assert _orphan("fork") == KILLED  # it was "alive": re-parented, and never signalled


def test_a_forked_child_still_dies_when_its_parent_is_killed_later() -> None:
    assert _orphan("kill") == KILLED


@pytest.mark.parametrize("argv", [
    # a warm subtask process (FD FRAMEWORK PRELOAD_KEY): it exited 0 after warming up
    ["-m", "accelflow.runtime.subtask", "0", "none", "key"],
    # a device host (FD ADDRESS SPEC_JSON): it went on to read its spec
    ["-m", "accelflow.runtime.devicehost", "0", "/nonexistent/dh.sock", "{}"],
    # the embedded Kafka broker's holder: it checked only for a parent pid of 1
    ["-m", "accelflow.connectors.kafka._broker", "1"],
    # the TaskExecutor's forkserver, whose first preload ties it to the TaskExecutor
    ["-c", "import accelflow.runtime.taskexecutor._forkserver_guard, time; time.sleep(300)"],
], ids=["warm-subtask", "device-host", "kafka-broker", "forkserver"])
def test_a_spawned_process_whose_parent_is_already_gone_dies_at_once(argv: list[str]) -> None:
    assert _orphan("spawn", sys.executable, *argv) == KILLED


def _parents(_: Any) -> tuple[int | None, int]:
    """Run in a subtask: the parent it expects, and its parent (its forkserver)."""
    return accelflow._parent.expected_parent(), os.getppid()


@pytest.mark.parametrize("start_method", ["zygote", "spawn"])
def test_a_forked_subtask_expects_its_forkserver_as_its_parent(start_method: str) -> None:
    conf = {"local.start-method": start_method}
    [(expected, parent)] = Environment(conf).from_sequence(1, 1).map(_parents).execute_and_collect()
    assert expected == parent


def test_the_taskexecutor_names_the_parent_variable_as_the_helper_reads_it() -> None:
    assert _early.PARENT_PID_ENV_VAR == accelflow._parent.PARENT_PID_ENV_VAR
