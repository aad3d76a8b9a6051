"""Failover of a running attempt (issue 28, ``docs/failover.md``).

When subtasks fail (one raised, its process exited or hung; a TaskExecutor holding several of
them was lost; a hardware Xid failed every subtask on a device; several failed in the same
detection window), the JobManager confines the failure where it can (:func:`why_not_in_place`
says where not: at least one subtask must survive). Then, instead of cancelling every subtask
and deploying them all again (the full restart, as Flink's), it

1. takes one restart from the restart strategy, as a full restart does;
2. waits for the failed subtasks' exits (a subtask failing meanwhile joins the failure; the
   slots and devices of those that stay are reused as they are);
3. starts a new attempt whose subtasks keep their processes: each survivor's ``SubtaskKey``
   gets the new attempt number, with the slot and device shares moved over unchanged (nothing
   is placed again), so every per-attempt rule (events of old attempts ignored, channel names,
   checkpoints' acks) holds as after a full restart;
4. sends every survivor one :class:`Rollback` to the latest completed checkpoint, or to the
   job's start when none completed (checkpointing off, or not yet: the sources rewind to their
   first splits, the operators restore nothing); they restore it inside their processes,
   without ``open()``, see ``runtime/subtask/_epochs.py``;
5. hands the failed indexes to ready standby subtasks first (``_standby.py``), and deploys a
   replacement for each other failed subtask after the restart delay, on its TaskExecutor and
   devices, or where placement finds room (all of them or none) when that TaskExecutor was
   lost or one of its devices was quarantined (a hardware Xid, ``docs/gpu.md``). When they do
   not all fit, the job restarts every subtask and the log says why.

A failure while an attempt still rolls back (a survivor fails restoring, the replacement
fails in ``open()``) is handled by the full restart. Each failure is recorded
(:class:`FailoverRecord`: REST, UI, ``/metrics``) with the time until every subtask runs again.
"""

from __future__ import annotations

import logging
from dataclasses import dataclass
from typing import Any

from accelflow._errors import AllocationError
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.runtime import (
    Clock, Rollback, SubtaskExited, SubtaskFailed, SubtaskFinished, SubtaskKey,
)
from accelflow.runtime.jobmanager._checkpoints import CheckpointCoordinator
from accelflow.runtime.jobmanager._collected import CollectedResults
from accelflow.runtime.jobmanager._deployment import EXIT_WAIT_S, Deployer, devices_of
from accelflow.runtime.jobmanager._events import POLL_S, EventPump, TaskExecutorDied
from accelflow.runtime.jobmanager._job_sinks import FinalAcks
from accelflow.runtime.jobmanager._jobs import SUBTASK_ENDED, FailoverRecord, Job, SubtaskState
from accelflow.runtime.jobmanager._plan import requester_name, restored_of
from accelflow.runtime.jobmanager._repeats import RepeatedFailures
from accelflow.runtime.jobmanager._root_cause import HeldFailures, first_line
from accelflow.runtime.jobmanager._standby import StandbyPool
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.runtime.launchers import Launcher
from accelflow.scheduling import SlotAssignment, SlotRequest, SubtaskRequest

_log = logging.getLogger("accelflow.runtime")
#: how long after the failed subtasks have exited (and their devices are free) a failure of
#: another subtask still joins their rollback (one detection window), in seconds
JOIN_S = 0.1


class RestartBudget:
    """The restarts a job has left (``restart-strategy``); a rollback in place takes one too."""

    def __init__(self, left: int) -> None:
        self.left = left

    def take(self) -> bool:
        """Take one restart; False when none is left."""
        if self.left <= 0:
            return False
        self.left -= 1
        return True


@dataclass
class Failure:
    """What failed in an attempt: the subtasks lost, and the TaskExecutor if one was lost."""

    keys: list[SubtaskKey]
    taskexecutor: str | None
    seen: float  # clock.monotonic()


