"""Which failure the JobManager reports when a subtask dies under others (``_root_cause``),
on a manual clock with a launcher that runs no process: a ``ChannelClosed`` waits up to
``ROOT_CAUSE_WAIT_S`` for the neighbour's own failure, without holding up other events. The
real-process races are in tests/runtime/test_root_cause.py."""

from __future__ import annotations

import threading
from pathlib import Path

import pytest

from accelflow._errors import ChannelClosed, JobError, encode_error
from accelflow.config import config_from
from accelflow.runtime import ManualClock, SubtaskExited, SubtaskFailed, SubtaskKey, SubtaskProgress
from accelflow.runtime.jobmanager import JobManager
from accelflow.runtime.jobmanager._checkpoint_store import CheckpointStore
from accelflow.runtime.jobmanager._checkpoints import CheckpointCoordinator
from accelflow.runtime.jobmanager._collected import CollectedResults
from accelflow.runtime.jobmanager._failover import Attempt, Failover, RestartBudget, in_place_off
from accelflow.runtime.jobmanager._root_cause import ROOT_CAUSE_WAIT_S
from jm_parts import ScriptedLauncher, job

CLOSED = "the downstream subtask closed its data channel"


class Running:
    """A job ``sequence -> rebalance -> count`` at parallelism 2 on one TaskExecutor, deployed
    and driven by a real :class:`JobManager` (restart-strategy none)."""

    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.jm = JobManager(config_from(values={}), ScriptedLauncher(tmp_path, slots=4), clock=self.clock)
        self.jm.state.add_taskexecutor(self.jm.launcher.registration("taskexecutor-1"))
        self.job = job(parallelism=2)
        self.jm.state.jobs[self.job.id] = self.job
        self.coordinator = CheckpointCoordinator(
            self.job, lambda key, command: None, threading.RLock(), clock=self.clock,
            store=CheckpointStore(str(tmp_path / "checkpoints"), "uid", clock=self.clock))
        self.job.in_place_off = in_place_off(self.job.config, 0)
        self.failover = Failover(self.job, self.coordinator, self.jm.state, self.jm.deployer, self.jm.pump,
                                 self.jm.launcher, self.clock, RestartBudget(0))
        self.attempt = Attempt(self.jm.deployer.deploy(self.job), CollectedResults())
        self.source, self.count = SubtaskKey(self.job.id, 0, 0, 0), SubtaskKey(self.job.id, 0, 1, 1)

    def at(self, delay: float, message: object) -> None:
        self.clock.call_later(delay, lambda: self.job.events.put(("taskexecutor-1", message)))

    def drive(self) -> BaseException:
        with pytest.raises(JobError) as info:
            self.jm._drive(self.job, self.attempt, self.coordinator, self.failover)
        return info.value


def test_the_dead_neighbours_failure_wins_over_a_channel_closed_that_came_first(tmp_path: Path) -> None:
    run = Running(tmp_path)
    run.at(0.0, SubtaskFailed(run.source, encode_error(ChannelClosed(CLOSED))))
    run.at(0.01, SubtaskExited(run.source, 1))  # the source's process ends: no failure of its own
    run.at(0.3, SubtaskProgress(run.count, ((0, 5),), {}))  # handled while the error is held
    run.at(0.5, SubtaskExited(run.count, -9))
    error = run.drive()
    assert not isinstance(error, ChannelClosed)
    assert str(error) == "subtask count -> print (2/2) on taskexecutor-1 exited with code -9 (killed by SIGKILL) without finishing"
    assert error.__notes__ == [f"subtask sequence (1/2) on taskexecutor-1 failed: {CLOSED} (a consequence)"]
    assert run.attempt.failure is not None and run.attempt.failure.keys == [run.count, run.source]
    assert run.jm.state.subtasks[run.count].counts == ((0, 5),)
    assert run.clock.monotonic() == pytest.approx(0.5)


def test_a_channel_closed_stands_when_no_neighbour_fails_in_time(tmp_path: Path) -> None:
    run = Running(tmp_path)
    run.at(0.0, SubtaskFailed(run.source, encode_error(ChannelClosed(CLOSED))))
    run.at(ROOT_CAUSE_WAIT_S + 0.5, SubtaskExited(run.count, -9))  # too late to be its cause
    error = run.drive()
    assert isinstance(error, ChannelClosed)
    assert str(error) == f"subtask sequence (1/2) on taskexecutor-1 failed: {CLOSED}"
    assert run.attempt.failure is not None and run.attempt.failure.keys == [run.source]
    assert ROOT_CAUSE_WAIT_S <= run.clock.monotonic() < ROOT_CAUSE_WAIT_S + 0.5
