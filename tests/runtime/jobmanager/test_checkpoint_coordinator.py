"""The checkpoint coordinator alone (issue 26.8), as Flink's CheckpointCoordinatorTest drives
its coordinator: a manual clock, acks fed by the test, a real store on a temporary directory,
no process. The real-process behaviour is in tests/runtime/test_checkpointing.py."""

from __future__ import annotations

import pickle
import threading
from pathlib import Path
from typing import Any

import pytest

from accelflow import CheckpointError
from accelflow.runtime import (
    CheckpointAck, CheckpointCommitted, Command, ManualClock, NotifyCheckpointComplete, SubtaskKey,
    TriggerCheckpoint,
)
from accelflow.runtime.jobmanager._checkpoint_store import CheckpointStore
from accelflow.runtime.jobmanager._checkpoints import CheckpointCoordinator, SavepointRequest
from jm_parts import job


class Harness:
    """One job (a source subtask and a ``count`` subtask) and its coordinator at time 0."""

    def __init__(self, tmp_path: Path, **config: Any) -> None:
        self.clock = ManualClock()
        self.job = job(config={"execution.checkpointing.interval": 10, **config})
        self.sent: list[Command] = []
        self.store = CheckpointStore(str(tmp_path / "checkpoints"), "job-uid", clock=self.clock)
        self.coordinator = CheckpointCoordinator(self.job, lambda key, command: self.sent.append(command),
                                                 threading.RLock(), clock=self.clock, store=self.store)
        self.start_attempt()

    def start_attempt(self) -> None:
        self.keys = [SubtaskKey(self.job.id, self.job.attempt, chain.id, i)
                     for chain in self.job.graph.chains for i in range(chain.parallelism)]
        self.coordinator.start_attempt(self.keys)

    def tick_at(self, t: float, running: bool = True) -> list[int]:
        """Move the clock to ``t`` and tick; the checkpoints triggered then."""
        self.clock.advance(t - self.clock.monotonic())
        before = len(self.sent)
        self.coordinator.tick(running)
        return sorted({c.checkpoint_id for c in self.sent[before:] if isinstance(c, TriggerCheckpoint)})

    def ack(self, checkpoint_id: int, keys: list[SubtaskKey] | None = None) -> None:
        for key in self.keys if keys is None else keys:
            name = self.job.graph.chains[key.chain].head.name
            self.coordinator.on_ack(CheckpointAck(key, checkpoint_id, {name: pickle.dumps((name, checkpoint_id))}))

    def status(self, checkpoint_id: int) -> str:
        return next(r.status for r in self.job.checkpoints.history if r.id == checkpoint_id)

    def retained(self) -> list[int]:
        return [c.checkpoint_id for c in self.store.retained()]


@pytest.fixture
def harness(tmp_path: Path) -> Harness:
    return Harness(tmp_path)


def test_the_first_checkpoint_is_triggered_one_interval_after_the_start_at_the_sources_only(harness: Harness) -> None:
    assert harness.tick_at(9.9) == []
    assert harness.tick_at(10) == [1]
    source = harness.keys[0]
    assert [c for c in harness.sent if isinstance(c, TriggerCheckpoint)] == [TriggerCheckpoint(source, 1)]
    record = harness.job.checkpoints.history[-1]
    assert (record.status, record.trigger_time) == ("IN_PROGRESS", ManualClock.EPOCH + 10)


def test_nothing_is_triggered_before_every_subtask_runs(harness: Harness) -> None:
    assert harness.tick_at(50, running=False) == []
    assert harness.tick_at(50) == [1]


def test_checkpoints_are_triggered_every_interval_from_the_last_trigger_as_flinks(harness: Harness) -> None:
    """A checkpoint that takes 4 s of a 10 s interval does not push the next one to 24 s."""
    harness.tick_at(10)
    harness.clock.advance(4)
    harness.ack(1)
    assert harness.status(1) == "COMPLETED"
    assert harness.job.checkpoints.history[-1].duration_s == 4
    assert harness.tick_at(19.9) == []
    assert harness.tick_at(20) == [2]


def test_min_pause_holds_the_next_checkpoint_after_the_end_of_the_last(tmp_path: Path) -> None:
    harness = Harness(tmp_path, **{"execution.checkpointing.min-pause": 8})
    harness.tick_at(10)
    harness.clock.advance(5)
    harness.ack(1)  # ends at 15: the next one no sooner than 23, though the interval says 20
    assert harness.tick_at(22.9) == []
    assert harness.tick_at(23) == [2]