class Attempt:
    """What one attempt (one epoch of the job's data flow) has heard so far."""

    def __init__(self, keys: list[SubtaskKey], results: CollectedResults, *, recovery: FailoverRecord | None = None,
                 failed_at: float = 0.0, first_record: float | None = None) -> None:
        self.keys = list(keys)
        self.current = set(keys)  # an event of a key not in it is an earlier attempt's
        self.pending = set(keys)
        self.finished: set[SubtaskKey] = set()
        self.exited: set[SubtaskKey] = set()
        #: what ``execute_and_collect`` received, over every attempt of the job
        self.results = results
        self.finals: FinalAcks = {}
        self.first_record = first_record
        self.failure: Failure | None = None
        #: the failover this attempt recovers from, until every subtask runs
        self.recovery = recovery
        self.failed_at = failed_at
        #: failures that only say a neighbour closed its data channel, until its own comes
        self.held = HeldFailures()

    def fail(self, keys: list[SubtaskKey], error: BaseException, now: float,
             taskexecutor: str | None = None) -> BaseException:
        """Record that ``keys`` failed with ``error`` (their TaskExecutor, if it was lost): the
        attempt's :attr:`failure`, with the held failures as its consequences; the error to
        raise (see ``_root_cause``)."""
        keys, error = self.held.root(keys, error)
        self.failure = Failure(keys, taskexecutor, now)
        return error


def in_place_off(config: Configuration, restarts: int) -> str | None:
    """Why no failure of a job is rolled back in place, or None; ``restarts``: how many the
    restart strategy allows (none: a failure fails the job, nothing is rolled back).

    Without checkpointing a job rolls back in place too, to its start (no checkpoint has
    completed, as when a checkpointed job fails before its first one): the survivors rewind
    their sources and reset their operators, in their processes.
    """
    if not config.get(k.FAILOVER_IN_PLACE):
        return "execution.failover.in-place is false"
    if restarts <= 0:
        return "the restart strategy allows no restart"
    return None


def why_not_in_place(job: Job, attempt: Attempt) -> str | None:
    """Why ``attempt``'s failure cannot be confined to the subtasks that failed, or None.

    Several subtasks may fail at once (a TaskExecutor lost with three of them, two subtasks on
    a faulted device): they are confined as long as one subtask of the job survives.

    Example: a TaskExecutor lost with every subtask of the job gives ``"taskexecutor-1 was lost
    with every subtask of the job (4)"``; one lost with 2 of 8 subtasks gives None.
    """
    failure = attempt.failure
    if job.in_place_off is not None:
        return job.in_place_off
    if failure is None or not failure.keys:
        return "the failure is the JobManager's own, not a subtask's"
    if attempt.recovery is not None:
        return "it failed while the job was still rolling back"
    if not set(attempt.keys) - set(failure.keys):
        if failure.taskexecutor is not None:
            return f"{failure.taskexecutor} was lost with every subtask of the job ({len(failure.keys)})"
        return f"every subtask of the job failed ({len(failure.keys)}): none survives to roll back"
    if (attempt.exited | attempt.finished) - set(failure.keys):
        return "other subtasks had finished or exited already"
    return None


