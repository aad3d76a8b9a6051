"""The TaskExecutor's device health monitor alone (issue 29 phase 2): what it makes of fault
events, probes, drills and the processes an ended subtask left, on a manual clock with a
scripted watch (no thread, no sleep); leftovers are real processes it really kills."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from accelflow import DeviceFault, HardwareFailure
from accelflow.resources import ComputeProcess, DeviceWatch, Fault, HealthConfig, ProbeResult
from accelflow.resources.gpu._xid import xid_fault
from accelflow.runtime import DeviceReport, DevicesFree, ManualClock, MemoryReport, SubtaskKey
from accelflow.resources import SUBTASK_ENV_VAR
from accelflow.runtime.taskexecutor._health import FailDevice, HealthMonitor, owner_of, subtask_marker

KEY = SubtaskKey("job-1", 0, 1, 0)
GIB = 2**30


class ScriptedWatch(DeviceWatch):
    """Faults, probe results and compute processes a test sets; what was asked."""

    def __init__(self) -> None:
        self.faults: list[tuple[str, Fault]] = []
        self.probes: dict[str, ProbeResult] = {}
        self.processes: list[ComputeProcess] = []
        self.probed = 0

    def probe(self) -> Mapping[str, ProbeResult]:
        self.probed += 1
        return dict(self.probes)

    def wait(self, timeout: float) -> list[tuple[str, Fault]]:
        out, self.faults = self.faults, []
        return out

    def compute_processes(self) -> list[ComputeProcess]:
        return list(self.processes)

    def uuid(self, address: str) -> str | None:
        return f"GPU-{address}"


def _monitor(watch: ScriptedWatch, **config: Any) -> tuple[HealthMonitor, ManualClock]:
    clock = ManualClock()
    monitor = HealthMonitor({"gpu": (watch, HealthConfig(probe_interval=1.0, **config))},
                            {"gpu": ["0", "1"]}, clock=clock)
    return monitor, clock


def _changes(notices: list[Any]) -> list[tuple[str, str]]:
    return [(n.address, n.change.kind) for n in notices if isinstance(n, DeviceReport) and n.change]


@pytest.fixture
def leftover() -> Iterator[subprocess.Popen[bytes]]:
    """A process started by subtask KEY of this 'TaskExecutor' (it carries its marker)."""
    env = dict(os.environ, **{SUBTASK_ENV_VAR: subtask_marker(KEY)})
    proc = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    yield proc
    proc.kill()
    proc.wait()


def test_a_hardware_xid_quarantines_the_device_and_fails_its_subtasks_with_a_hardware_failure() -> None:
    watch = ScriptedWatch()
    monitor, _ = _monitor(watch)
    watch.faults = [("1", xid_fault(79))]
    monitor.step(0)
    report, fail = monitor.drain()
    assert isinstance(report, DeviceReport) and report.change is not None
    assert (report.address, report.uuid, report.change.kind, report.change.xid) == ("1", "GPU-1", "quarantined", 79)
    assert report.health["state"] == "quarantined" and report.health["xid_counts"] == {"79": 1}
    assert isinstance(fail, FailDevice) and (fail.resource, fail.address) == ("gpu", "1")
    assert isinstance(fail.error, HardwareFailure)
    assert (fail.error.device, fail.error.uuid, fail.error.xid) == ("gpu 1 (GPU-1)", "GPU-1", 79)
    assert str(fail.error) == "gpu 1 (GPU-1) failed: Xid 79 (GPU has fallen off the bus); quarantined"
    assert monitor.health[("gpu", "0")].state == "healthy"


def test_a_subtask_started_on_a_device_quarantined_before_fails_at_once() -> None:
    """The JobManager may place a subtask before the quarantine's report reaches it (e.g. the
    quarantine a starting TaskExecutor finds): it fails, and restarts elsewhere."""
    watch = ScriptedWatch()
    monitor, _ = _monitor(watch)
    watch.faults = [("1", xid_fault(79)), ("0", Fault("memory pages pending retirement", "hardware",
                                                       fail_subtasks=False))]
    monitor.step(0)
    monitor.drain()
    monitor.subtask_started(KEY, 4242, {"gpu": ["0"]})  # a drain lets it run
    assert monitor.drain() == []
    monitor.subtask_started(SubtaskKey("job-1", 0, 1, 1), 4243, {"gpu": ["1"]})
    [fail] = monitor.drain()
    assert isinstance(fail, FailDevice) and type(fail.error) is HardwareFailure and fail.address == "1"
    assert str(fail.error) == "gpu 1 (GPU-1) failed: Xid 79 (GPU has fallen off the bus); quarantined"


def test_an_application_xid_fails_the_subtasks_and_the_device_stays() -> None:
    monitor, _ = _monitor(ScriptedWatch())
    monitor.inject("gpu", "0", xid_fault(13))  # a drill takes the path of an event
    report, fail = monitor.drain()
    assert _changes([report]) == [("0", "application-fault")]
    assert isinstance(fail, FailDevice) and type(fail.error) is DeviceFault and fail.error.xid == 13
    assert monitor.health[("gpu", "0")].state == "healthy"


def test_an_informational_xid_is_reported_in_the_history_only() -> None:
    monitor, _ = _monitor(ScriptedWatch())
    monitor.inject("gpu", "0", xid_fault(63))
    [report] = monitor.drain()
    assert isinstance(report, DeviceReport) and report.change is None
    assert [h["xid"] for h in report.health["history"]] == [63]


def test_a_device_rejoins_after_a_reset_seen_by_its_probes() -> None:
    watch = ScriptedWatch()
    monitor, clock = _monitor(watch, rejoin_probes=2)
    watch.faults = [("0", xid_fault(79))]
    monitor.step(0)
    watch.probes = {"0": ProbeResult(reachable=False, detail="GPU is lost")}
    clock.advance(1.0)
    monitor.step(0)
    assert _changes(monitor.drain()) == [("0", "quarantined")]
    watch.probes = {"0": ProbeResult(reachable=True)}  # back on the bus: a reset
    for _ in range(2):
        clock.advance(1.0)
        monitor.step(0)
    assert _changes(monitor.drain()) == [("0", "rejoined")]
    assert watch.probed == 3 and monitor.health[("gpu", "0")].state == "healthy"


def test_probes_come_every_interval_and_a_quiet_one_reports_nothing() -> None:
    watch = ScriptedWatch()
    monitor, clock = _monitor(watch)
    watch.probes = {"0": ProbeResult(reachable=True, temperature=40)}
    monitor.step(0)
    assert watch.probed == 0  # not due yet
    clock.advance(1.0)
    monitor.step(0)
    clock.advance(0.5)
    monitor.step(0)
    assert watch.probed == 1 and monitor.drain() == []


def test_an_ended_subtasks_leftover_is_killed_and_the_share_freed_once_it_is_gone(
        leftover: subprocess.Popen[bytes]) -> None:
    watch = ScriptedWatch()
    monitor, clock = _monitor(watch)
    monitor.subtask_started(KEY, 999_999, {"gpu": ["0"], "fpga": ["3"]})
    monitor.subtask_ended(KEY)
    watch.processes = [ComputeProcess(leftover.pid, "GPU-0", 6 * GIB), ComputeProcess(1, "GPU-0", GIB)]
    assert owner_of(leftover.pid) == KEY and owner_of(os.getpid()) is None
    monitor.step(0)
    assert leftover.wait(10) == -9  # killed; pid 1 (not ours) is not
    assert monitor.drain() == []  # still listed: the share stays held
    watch.processes = watch.processes[1:]
    clock.advance(0.1)
    monitor.step(0)
    assert monitor.drain() == [DevicesFree(KEY)]


def test_a_sharer_of_the_ended_subtasks_gpu_runs_on_and_does_not_hold_its_share() -> None:
    # two subtasks of this TaskExecutor share GPU 0 (say 0.5 each): when one ends, the other,
    # still computing there, is not its leftover (a real GPU lists both; found on an H100)
    other = SubtaskKey(KEY.job_id, KEY.attempt, KEY.chain, KEY.index + 1)
    env = dict(os.environ, **{SUBTASK_ENV_VAR: subtask_marker(other)})
    sharer = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"], env=env)
    try:
        watch = ScriptedWatch()
        monitor, _ = _monitor(watch)
        monitor.subtask_started(KEY, 999_999, {"gpu": ["0"]})
        monitor.subtask_started(other, sharer.pid, {"gpu": ["0"]})
        monitor.subtask_ended(KEY)
        watch.processes = [ComputeProcess(sharer.pid, "GPU-0", GIB)]
        monitor.step(0)
        assert monitor.drain() == [DevicesFree(KEY)]
        assert sharer.poll() is None  # not killed
    finally:
        sharer.kill()
        sharer.wait()


def test_memory_still_held_after_the_timeout_quarantines_the_device_then_frees_the_share(
        leftover: subprocess.Popen[bytes]) -> None:
    watch = ScriptedWatch()
    monitor, clock = _monitor(watch, memory_release_timeout=2.0)
    monitor.subtask_started(KEY, 999_999, {"gpu": ["1"]})
    monitor.subtask_ended(KEY)
    watch.processes = [ComputeProcess(leftover.pid, "GPU-1", 6 * GIB)]  # the listing lags on
    for _ in range(25):
        clock.advance(0.1)
        monitor.step(0)
    notices = monitor.drain()
    assert _changes(notices) == [("1", "quarantined")] and notices[-1] == DevicesFree(KEY)
    change = notices[0].change
    assert change.reason == f"memory still held 2 s after its subtasks ended: pid {leftover.pid} (6 GiB)"
    assert not change.fail_subtasks  # nothing runs on it any more


def test_each_running_subtask_s_device_memory_is_reported_with_the_probes(
        leftover: subprocess.Popen[bytes]) -> None:
    watch = ScriptedWatch()
    monitor, clock = _monitor(watch)
    monitor.subtask_started(KEY, 999_999, {"gpu": ["0"]})
    watch.processes = [ComputeProcess(999_999, "GPU-0", GIB), ComputeProcess(leftover.pid, "GPU-0", 2 * GIB),
                       ComputeProcess(1, "GPU-0", 4 * GIB)]
    clock.advance(1.0)
    monitor.step(0)
    [report] = monitor.drain()
    assert isinstance(report, MemoryReport)
    assert [(u.key, u.address, u.used) for u in report.usage] == [(KEY, "0", 3 * GIB)]