def test_a_checkpoint_not_complete_within_the_timeout_fails_and_its_late_acks_are_ignored(tmp_path: Path) -> None:
    harness = Harness(tmp_path, **{"execution.checkpointing.timeout": 30})
    harness.tick_at(10)
    harness.ack(1, harness.keys[:1])
    assert harness.tick_at(40) == [] and harness.status(1) == "IN_PROGRESS"
    assert harness.tick_at(40.5) == []  # expired on this tick: the next one on the next
    record = harness.job.checkpoints.history[-1]
    assert (record.status, record.failure) == ("FAILED", "it did not complete within 30 s")
    assert harness.job.checkpoints.failed == 1
    harness.ack(1)  # late: checkpoint 1 was given up
    assert harness.status(1) == "FAILED" and harness.retained() == []
    assert harness.tick_at(40.5) == [2]  # the interval passed long ago: at once, as Flink's queued trigger
    harness.ack(1)
    assert harness.status(2) == "IN_PROGRESS"  # acks of 1 do not count for 2
    harness.ack(2)
    assert harness.status(2) == "COMPLETED" and harness.retained() == [2]


def test_a_failed_attempt_declines_its_checkpoint_and_the_next_attempt_takes_the_next_id(harness: Harness) -> None:
    harness.tick_at(10)
    harness.clock.advance(1)
    harness.job.attempt = 1
    harness.start_attempt()
    assert harness.status(1) == "FAILED"
    assert harness.job.checkpoints.history[-1].failure == "the attempt it belonged to failed"
    assert harness.tick_at(20.9) == []  # a new attempt waits a whole interval
    assert harness.tick_at(21) == [2]
    harness.ack(2)
    assert harness.status(2) == "COMPLETED" and harness.retained() == [2]


def test_a_subtask_that_finishes_without_a_final_state_declines_the_pending_checkpoint(harness: Harness) -> None:
    harness.tick_at(10)
    harness.ack(1, harness.keys[:1])
    harness.coordinator.on_subtask_ended({harness.keys[1]})  # acked no final state
    harness.tick_at(11)
    record = harness.job.checkpoints.history[-1]
    assert record.status == "FAILED"
    assert record.failure == ("1 subtask(s) finished without a final state (only jobs with checkpointing "
                              "on keep one)")


def test_a_checkpoint_that_cannot_be_written_fails_and_the_next_one_completes(tmp_path: Path) -> None:
    blocker = tmp_path / "checkpoints"
    blocker.write_text("a file where the checkpoint directory should be")
    harness = Harness(tmp_path)
    harness.tick_at(10)
    harness.ack(1)
    record = harness.job.checkpoints.history[-1]
    assert record.status == "FAILED" and "writing it failed: CheckpointError" in (record.failure or "")
    blocker.unlink()
    assert harness.tick_at(20) == [2]
    harness.ack(2)
    assert harness.status(2) == "COMPLETED" and harness.retained() == [2]
    assert harness.coordinator.latest is not None and harness.coordinator.latest.timestamp == ManualClock.EPOCH + 20


def test_only_the_newest_num_retained_checkpoints_are_kept(tmp_path: Path) -> None:
    harness = Harness(tmp_path, **{"execution.checkpointing.num-retained": 2})
    for n in (1, 2, 3, 4):
        assert harness.tick_at(10 * n) == [n]
        harness.ack(n)
    assert harness.retained() == [3, 4]
    assert harness.coordinator.latest is not None and harness.coordinator.latest.checkpoint_id == 4
    assert harness.job.checkpoints.completed == 4


@pytest.mark.parametrize(("ended", "retention", "kept"), [
    ("FINISHED", "DELETE_ON_CANCELLATION", False),
    ("CANCELED", "DELETE_ON_CANCELLATION", False),
    ("CANCELED", "RETAIN_ON_CANCELLATION", True),
    ("FAILED", "DELETE_ON_CANCELLATION", True),
    ("FAILED", "NO_EXTERNALIZED_CHECKPOINTS", False),
])
def test_a_jobs_checkpoints_stay_or_go_when_it_ends_by_flinks_retention(
        tmp_path: Path, ended: str, retention: str, kept: bool) -> None:
    harness = Harness(tmp_path, **{"execution.checkpointing.externalized-checkpoint-retention": retention})
    harness.tick_at(10)
    harness.ack(1)
    harness.coordinator.job_ended(ended)
    assert harness.retained() == ([1] if kept else [])


