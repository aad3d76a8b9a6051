"""The event pump alone (issue 26.8): who hears which event, with the launcher's queue fed by
the test and a manual clock (no dispatcher thread: the embedded cluster's way of pumping)."""

from __future__ import annotations

import queue
from pathlib import Path

import pytest

from accelflow.runtime import (
    ManualClock, RegistrationFailed, SubtaskKey, SubtaskRunning, TaskExecutorExited, TaskExecutorLost,
)
from accelflow._errors import encode_error
from accelflow.runtime.jobmanager._events import POLL_S, EventPump, RoutedEvent, TaskExecutorDied
from accelflow.runtime.jobmanager._state import ClusterState
from jm_parts import ScriptedLauncher, job


@pytest.fixture
def launcher(tmp_path: Path) -> ScriptedLauncher:
    return ScriptedLauncher(tmp_path)


@pytest.fixture
def pump(launcher: ScriptedLauncher) -> EventPump:
    return EventPump(launcher, ClusterState(), clock=ManualClock())


def _drain(source: queue.Queue[RoutedEvent]) -> list[RoutedEvent]:
    out = []
    while not source.empty():
        out.append(source.get_nowait())
    return out


def test_a_registration_is_recorded_before_membership_hears_of_it(pump: EventPump, launcher: ScriptedLauncher) -> None:
    registration = launcher.registration("taskexecutor-1")
    pump.lost["taskexecutor-1"] = "taskexecutor-1 was lost at 12:00:00"
    launcher.events.put(("taskexecutor-1", registration))
    assert pump.next_event(pump.membership, POLL_S) == ("taskexecutor-1", registration)
    assert pump.state.taskexecutors["taskexecutor-1"].registration == registration
    assert pump.lost == {}  # registered again: no longer named as lost


def test_a_failed_registration_goes_to_membership_only(pump: EventPump) -> None:
    failed = RegistrationFailed("taskexecutor-1", encode_error(RuntimeError("no driver")))
    pump.route(("taskexecutor-1", failed))
    assert _drain(pump.membership) == [("taskexecutor-1", failed)] and pump.state.taskexecutors == {}


def test_a_subtasks_events_go_to_its_own_jobs_queue(pump: EventPump) -> None:
    first, second = job("job-1"), job("job-2")
    pump.state.jobs.update({"job-1": first, "job-2": second})
    running = SubtaskRunning(SubtaskKey("job-2", 0, 1, 0))
    pump.route(("taskexecutor-1", running))
    pump.route(("taskexecutor-1", SubtaskRunning(SubtaskKey("job-9", 0, 0, 0))))  # no such job: dropped
    assert _drain(second.events) == [("taskexecutor-1", running)]
    assert _drain(first.events) == [] and _drain(pump.membership) == []


def test_a_lost_taskexecutor_is_told_to_every_running_job_and_to_membership(
        pump: EventPump, launcher: ScriptedLauncher) -> None:
    registration = launcher.registration("taskexecutor-1")
    pump.route(("taskexecutor-1", registration))
    _drain(pump.membership)
    running, ended = job("job-1"), job("job-2")
    ended.end("FINISHED")
    pump.state.jobs.update({"job-1": running, "job-2": ended})
    lost = TaskExecutorLost("taskexecutor-1", registration.pid)
    pump.route(("taskexecutor-1", lost))
    assert _drain(running.events) == [("taskexecutor-1", TaskExecutorDied("taskexecutor-1"))]
    assert _drain(ended.events) == []
    assert _drain(pump.membership) == [("taskexecutor-1", lost)]
    assert pump.state.taskexecutors == {} and registration.pid in pump.state.lost_pids


def test_the_end_of_an_incarnation_already_replaced_is_not_told_to_jobs(
        pump: EventPump, launcher: ScriptedLauncher) -> None:
    old, new = launcher.registration("taskexecutor-1"), launcher.registration("taskexecutor-1")
    pump.route(("taskexecutor-1", old))
    pump.route(("taskexecutor-1", new))  # its replacement registered before the old one's exit came
    running = job("job-1")
    pump.state.jobs["job-1"] = running
    pump.route(("taskexecutor-1", TaskExecutorExited("taskexecutor-1", -9, old.pid)))
    assert _drain(running.events) == []
    assert pump.state.taskexecutors["taskexecutor-1"].registration == new


def test_waiting_for_an_event_that_does_not_come_returns_at_the_timeout(pump: EventPump) -> None:
    assert pump.next_event(pump.membership, 2.5) is None
    assert pump.clock.monotonic() == 2.5
