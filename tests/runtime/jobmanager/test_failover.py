"""The JobManager's failover decision alone (issue 28.1): which failures are rolled back in
place, and what a rollback sends and moves, on a manual clock with a launcher that runs no
process. The real-process behaviour is in tests/runtime/test_failover_in_place.py."""

from __future__ import annotations

import threading
from fractions import Fraction
from pathlib import Path
from typing import Any

import msgspec
import pytest

from accelflow._errors import encode_error
from accelflow.config import config_from
from accelflow.runtime import (
    Deploy, DevicesFree, ManualClock, Rollback, SubtaskExited, SubtaskFailed, SubtaskKey, SubtaskRunning,
)
from accelflow.runtime.jobmanager import Job
from accelflow.runtime.jobmanager._checkpoint_store import CheckpointStore
from accelflow.runtime.jobmanager._checkpoints import CheckpointCoordinator
from accelflow.runtime.jobmanager._collected import CollectedResults
from accelflow.runtime.jobmanager._deployment import EXIT_WAIT_S, Deployer
from accelflow.runtime.jobmanager._events import EventPump
from accelflow.runtime.jobmanager._failover import (
    JOIN_S, Attempt, Failover, Failure, RestartBudget, in_place_off, why_not_in_place,
)
from accelflow.runtime.jobmanager._state import ClusterState
from jm_parts import ScriptedLauncher, job

CHECKPOINTED = {"execution.checkpointing.interval": 10, "restart-strategy.fixed-delay.delay": "2 s"}


class Cluster:
    """Two TaskExecutors (4 slots, 2 GPUs each), a job ``sequence -> rebalance -> count``
    (``count`` on a GPU) at parallelism 2, deployed, and its failover."""

    def __init__(self, tmp_path: Path, *, restarts: int = 3, **config: Any) -> None:
        self.clock = ManualClock()
        self.launcher = ScriptedLauncher(tmp_path, slots=4, gpus=2)
        self.state = ClusterState()
        self.pump = EventPump(self.launcher, self.state, clock=self.clock)
        self.deployer = Deployer(self.launcher, self.state, self.pump, clock=self.clock)
        for te in ("taskexecutor-1", "taskexecutor-2"):
            self.state.add_taskexecutor(self.launcher.registration(te))
        self.job: Job = job(config={**CHECKPOINTED, **config}, gpus=1, parallelism=2)
        self.state.jobs[self.job.id] = self.job
        self.coordinator = CheckpointCoordinator(
            self.job, lambda key, command: None, threading.RLock(), clock=self.clock,
            store=CheckpointStore(str(tmp_path / "checkpoints"), "uid", clock=self.clock))
        self.job.in_place_off = in_place_off(self.job.config, restarts)
        self.failover = Failover(self.job, self.coordinator, self.state, self.deployer, self.pump,
                                 self.launcher, self.clock, RestartBudget(restarts))
        self.keys = self.deployer.deploy(self.job)
        self.coordinator.start_attempt(self.keys)
        self.attempt = Attempt(self.keys, CollectedResults())
        self.launcher.sent.clear()

    def key(self, chain: int, index: int) -> SubtaskKey:
        return SubtaskKey(self.job.id, self.job.attempt, chain, index)

    def fail(self, key: SubtaskKey, *, exits: bool = True, lost: str | None = None) -> Attempt | None:
        """``key`` failed (its exit comes 0.1 s later unless not ``exits``): the rollback."""
        self.attempt.failure = Failure([key], lost, self.clock.monotonic())
        if exits and lost is None:
            self.clock.call_later(0.1, lambda: self.job.events.put(("taskexecutor-1", SubtaskExited(key, -9))))
        return self.failover.roll_back(self.attempt, RuntimeError("boom"))

    def holders(self) -> set[SubtaskKey]:
        return {h for device in self.state.ledger.devices() for h in self.state.ledger.holders(device)}


