"""Which processes a starting TaskExecutor may kill on its devices (issue 29, item 4): only the
processes of subtasks of a TaskExecutor that died (``accelflow.resources._orphans``), on real
processes with a scripted watch; the whole path, with a SIGKILLed TaskExecutor, is in
``tests/runtime/test_dead_taskexecutor_leftovers.py``."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from typing import Any

import psutil
import pytest

from accelflow.resources import ComputeProcess, DeviceWatch, ProbeResult
from accelflow.resources._orphans import (
    SUBTASK_ENV_VAR, WithFaults, find_orphans, orphan_of, reconcile_dead_owners,
)
from accelflow.resources._orphans import _dead_before

GIB = 2**30


class ListedWatch(DeviceWatch):
    """Lists ``processes`` on GPUs ``GPU-<address>``; ``drop_dead``: only those that live."""

    def __init__(self, processes: list[ComputeProcess], drop_dead: bool = True) -> None:
        self.processes, self.drop_dead, self.listed = processes, drop_dead, 0

    def probe(self) -> Mapping[str, ProbeResult]:
        return {}

    def compute_processes(self) -> list[ComputeProcess]:
        self.listed += 1
        return [p for p in self.processes if not self.drop_dead or _alive(p.pid)]

    def uuid(self, address: str) -> str | None:
        return f"GPU-{address}"


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _dead_pid() -> int:
    """The pid of a process that has exited (and was reaped)."""
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


@pytest.fixture
def spawn() -> Iterator[Any]:
    """Start a sleeping process whose subtask marker names TaskExecutor pid ``owner``."""
    started: list[subprocess.Popen[bytes]] = []

    def start(owner: int | None) -> subprocess.Popen[bytes]:
        env = dict(os.environ)
        if owner is not None:
            env[SUBTASK_ENV_VAR] = f"{owner}:job-1:0:1:0"
        proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
        started.append(proc)
        while not psutil.Process(proc.pid).cmdline():  # until it runs (its /proc shows its environment)
            time.sleep(0.001)
        return proc

    yield start
    for proc in started:
        proc.kill()
        proc.wait()


def test_a_process_of_a_subtask_of_a_dead_taskexecutor_is_an_orphan(spawn: Any) -> None:
    dead = _dead_pid()
    proc = spawn(dead)
    orphan = orphan_of(proc.pid)
    assert orphan is not None and (orphan.pid, orphan.taskexecutor, orphan.marker) == (
        proc.pid, dead, f"{dead}:job-1:0:1:0")


def test_a_live_taskexecutor_s_process_and_one_without_a_marker_are_not(spawn: Any) -> None:
    assert orphan_of(spawn(os.getpid()).pid) is None  # this process plays a live TaskExecutor
    assert orphan_of(spawn(None).pid) is None
    assert orphan_of(_dead_pid()) is None


def test_a_reused_taskexecutor_pid_started_after_the_process_counts_as_dead() -> None:
    me = psutil.Process()
    assert _dead_before(me.pid, me.create_time() - 10)  # this process cannot have started it
    assert not _dead_before(me.pid, me.create_time() + 10)  # it may have: never killed
    assert _dead_before(_dead_pid(), time.time())


def test_a_dead_taskexecutor_s_leftover_is_killed_and_the_device_is_free(spawn: Any) -> None:
    orphan, live = spawn(_dead_pid()), spawn(os.getpid())
    watch = ListedWatch([ComputeProcess(orphan.pid, "GPU-0", 6 * GIB), ComputeProcess(live.pid, "GPU-1", GIB)])
    assert reconcile_dead_owners("gpu", watch, ["0", "1"], timeout=10.0) == []
    assert orphan.wait(5) == -9  # SIGKILLed
    assert live.poll() is None  # another (live) TaskExecutor's: never killed


def test_memory_that_stays_quarantines_the_device_naming_the_leftover_and_its_taskexecutor(spawn: Any) -> None:
    dead = _dead_pid()
    orphan = spawn(dead)
    watch = ListedWatch([ComputeProcess(orphan.pid, "GPU-1", 6 * GIB)], drop_dead=False)  # listed for ever
    now = iter(float(t) for t in range(100)).__next__
    [(address, fault)] = reconcile_dead_owners("gpu", watch, ["0", "1"], timeout=2.0, clock=now,
                                               sleep=lambda s: None)
    assert address == "1" and fault.kind == "hardware" and fault.fail_subtasks
    assert fault.reason == (f"memory still held 3 s after the TaskExecutor that ran them died: pid {orphan.pid} "
                            f"(6 GiB) (left by the subtasks of TaskExecutor pid {dead})")
    assert orphan.wait(5) == -9
    wrapped = WithFaults(watch, [(address, fault)])
    assert wrapped.wait(0.0) == [("1", fault)] and wrapped.wait(0.0) == []  # reported once, first


def test_without_an_orphan_on_the_host_the_devices_are_not_even_listed(spawn: Any) -> None:
    if find_orphans():
        pytest.skip("another run left an orphan on this host")
    live = spawn(os.getpid())
    watch = ListedWatch([ComputeProcess(live.pid, "GPU-0", GIB)])
    assert reconcile_dead_owners("gpu", watch, ["0"], timeout=1.0) == [] and watch.listed == 0