class Failover:
    """The failovers of one job (see the module's description).

    Args:
        job, coordinator: the job and its checkpoints (the latest is rolled back to).
        state, deployer, pump, launcher: the JobManager's parts.
        clock: the restart delay and the waits (tests: ``ManualClock``).
        budget: the restarts left.
    """

    def __init__(self, job: Job, coordinator: CheckpointCoordinator, state: ClusterState, deployer: Deployer,
                 pump: EventPump, launcher: Launcher, clock: Clock, budget: RestartBudget) -> None:
        self.job, self.coordinator, self.state = job, coordinator, state
        self.deployer, self.pump, self.launcher, self.clock = deployer, pump, launcher, clock
        self.budget = budget
        self.repeats = RepeatedFailures(job.id, budget.left, clock)  # a repeating failure is shown once
        self.pool = StandbyPool(job, state, deployer, launcher, clock)
        #: why the last failure could not be confined (the full restart says so), and what failed
        self.why_full: str | None = None
        self.failure: Failure | None = None

    # -- in place --------------------------------------------------------------------------------
    def roll_back(self, attempt: Attempt, error: BaseException) -> Attempt | None:
        """Confine ``attempt``'s failure: the attempt that carries on, or None (then
        :attr:`why_full` says why not, and the caller aborts and restarts every subtask)."""
        why = why_not_in_place(self.job, attempt)
        if why is None and self.budget.left <= 0:
            return None  # the job fails: no restart is left
        failure = attempt.failure
        if why is None:
            assert failure is not None
            why = self._await_exit(attempt, failure)
        placements: dict[SubtaskKey, SlotAssignment] = {}
        if why is None:
            assert failure is not None
            placements, why = self._place_moved(failure)
        if why is not None:
            self.why_full = why
            return None
        assert failure is not None and self.budget.take()
        self.repeats.note(error)
        return self._roll_back(attempt, failure, placements, first_line(error))

    def _await_exit(self, attempt: Attempt, failure: Failure) -> str | None:
        """Wait (bounded) until the failed subtasks' processes are gone, and, for those whose
        replacement starts on their devices, what they left computing there too (their
        TaskExecutor's ``DevicesFree``, ``docs/gpu.md``); why not, or None. A subtask that fails
        meanwhile, or up to :data:`JOIN_S` after, joins ``failure`` (one detection window: two
        processes killed together exit a few milliseconds apart); other events of the attempt
        are dropped: its epoch is over."""
        deadline = self.clock.monotonic() + EXIT_WAIT_S
        joined_until: float | None = None  # then the failed subtasks have all settled
        while True:
            now = self.clock.monotonic()
            if waiting := self._unsettled(attempt, failure):
                joined_until = None
                if now >= deadline:
                    if waiting[0] in attempt.exited:
                        return (f"the devices of subtask {self._name(waiting[0])} still held its processes' "
                                f"memory {EXIT_WAIT_S:g} s after it exited")
                    return f"subtask {self._name(waiting[0])} did not exit within {EXIT_WAIT_S:g} s"
            elif joined_until is None:
                joined_until = now + JOIN_S
            event = self.pump.next_event(self.job.events, POLL_S if joined_until is None else max(0.0, joined_until - now))
            if event is None and joined_until is not None and self.clock.monotonic() >= joined_until:
                event = self.pump.next_event(self.job.events, 0)  # one routed meanwhile joins too
                if event is None:
                    return None
            if event is None or self.pool.on_any(event):
                continue
            te_id, msg = event
            if isinstance(msg, TaskExecutorDied):
                if any(self.state.subtasks[other].taskexecutor == te_id for other in attempt.pending):
                    return f"{te_id} was lost too"
                continue
            other = getattr(msg, "key", None)
            if other not in attempt.current:
                continue
            if isinstance(msg, SubtaskExited):
                attempt.exited.add(other)
            if other in failure.keys:
                continue
            if isinstance(msg, SubtaskFinished):
                return f"subtask {self._name(other)} ended too"
            if isinstance(msg, SubtaskFailed | SubtaskExited):
                with self.state.lock:
                    self.state.subtasks[other].state = "FAILED"
                failure.keys.append(other)
                if (why := why_not_in_place(self.job, attempt)) is not None:
                    return why
        return None

    def _unsettled(self, attempt: Attempt, failure: Failure) -> list[SubtaskKey]:
        """The failed subtasks still waited for: not exited (those of a lost TaskExecutor
        aside), or exited and to be replaced on devices not said free yet."""
        stay = set(self._stay(failure))
        return [key for key in failure.keys
                if (failure.taskexecutor is None or self.state.subtasks[key].taskexecutor != failure.taskexecutor)
                and (key not in attempt.exited or key in stay and self.state.devices_unsettled(key))]

    def _stay(self, failure: Failure) -> list[SubtaskKey]:
        """The failed subtasks no ready standby replaces (in order, per chain, as
        :meth:`_place_moved` and :meth:`_roll_back` hand them out)."""
        spare = {chain: self.pool.ready_count(chain) for chain in {key.chain for key in failure.keys}}
        stay = []
        for key in failure.keys:
            if spare[key.chain]:
                spare[key.chain] -= 1
            else:
                stay.append(key)
        return stay

    def _place_moved(self, failure: Failure) -> tuple[dict[SubtaskKey, SlotAssignment], str | None]:
        """Where the failed subtasks that move go: those whose TaskExecutor was lost or that
        held a quarantined device, less those that ready standbys replace (the others stay
        where they were). Subtasks of one index share a slot; all are placed or none."""
        quarantined = self.state.ledger.quarantined()
        moving: dict[int, list[SubtaskKey]] = {}
        for key in self._stay(failure):
            if self.state.subtasks[key].taskexecutor not in self.state.taskexecutors or \
                    any(d in quarantined for d in self.state.ledger.held_by(key)):
                moving.setdefault(key.index, []).append(key)
        if not moving:
            return {}, None
        requests = [SlotRequest(tuple(
            SubtaskRequest(key._replace(attempt=self.job.attempt + 1), requester_name(chain, key.index), chain.resources)
            for key in keys for chain in [self.job.graph.chains[key.chain]])) for keys in moving.values()]
        try:
            assignments = self.state.place(requests, self.job.config.get(k.PLACEMENT_POLICY))  # type: ignore[arg-type]
        except AllocationError as exc:
            names = ", ".join(self._name(key) for keys in moving.values() for key in keys)
            return {}, f"no TaskExecutor has room for {names}: {first_line(exc)}"
        return {key: assignment for keys, assignment in zip(moving.values(), assignments, strict=True)
                for key in keys}, None

    def _roll_back(self, attempt: Attempt, failure: Failure, placements: dict[SubtaskKey, SlotAssignment],
                   cause: str) -> Attempt:
        job, state = self.job, self.state
        failed = list(failure.keys)
        restored, restored_id = self.coordinator.restored_states()
        with state.lock:
            old = job.attempt
            job.attempt += 1
            if job.checkpoints.restored is not None:
                job.checkpoints.restored["attempt"] = job.attempt
            new = {key: key._replace(attempt=job.attempt) for key in attempt.keys}
            record = FailoverRecord(old, "in-place", cause, [self._name(key) for key in failed])
            standbys = {key: standby for key in failed if (standby := self.pool.take(key.chain)) is not None}
            self._move(new, failed, placements, record, old, set(standbys))
            for key, standby in standbys.items():
                self._activate(standby, key, new, record)
            job.failovers.append(record)
        job.restore_from, job.restore_id = restored, restored_id
        self.coordinator.start_attempt(list(new.values()))
        for old_key, key in new.items():
            if old_key not in failed:
                self._send_rollback(old_key, key)
        self.repeats.warning("%s: rolled back in place: %d survivor%s, replaced %s%s (attempt %d, from %s): %s",
                     job.id, len(new) - len(failed), "" if len(new) - len(failed) == 1 else "s",
                     ", ".join(self._name(key) for key in failed),
                     f" (by standby {record.standby})" if standbys else "",
                     job.attempt + 1, f"checkpoint {restored_id}" if restored_id else "the start", cause,
                     attempt=job.attempt + 1)
        for key, standby in standbys.items():
            self._send_rollback(standby, new[key])
        if standbys:
            self.pool.fill()  # more standbys, opened while the job runs on
        if rest := [key for key in failed if key not in standbys]:
            self.clock.sleep(job.config.get(k.RESTART_DELAY))
            for key in rest:
                self.deployer.deploy_one(job, new[key])
        return Attempt(list(new.values()), attempt.results, recovery=record, failed_at=failure.seen,
                       first_record=attempt.first_record)

    def _move(self, new: dict[SubtaskKey, SubtaskKey], failed: list[SubtaskKey],
              placements: dict[SubtaskKey, SlotAssignment], record: FailoverRecord, old: int,
              by_standby: set[SubtaskKey]) -> None:
        """The new attempt's records: each subtask keeps its slot and shares under its new
        key; a failed one too, unless it moves (``placements``: its TaskExecutor was lost or
        a device of it quarantined) or a standby takes its place (``by_standby``: its shares
        go back under its own key once its TaskExecutor says its process left the devices,
        ``DevicesFree``)."""
        state, job = self.state, self.job
        state.slots[(job.id, job.attempt)] = state.slots.pop((job.id, old), [])
        taken: list[SlotAssignment] = []
        for old_key, key in new.items():
            st = state.subtasks[old_key]
            te, devices = st.taskexecutor, st.devices
            placement = placements.get(old_key)
            if old_key in failed and (placement is not None or old_key in by_standby):
                state.release_devices(old_key)
                if placement is not None:
                    if te is not None and self._own_slot(old_key, te, new, moved=placements):  # the slot goes back
                        state.release_slot(job.id, job.attempt, te)
                    if not any(placement is t for t in taken):  # subtasks of one index share it
                        state.take(job.id, job.attempt, [placement], more=True)
                        taken.append(placement)
                    te, devices = placement.taskexecutor, devices_of(placement, key)
            else:
                state.rekey(old_key, key)
            replaced = old_key in failed
            state.subtasks[key] = SubtaskState(key, st.name, te, devices,
                                               recovery="replaced" if replaced else "rolled back")
            (record.replaced if replaced else record.rolled_back).append(st.name)
            if st.state not in SUBTASK_ENDED:
                st.state = "FAILED" if replaced else "CANCELED"

    def _activate(self, standby: SubtaskKey, failed: SubtaskKey, new: dict[SubtaskKey, SubtaskKey],
                  record: FailoverRecord) -> None:
        """``standby`` takes the failed subtask's place (under ``lock``): it holds its slot and
        shares under the new key; what the failed subtask held went back (``_move``)."""
        state, key = self.state, new[failed]
        replacement = state.subtasks[key]
        te = replacement.taskexecutor
        if te is not None and self._own_slot(key, te, new.values()):
            state.release_slot(self.job.id, self.job.attempt, te)  # the failed one's slot was its own
        ready = state.subtasks.pop(standby)
        state.rekey(standby, key)
        replacement.taskexecutor, replacement.devices, replacement.recovery = ready.taskexecutor, ready.devices, "standby"
        record.standby = ", ".join(filter(None, [record.standby, ready.name]))

    def _own_slot(self, key: SubtaskKey, te: str, keys: Any, moved: Any = ()) -> bool:
        """Whether ``key`` is the last on ``te`` of the subtasks sharing its slot (those of
        its index) that leave it: the others stay (not in ``moved``) or moved before it."""
        others = [o for o in keys if o != key and o.index == key.index and self.state.subtasks[o].taskexecutor == te]
        if any(o not in moved for o in others):
            return False
        order = list(keys)
        return all(order.index(o) < order.index(key) for o in others)

    def _send_rollback(self, old_key: SubtaskKey, key: SubtaskKey) -> None:
        job, deployer = self.job, self.deployer
        graph = job.graph
        chain = graph.chains[key.chain]
        te = self.state.subtasks[key].taskexecutor
        assert te is not None
        self.launcher.handle(te).send(Rollback(
            old_key, key, job.restore_id, restored_of(job, chain), job.splits.get((chain.id, key.index)),
            deployer.address(job, chain.id, key.index) if chain.head.source is None else None,
            graph.upstream_senders(chain, key.index),
            tuple(tuple(deployer.address(job, out.id, i) for i in range(out.parallelism))
                  for out, _ in graph.outputs_of(chain)),
        ))

    # -- the record ------------------------------------------------------------------------------
    def full_restart(self, attempt_failed: int, error: BaseException) -> tuple[FailoverRecord, float]:
        """Record (and log) a full restart after ``error``: what the next attempt recovers
        from, and since when (``clock.monotonic()``)."""
        why = self.why_full or "the failure is the JobManager's own, not a subtask's"
        failure, self.why_full, self.failure = self.failure, None, None
        record = FailoverRecord(attempt_failed, "full", first_line(error),
                                [self._name(key) for key in failure.keys] if failure else [], why_full=why)
        with self.state.lock:
            self.job.failovers.append(record)
        self.repeats.warning("%s failed, restarting (attempt %d): full restart: %s: %s", self.job.id,
                             self.job.attempt + 1, why, first_line(error), attempt=self.job.attempt + 1, error=error)
        return record, failure.seen if failure else self.clock.monotonic()

    def recovered(self, attempt: Attempt) -> None:
        """Note the end of ``attempt``'s recovery once every subtask of it runs."""
        record = attempt.recovery
        if record is None or not all(self.state.subtasks[key].state in ("RUNNING", "FINISHED")
                                     for key in attempt.keys):
            return
        attempt.recovery = None
        with self.state.lock:
            record.recovery_s = self.clock.monotonic() - attempt.failed_at
        _log.info("%s: recovered in %.2f s (%s)", self.job.id, record.recovery_s, record.path)

    def _name(self, key: SubtaskKey) -> str:
        st = self.state.subtasks.get(key)
        return st.name if st is not None else str(key)