def test_what_is_confined_and_what_restarts_every_subtask(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    job, attempt = cluster.job, cluster.attempt
    one, two = cluster.key(1, 0), cluster.key(1, 1)
    cases = [
        (Failure([one], None, 0.0), None),
        (Failure([one], "taskexecutor-1", 0.0), None),  # it held only this subtask of the job
        (Failure([one, two], "taskexecutor-1", 0.0), None),  # the sources survive
        (Failure([one, two], None, 0.0), None),  # two failed in one detection window
        (Failure(list(cluster.keys), "taskexecutor-1", 0.0),
         "taskexecutor-1 was lost with every subtask of the job (4)"),
        (Failure(list(cluster.keys), None, 0.0), "every subtask of the job failed (4): none survives to roll back"),
        (Failure([], None, 0.0), "the failure is the JobManager's own, not a subtask's"),
    ]
    for failure, expected in cases:
        attempt.failure = failure
        assert why_not_in_place(job, attempt) == expected
    attempt.failure, attempt.exited = Failure([one], None, 0.0), {cluster.key(0, 1)}
    assert why_not_in_place(job, attempt) == "other subtasks had finished or exited already"
    attempt.exited, attempt.recovery = set(), object()  # type: ignore[assignment]
    assert why_not_in_place(job, attempt) == "it failed while the job was still rolling back"
    assert in_place_off(config_from(values={"execution.failover.in-place": False}), 3) \
        == "execution.failover.in-place is false"
    assert in_place_off(config_from(values={}), 0) == "the restart strategy allows no restart"
    assert in_place_off(config_from(values={}), 3) is None  # checkpointing off too


def test_a_rollback_rekeys_the_survivors_in_place_and_replaces_the_failed_one_after_the_delay(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    failed = cluster.key(1, 1)
    before = {key: cluster.state.subtasks[key].taskexecutor for key in cluster.keys}
    devices = cluster.state.subtasks[failed].devices

    rolled = cluster.fail(failed)

    assert rolled is not None and cluster.job.attempt == 1
    new = {key: key._replace(attempt=1) for key in cluster.keys}
    assert rolled.keys == list(new.values()) and rolled.recovery is not None
    rollbacks = cluster.launcher.commands(Rollback)
    assert sorted((te, c.key, c.new_key) for te, c in rollbacks) == sorted(
        (before[old], old, key) for old, key in new.items() if old != failed)
    count = next(c for _, c in rollbacks if c.new_key.chain == 1)
    assert count.listen_address is not None and count.listen_address.endswith(f"job-1-a1-c1-{count.new_key.index}.sock")
    source = next(c for _, c in rollbacks if c.new_key.chain == 0)
    assert source.splits is not None and source.outputs and all("-a1-" in a for a in source.outputs[0])
    [(te, deploy)] = cluster.launcher.commands(Deploy)  # the replacement, where the failed one was
    assert (te, deploy.descriptor.key) == (before[failed], new[failed])
    assert cluster.clock.monotonic() == pytest.approx(0.1 + JOIN_S + 2.0)  # its exit, the join window, the restart delay
    # nothing was placed again: every slot and share moved to the new keys
    assert cluster.state.subtasks[new[failed]].devices == devices
    assert cluster.holders() == {key for key in new.values() if key.chain == 1}  # count holds the GPUs
    assert (cluster.job.id, 0) not in cluster.state.slots and len(cluster.state.slots[(cluster.job.id, 1)]) == 2
    assert cluster.failover.budget.left == 2
    [record] = cluster.job.failovers
    assert (record.path, record.replaced, len(record.rolled_back)) == ("in-place", ["count -> print (2/2)"], 3)


def test_a_failed_subtask_that_never_exits_restarts_every_subtask(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    assert cluster.fail(cluster.key(1, 0), exits=False) is None
    assert cluster.failover.why_full == f"subtask count -> print (1/2) did not exit within {EXIT_WAIT_S:g} s"
    assert EXIT_WAIT_S <= cluster.clock.monotonic() < EXIT_WAIT_S + 1  # waited its exit out (manual clock)
    assert cluster.launcher.sent == [] and cluster.job.attempt == 0 and cluster.failover.budget.left == 3


def test_no_restart_left_fails_the_job(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, restarts=0)
    assert cluster.fail(cluster.key(1, 0)) is None
    assert cluster.launcher.sent == [] and cluster.job.attempt == 0


def test_a_subtask_whose_taskexecutor_was_lost_is_placed_where_there_is_room(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    failed = cluster.key(1, 1)
    lost = cluster.state.subtasks[failed].taskexecutor
    assert lost is not None
    cluster.state.lose_taskexecutor(lost, cluster.state.taskexecutors[lost].registration.pid)

    assert cluster.fail(failed, lost=lost) is not None

    [(te, deploy)] = cluster.launcher.commands(Deploy)
    assert te != lost and deploy.descriptor.key == failed._replace(attempt=1)
    assert cluster.state.subtasks[deploy.descriptor.key].devices["gpu"][0][1] == Fraction(1)


def test_a_ready_standby_takes_the_failed_subtasks_index(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, **{"execution.failover.standby-subtasks": 1})
    pool = cluster.failover.pool
    pool.fill()
    [(te, standby_deploy)] = cluster.launcher.commands(Deploy)
    standby = standby_deploy.descriptor.key
    assert standby_deploy.descriptor.standby and standby.index == 2  # past the last index
    assert pool.on_any((te, SubtaskRunning(standby)))
    cluster.launcher.sent.clear()
    failed = cluster.key(1, 0)

    assert cluster.fail(failed) is not None

    activation = next(c for _, c in cluster.launcher.commands(Rollback) if c.key == standby)
    assert activation.new_key == failed._replace(attempt=1) and activation.listen_address is not None
    assert cluster.clock.monotonic() == pytest.approx(0.1 + JOIN_S)  # no restart delay: nothing to deploy for it
    [(_, refill)] = cluster.launcher.commands(Deploy)  # only the next standby
    assert refill.descriptor.standby and refill.descriptor.key != standby
    assert cluster.state.subtasks[activation.new_key].recovery == "standby"
    assert cluster.job.failovers[0].standby == "count -> print (standby 1 of 1)"


def test_a_lost_taskexecutor_with_several_subtasks_is_confined_and_each_is_placed_again(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path, **{"scheduler.placement-policy": "spread"})  # index 0 on one, 1 on the other
    lost = cluster.state.subtasks[cluster.key(1, 1)].taskexecutor
    assert lost is not None
    failed = [key for key in cluster.keys if cluster.state.subtasks[key].taskexecutor == lost]
    survivors = [key for key in cluster.keys if key not in failed]
    assert len(failed) >= 2 and survivors
    cluster.state.lose_taskexecutor(lost, cluster.state.taskexecutors[lost].registration.pid)
    cluster.attempt.failure = Failure(list(failed), lost, cluster.clock.monotonic())

    assert cluster.failover.roll_back(cluster.attempt, RuntimeError("lost")) is not None

    rollbacks = cluster.launcher.commands(Rollback)
    assert sorted(c.key for _, c in rollbacks) == sorted(survivors)  # once each
    deploys = cluster.launcher.commands(Deploy)
    assert sorted(d.descriptor.key for _, d in deploys) == sorted(key._replace(attempt=1) for key in failed)
    assert {te for te, _ in deploys} == {te for te in cluster.state.taskexecutors} - {lost}
    [record] = cluster.job.failovers
    assert sorted(record.replaced) == sorted(cluster.state.subtasks[key._replace(attempt=1)].name for key in failed)
    assert len(record.rolled_back) == len(survivors) and cluster.failover.budget.left == 2
    # the replacements of one index share one slot, as at the first deployment
    assert sum(te != lost for te, _ in cluster.state.slots[(cluster.job.id, 1)]) == 2


def test_a_subtask_failing_while_the_first_one_exits_joins_the_same_rollback(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    first, second, sources = cluster.key(1, 0), cluster.key(1, 1), [cluster.key(0, 0), cluster.key(0, 1)]
    te = cluster.state.subtasks[second].taskexecutor
    cluster.clock.call_later(0.05, lambda: cluster.job.events.put((te, SubtaskFailed(second, encode_error(OSError("xid 79"))))))
    cluster.clock.call_later(0.2, lambda: cluster.job.events.put((te, SubtaskExited(second, 1))))

    assert cluster.fail(first) is not None

    assert sorted(c.key for _, c in cluster.launcher.commands(Rollback)) == sources
    deploys = cluster.launcher.commands(Deploy)  # both stay where they were
    assert sorted((t, d.descriptor.key) for t, d in deploys) == sorted(
        (cluster.state.subtasks[key._replace(attempt=1)].taskexecutor, key._replace(attempt=1)) for key in (first, second))
    assert cluster.clock.monotonic() == pytest.approx(0.2 + JOIN_S + 2.0)  # both exits, then one restart delay
    [record] = cluster.job.failovers
    assert record.replaced == ["count -> print (1/2)", "count -> print (2/2)"] and len(record.rolled_back) == 2


def test_a_subtask_exiting_just_after_the_first_one_joins_the_same_rollback(tmp_path: Path) -> None:
    # two processes killed together: the second exit comes a little after the first one's
    cluster = Cluster(tmp_path)
    first, second, sources = cluster.key(1, 0), cluster.key(1, 1), [cluster.key(0, 0), cluster.key(0, 1)]
    te = cluster.state.subtasks[second].taskexecutor
    cluster.clock.call_later(0.1 + JOIN_S / 2, lambda: cluster.job.events.put((te, SubtaskExited(second, -9))))

    assert cluster.fail(first) is not None  # its exit comes at 0.1

    assert sorted(c.key for _, c in cluster.launcher.commands(Rollback)) == sources
    [record] = cluster.job.failovers
    assert record.replaced == ["count -> print (1/2)", "count -> print (2/2)"]


def test_several_failed_subtasks_that_cannot_all_be_placed_restart_every_subtask(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    failed = [cluster.key(1, 0), cluster.key(1, 1)]
    for device in cluster.state.ledger.devices():  # a hardware Xid on every GPU: none is healthy
        cluster.state.ledger.quarantine(device, "xid 79")
    for te in cluster.state.taskexecutors:
        cluster.state.capacity.put(cluster.state.offer(te))
    cluster.attempt.failure = Failure(list(failed), None, 0.0)
    cluster.attempt.exited = set(failed)

    assert cluster.failover.roll_back(cluster.attempt, RuntimeError("xid")) is None

    why = cluster.failover.why_full
    assert why is not None and why.startswith("no TaskExecutor has room for count -> print (1/2), count -> print (2/2): ")
    assert cluster.launcher.sent == [] and cluster.job.attempt == 0 and cluster.failover.budget.left == 3


def _watched_gpus(monkeypatch: Any) -> None:
    """The TaskExecutors watch their GPUs' health: a failed subtask's shares wait for their
    ``DevicesFree`` (what its processes left computing there is gone, docs/gpu.md)."""
    made = ScriptedLauncher.registration

    def registration(self: ScriptedLauncher, te_id: str) -> Any:
        reg = made(self, te_id)
        return msgspec.structs.replace(reg, resources=tuple(
            msgspec.structs.replace(r, watched=True) for r in reg.resources))

    monkeypatch.setattr(ScriptedLauncher, "registration", registration)


def test_a_replacement_on_its_devices_waits_until_its_predecessor_left_them(tmp_path: Path, monkeypatch: Any) -> None:
    _watched_gpus(monkeypatch)
    cluster = Cluster(tmp_path)
    failed = cluster.key(1, 1)
    te = cluster.state.subtasks[failed].taskexecutor

    def free() -> None:
        cluster.state.devices_free(failed)  # what the event pump does with the TaskExecutor's message
        cluster.job.events.put((te, DevicesFree(failed)))

    cluster.clock.call_later(3.0, free)
    assert cluster.fail(failed) is not None
    [(where, deploy)] = cluster.launcher.commands(Deploy)
    assert (where, deploy.descriptor.key) == (te, failed._replace(attempt=1))
    assert cluster.clock.monotonic() == pytest.approx(3.0 + JOIN_S + 2.0)  # its devices free, then the restart delay
    assert failed not in cluster.state.freed_early  # nothing left behind under the old key


def test_devices_never_freed_restart_every_subtask(tmp_path: Path, monkeypatch: Any) -> None:
    _watched_gpus(monkeypatch)
    cluster = Cluster(tmp_path)
    assert cluster.fail(cluster.key(1, 0)) is None
    assert cluster.failover.why_full == (f"the devices of subtask count -> print (1/2) still held its processes' "
                                         f"memory {EXIT_WAIT_S:g} s after it exited")
    assert cluster.launcher.sent == []