def _savepoint(harness: Harness, *, stop: bool = False) -> SavepointRequest:
    request = SavepointRequest(str(harness.store.base_url) + "-savepoints", stop)
    harness.coordinator.requests.put(request)
    return request


def test_a_savepoint_is_triggered_at_once_and_is_not_a_retained_checkpoint(harness: Harness) -> None:
    request = _savepoint(harness)
    assert harness.tick_at(1) == [1]
    harness.ack(1)
    path = request.result.result(timeout=0)
    assert "-savepoints/savepoint-" in path
    assert harness.job.checkpoints.history[-1].savepoint and harness.retained() == []
    assert harness.coordinator.latest is None  # a restart restores no savepoint
    assert harness.tick_at(10.9) == [] and harness.tick_at(11) == [2]  # the interval counts from it


def test_a_savepoint_asked_for_during_a_checkpoint_waits_for_it(harness: Harness) -> None:
    harness.tick_at(10)
    request = _savepoint(harness)
    assert harness.tick_at(11) == []
    harness.ack(1)
    assert harness.tick_at(11) == [2] and not request.result.done()
    harness.ack(2)
    assert request.result.done() and harness.retained() == [1]


def test_stop_with_savepoint_ends_the_job_only_once_every_subtask_published(harness: Harness) -> None:
    request = _savepoint(harness, stop=True)
    harness.tick_at(1)
    harness.ack(1)
    notified = [c for c in harness.sent if isinstance(c, NotifyCheckpointComplete)]
    assert notified == [NotifyCheckpointComplete(key, 1, reply=True) for key in harness.keys]
    assert not request.result.done()
    assert harness.tick_at(100) == []  # nothing more is triggered while the job stops
    source, counter = harness.keys
    assert not harness.coordinator.on_committed(CheckpointCommitted(source, 7))  # another checkpoint's
    assert not harness.coordinator.on_committed(CheckpointCommitted(source, 1))
    assert harness.coordinator.on_committed(CheckpointCommitted(counter, 1))
    path = harness.coordinator.finish_stop()
    assert path is not None and request.result.result(timeout=0) == path


def test_a_savepoint_still_asked_for_when_the_job_ends_fails_naming_the_job(harness: Harness) -> None:
    request = _savepoint(harness)
    harness.coordinator.job_ended("CANCELED")
    with pytest.raises(CheckpointError, match=r"job-1 ended \(CANCELED\) before its savepoint"):
        request.result.result(timeout=0)


def test_the_final_checkpoint_completes_when_every_subtask_ended_its_input(harness: Harness) -> None:
    for key in harness.keys:
        harness.coordinator.on_ack(CheckpointAck(key, 1, {"x": b"final"}, final=True))
        harness.coordinator.on_subtask_ended(set())
    assert harness.status(1) == "COMPLETED" and harness.retained() == [1]
    assert [c for c in harness.sent if isinstance(c, NotifyCheckpointComplete)] == [
        NotifyCheckpointComplete(key, 1, final=True) for key in harness.keys]
    assert harness.tick_at(100) == []  # no source is live: nothing to trigger


def test_a_periodic_checkpoint_with_the_id_of_a_final_state_is_not_the_final_one(harness: Harness) -> None:
    # the source ends before checkpoint 1's trigger reaches it: its final state has id 1 too
    source, count = harness.keys
    assert harness.tick_at(10) == [1]
    harness.coordinator.on_ack(CheckpointAck(source, 1, {"x": b"final"}, final=True))
    harness.coordinator.on_subtask_ended(set())
    harness.ack(1, [count])
    assert harness.status(1) == "COMPLETED"
    # the source must not finish on it (it would leave the job unable to roll back in place)
    assert [c for c in harness.sent if isinstance(c, NotifyCheckpointComplete)] == [
        NotifyCheckpointComplete(key, 1) for key in harness.keys]
    harness.coordinator.on_ack(CheckpointAck(count, 2, {"x": b"final"}, final=True))
    harness.coordinator.on_subtask_ended(set())
    assert [c for c in harness.sent if isinstance(c, NotifyCheckpointComplete) and c.final] == [
        NotifyCheckpointComplete(key, 2, final=True) for key in harness.keys]
