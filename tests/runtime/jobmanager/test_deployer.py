"""The deployer alone (issue 26.8): placement against the cluster's ledger and slots, a job that
waits ``PENDING`` while they are full, and aborts that give everything back, on a manual clock
with a launcher that runs no process."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path

import pytest

from accelflow import AllocationError, JobCancelledError
from accelflow.runtime import (
    CancelJob, Deploy, ManualClock, SubtaskExited, SubtaskKey, TaskExecutorLost,
)
from accelflow.runtime.jobmanager import Job
from accelflow.runtime.jobmanager._deployment import EXIT_WAIT_S, Deployer
from accelflow.runtime.jobmanager._events import EventPump
from accelflow.runtime.jobmanager._state import ClusterState
from jm_parts import ScriptedLauncher, job


class Cluster:
    """One TaskExecutor with ``slots`` slots and ``gpus`` GPUs, and the deployer over it."""

    def __init__(self, tmp_path: Path, *, slots: int = 4, gpus: int = 1) -> None:
        self.clock = ManualClock()
        self.launcher = ScriptedLauncher(tmp_path, slots=slots, gpus=gpus)
        self.state = ClusterState()
        self.pump = EventPump(self.launcher, self.state, clock=self.clock)
        self.deployer = Deployer(self.launcher, self.state, self.pump, clock=self.clock)
        self.registration = self.launcher.registration("taskexecutor-1")
        self.state.add_taskexecutor(self.registration)

    def job(self, job_id: str, *, gpus: int = 1, parallelism: int = 1) -> Job:
        submitted = job(job_id, gpus=gpus, parallelism=parallelism)
        self.state.jobs[job_id] = submitted
        return submitted

    def deployed(self) -> list[SubtaskKey]:
        return [command.descriptor.key for _, command in self.launcher.commands(Deploy)]

    def is_empty(self) -> bool:
        """Every slot and device share is free."""
        return self.state.offers() == self.state.offers(empty=True)


def test_a_job_waits_pending_while_the_ledger_is_full_and_is_placed_when_a_share_comes_back(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    first, second = cluster.job("job-1"), cluster.job("job-2")
    first_keys = cluster.deployer.deploy(first)
    seen: list[tuple[str, object]] = []
    cluster.clock.call_later(0.5, lambda: seen.append((second.state, second.pending)))
    cluster.clock.call_later(3, lambda: cluster.deployer.abort(first, first_keys, set(first_keys)))

    second_keys = cluster.deployer.deploy(second)

    [(state, pending)] = seen
    assert state == "PENDING" and pending is not None
    assert pending.message.startswith("cannot place") and pending.since == ManualClock.EPOCH
    assert any("gpu" in reason for reason in pending.reasons)
    assert cluster.clock.monotonic() == 3  # placed when the share came back, not on a later poll
    assert (second.state, second.pending) == ("RUNNING", None)
    assert cluster.deployed() == first_keys + second_keys
    counter = next(key for key in second_keys if key.chain == 1)
    assert cluster.state.subtasks[counter].devices == {"gpu": [("0", Fraction(1))]}


def test_a_job_cancelled_while_pending_stops_waiting_and_holds_nothing(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.deployer.deploy(cluster.job("job-1"))
    second = cluster.job("job-2")

    def cancel() -> None:
        second.cancel_requested = True

    cluster.clock.call_later(60, cancel)
    with pytest.raises(JobCancelledError, match="job-2 .* was cancelled while waiting for resources"):
        cluster.deployer.deploy(second)
    assert ("job-2", 0) not in cluster.state.slots
    assert all(key.job_id == "job-1" for key in cluster.deployed())


def test_a_job_that_does_not_fit_the_empty_cluster_fails_at_once_naming_a_lost_taskexecutor(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.pump.lost["taskexecutor-2"] = "taskexecutor-2 exited with code 9 at 12:00:00"
    too_big = cluster.job("job-1", gpus=2)
    with pytest.raises(AllocationError, match=r"1 TaskExecutor\(s\) lost and not replaced yet") as caught:
        cluster.deployer.deploy(too_big)
    assert any("taskexecutor-2 exited with code 9" in reason for reason in caught.value.reasons)
    assert too_big.state == "CREATED" and cluster.deployed() == [] and cluster.is_empty()
    assert cluster.clock.monotonic() == 0  # refused without waiting


def test_an_abort_gives_back_every_slot_and_share_after_waiting_for_exits_at_most_its_bound(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, gpus=2)
    running = cluster.job("job-1", parallelism=2)
    keys = cluster.deployer.deploy(running)
    channels = [Path(c.descriptor.listen_address) for _, c in cluster.launcher.commands(Deploy)
                if c.descriptor.listen_address]
    for channel in channels:
        channel.touch()
    assert not cluster.is_empty()

    cluster.deployer.abort(running, keys, exited=set())  # no subtask ever says it exited

    assert cluster.clock.monotonic() == pytest.approx(EXIT_WAIT_S, abs=0.2)
    assert cluster.launcher.commands(CancelJob) == [("taskexecutor-1", CancelJob("job-1"))]
    assert cluster.is_empty() and ("job-1", 0) not in cluster.state.slots
    assert {cluster.state.subtasks[key].state for key in keys} == {"CANCELED"}
    assert channels and not any(channel.exists() for channel in channels)


@pytest.mark.parametrize("ending", ["every subtask exits", "its TaskExecutor is lost"])
def test_an_abort_ends_as_soon_as_no_subtask_is_left_to_exit(tmp_path: Path, ending: str) -> None:
    cluster = Cluster(tmp_path, gpus=2)
    running = cluster.job("job-1", parallelism=2)
    keys = cluster.deployer.deploy(running)
    if ending == "every subtask exits":
        for key in keys:
            cluster.launcher.events.put(("taskexecutor-1", SubtaskExited(key, 0)))
    else:
        cluster.launcher.events.put(("taskexecutor-1", TaskExecutorLost("taskexecutor-1", cluster.registration.pid)))

    cluster.deployer.abort(running, keys, exited=set())

    assert cluster.clock.monotonic() == 0
    assert not cluster.state.ledger.held_by(keys[0]) and ("job-1", 0) not in cluster.state.slots
