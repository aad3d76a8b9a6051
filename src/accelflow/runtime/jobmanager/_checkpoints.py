"""The checkpoint coordinator: Flink's asynchronous barrier snapshots, seen from the JobManager.

Every ``execution.checkpointing.interval`` (counted from the last trigger, as Flink's periodic
trigger, and no sooner than ``min-pause`` after the last checkpoint ended) it triggers
checkpoint *n* at the source subtasks (:class:`TriggerCheckpoint`); barriers flow with the
records; every subtask acks its state (:class:`CheckpointAck`); with every ack in, the
coordinator writes the checkpoint (its ``_metadata`` last, see :mod:`._checkpoint_store`),
tells every subtask it is complete (:class:`NotifyCheckpointComplete`: sinks publish), and
drops the oldest beyond ``num-retained``. One checkpoint is in flight at a time; one that
does not complete within ``execution.checkpointing.timeout`` is given up.

At the end of a bounded input every subtask acks a *final* state, which stands for it in
every later checkpoint; when all have, that is the job's final checkpoint, and the sinks that
publish on commit are told to publish (see ``docs/checkpoints.md``). Checkpoints go on after
every source subtask has read its input (Flink's FLIP-147): they are then triggered at the
*roots*, the subtasks still running whose upstream subtasks have all ended (see
``runtime/subtask/_in_flight.py``). The coordinator lives as long as its job, across attempts.
"""

from __future__ import annotations

import logging
import pickle
import queue
import uuid
from collections.abc import Callable, Iterable
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from accelflow._errors import CheckpointError
from accelflow.config import keys as k
from accelflow.runtime import (
    SYSTEM_CLOCK, CheckpointAck, CheckpointCommitted, Clock, Command, NotifyCheckpointComplete,
    SubtaskKey, TriggerCheckpoint,
)
from accelflow.dataflow import JobGraph, Source, rescale_targets
from accelflow.runtime.jobmanager._checkpoint_signing import CheckpointSigning
from accelflow.runtime.jobmanager._checkpoint_store import (
    CheckpointStore, CompletedCheckpoint, OperatorState, RestoredCheckpoint, load_checkpoint,
    match_operators,
)
from accelflow.runtime.jobmanager._jobs import CheckpointRecord, Job, checkpoints_retained
from accelflow.runtime.jobmanager._plan import state_names

_log = logging.getLogger("accelflow.runtime")
_NO_STATE = pickle.dumps(None)
#: completed and failed checkpoints kept in the job's history (REST, UI)
HISTORY = 20


@dataclass
class SavepointRequest:
    """A savepoint asked for from the CLI or REST; ``stop``: end the job after it."""

    target: str | None
    stop: bool
    result: Future[str] = field(default_factory=Future)


@dataclass
class _Pending:
    record: CheckpointRecord
    started: float  # clock.monotonic()
    acks: dict[SubtaskKey, dict[str, bytes]] = field(default_factory=dict)  # of live subtasks
    savepoint: SavepointRequest | None = None
    targets: tuple[SubtaskKey, ...] = ()  # the subtasks it was triggered at


class CheckpointCoordinator:
    """The checkpoints of one job, across its attempts.

    Args:
        job: the job; its config gives interval, timeout, min-pause, retention...
        send: sends a command to the TaskExecutor of a subtask.
        lock: the JobManager's; the job's records change only under it (REST reads them).
        clock: what interval, min-pause and timeout are measured with (tests: ``ManualClock``).
        store: where checkpoints go; by default one under ``execution.checkpointing.dir``,
            made at the first checkpoint (fsspec is slow to import).

    tests/runtime/jobmanager/test_checkpoint_coordinator.py drives one with a ``ManualClock``.
    """

    def __init__(self, job: Job, send: Callable[[SubtaskKey, Command], None], lock: Any, *,
                 clock: Clock = SYSTEM_CLOCK, store: CheckpointStore | None = None) -> None:
        self.job = job
        self.send = send
        self.lock = lock
        self.clock = clock
        config = job.config
        self.interval = config.get_optional(k.CHECKPOINT_INTERVAL)
        self.timeout = config.get(k.CHECKPOINT_TIMEOUT)
        self.min_pause = config.get(k.CHECKPOINT_MIN_PAUSE)
        self.retained = config.get(k.CHECKPOINTS_RETAINED)
        self.retention = config.get(k.CHECKPOINT_RETENTION)
        self.savepoint_dir = config.get_optional(k.SAVEPOINT_DIR)
        self.trust = CheckpointSigning.from_config(config)  # of the checkpoint it starts from
        self.signing = self.trust.verifying()  # of the checkpoints it writes and restarts from
        self._store = store
        self._store_used = False  # once used: job.checkpoint_path names it, job_ended may discard it
        self.requests: queue.Queue[SavepointRequest] = queue.Queue()
        self.next_id = 1
        self.latest: CompletedCheckpoint | None = None
        self.pending: _Pending | None = None
        self.keys: list[SubtaskKey] = []
        self.sources: list[SubtaskKey] = []
        self.upstream: dict[SubtaskKey, list[SubtaskKey]] = {}  # of every subtask with inputs
        self.finals: dict[SubtaskKey, dict[str, bytes]] = {}  # of subtasks that ended their input
        self.finished: set[SubtaskKey] = set()
        self.final_done = False
        #: when the last checkpoint was triggered (the interval counts from it) and ended (the pause)
        self.last_trigger = self.last_end = clock.monotonic()
        self.stopping: tuple[int, set[SubtaskKey], SavepointRequest] | None = None
        #: the checkpoint the next attempt restores from (``-s``, then the latest completed)
        self.restore: RestoredCheckpoint | None = self._initial_restore()
        if self.enabled or self.restore is not None:
            _warn_about_replaying_sources(job)

    @property
    def enabled(self) -> bool:
        return self.interval is not None

    @property
    def store(self) -> CheckpointStore:
        if self._store is None:
            config = self.job.config
            self._store = CheckpointStore(config.get_optional(k.CHECKPOINT_DIR), uuid.uuid4().hex,
                                          signing=self.signing, permissions=config.get(k.CHECKPOINT_PERMISSIONS),
                                          clock=self.clock)
        if not self._store_used:
            self._store_used = True
            with self.lock:
                self.job.checkpoint_path = self._store.job_path
        return self._store

    def _initial_restore(self) -> RestoredCheckpoint | None:
        path = self.job.config.get_optional(k.STATE_RECOVERY_PATH)
        if path is None:
            return None
        restored = load_checkpoint(path, self.trust)
        self.next_id = restored.checkpoint_id + 1
        if restored.job_name != self.job.name:
            _log.warning("%s (%s) restores %s, a checkpoint of another job (%r): check that this is the "
                         "checkpoint you meant, as its state (sources' positions, sinks' pending output) "
                         "is that job's", self.job.id, self.job.name, restored.path, restored.job_name)
        return restored

    # -- attempts ------------------------------------------------------------------------------
    def restored_states(self) -> tuple[dict[str, list[bytes]] | None, int]:
        """What the next attempt's subtasks restore: per operator, every subtask's state;
        and that checkpoint's id (0 for none).

        Raises:
            CheckpointError: state of operators this job does not have (naming them).
        """
        if self.latest is not None and (self.restore is None or self.restore.path != self.latest.path):
            self.restore = load_checkpoint(self.latest.path, self.signing)
        if self.restore is None:
            return None, 0
        kinds = {name: kind for chain in self.job.graph.chains for name, kind in state_names(chain)}
        matched = match_operators(self.restore, kinds, self.job.config.get(k.ALLOW_NON_RESTORED_STATE))
        with_state = {name: list(op.subtask_states) for name, op in matched.items()}
        with self.lock:
            self.job.checkpoints.restored = {
                "id": self.restore.checkpoint_id, "path": self.restore.path,
                "time": self.clock.time(), "attempt": self.job.attempt,
            }
        _log.info("%s restores checkpoint %d from %s", self.job.id, self.restore.checkpoint_id,
                  self.restore.path)
        return with_state, self.restore.checkpoint_id

    def start_attempt(self, keys: list[SubtaskKey]) -> None:
        self.keys = list(keys)
        graph = self.job.graph
        self.sources = [key for key in keys if graph.chains[key.chain].head.source is not None]
        self.upstream = upstream_of(graph, keys)
        self.finals = {}
        self.finished = set()
        self.final_done = False
        if self.pending is not None:
            self._fail(self.pending, "the attempt it belonged to failed")
        self.last_trigger = self.last_end = self.clock.monotonic()

    # -- events --------------------------------------------------------------------------------
    def tick(self, running: bool) -> None:
        """Trigger, time out or stop; ``running``: every subtask of the attempt has started
        (subtasks that ended their input take part with their final state, as Flink's
        checkpoints after tasks finished)."""
        now = self.clock.monotonic()
        pending = self.pending
        if pending is not None:
            if now - pending.started > self.timeout:
                self._fail(pending, f"it did not complete within {self.timeout:g} s")
            elif stateless := [k for k in self.finished if k not in self.finals and k not in pending.acks]:
                self._fail(pending, f"{len(stateless)} subtask(s) finished without a final state "
                                    "(only jobs with checkpointing on keep one)")
            elif self._stuck(pending, now):
                self._fail(pending, "its barriers wait behind every record of the ended sources: the next "
                                    "checkpoint starts after them (FLIP-147)", quiet=True)
            return
        targets = [key for key in self.sources if key not in self.finals] or self._roots()
        if not running or not targets or self.final_done or self.stopping is not None:
            return
        request: SavepointRequest | None = None
        try:
            request = self.requests.get_nowait()
        except queue.Empty:
            if not self._due(now):
                return
        self._trigger(request, targets)

    def _stuck(self, pending: _Pending, now: float) -> bool:
        """Whether ``pending`` (a periodic checkpoint, an interval old) was triggered at
        subtasks that have all ended their input since: its barriers are behind everything
        they sent, so a slow stage after them would hold it until the job's end, while a
        checkpoint triggered at the roots (:meth:`_roots`) completes at once."""
        return (pending.savepoint is None and self.interval is not None and now - pending.started >= self.interval
                and bool(pending.targets) and all(k in self.finals for k in pending.targets)
                and any(k not in pending.acks for k in self._roots()))

    def _roots(self) -> list[SubtaskKey]:
        """The subtasks still running whose upstream subtasks have all ended their input: where
        checkpoints start once every source has ended (each reads what its ended inputs hold
        into its checkpoint, see ``runtime/subtask/_in_flight.py``)."""
        return [key for key, ups in self.upstream.items()
                if key not in self.finals and all(up in self.finals for up in ups)]

    def _due(self, now: float) -> bool:
        """Whether the periodic checkpoint is due: an interval after the last trigger (one in
        flight delays it, as Flink's ``max-concurrent-checkpoints: 1``) and ``min-pause``
        after the last checkpoint ended."""
        return (self.interval is not None and now - self.last_trigger >= self.interval
                and now - self.last_end >= self.min_pause)

    def _trigger(self, savepoint: SavepointRequest | None, sources: list[SubtaskKey]) -> None:
        n = self.next_id
        self.next_id += 1
        record = CheckpointRecord(n, "IN_PROGRESS", self.clock.time(), savepoint=savepoint is not None)
        self.last_trigger = self.clock.monotonic()
        self.pending = _Pending(record, self.last_trigger, savepoint=savepoint, targets=tuple(sources))
        self._remember(record)
        for key in sources:
            self.send(key, TriggerCheckpoint(key, n))

    def on_ack(self, ack: CheckpointAck) -> None:
        if ack.final:
            self.finals[ack.key] = ack.states
        else:
            pending = self.pending
            if pending is None or ack.checkpoint_id != pending.record.id:
                return  # of a checkpoint given up
            pending.acks[ack.key] = ack.states
        self._complete_if_acked()

    def _complete_if_acked(self) -> None:
        """Complete the pending checkpoint once every subtask has acked it, a subtask that
        ended its input with its final state (everything upstream of it has ended too, so
        that state covers every record before the barrier)."""
        pending = self.pending
        if pending is None or not all(k in pending.acks or k in self.finals for k in self.keys):
            return
        self.pending = None
        self._complete(pending, {**self.finals, **pending.acks})

    def on_committed(self, msg: CheckpointCommitted) -> bool:
        """A subtask published a stop-with-savepoint's checkpoint; True once all have."""
        if self.stopping is None or msg.checkpoint_id != self.stopping[0]:
            return False
        self.stopping[1].discard(msg.key)
        return not self.stopping[1]

    def on_subtask_ended(self, finished: set[SubtaskKey]) -> None:
        """The job's final checkpoint completes once every subtask has ended its input (a
        subtask that acks no final state, the checkpointing off, has finished)."""
        self.finished = finished
        if self.final_done or not self.finals:
            return
        if not all(key in self.finals or key in finished for key in self.keys):
            return
        self.final_done = True
        n = self.next_id
        self.next_id += 1
        if self.enabled and len(self.finals) == len(self.keys):
            record = CheckpointRecord(n, "IN_PROGRESS", self.clock.time())
            self._remember(record)
            self._complete(_Pending(record, self.clock.monotonic()), dict(self.finals), notify=False)
        for key in self.finals:
            self.send(key, NotifyCheckpointComplete(key, n, final=True))

    # -- completion ----------------------------------------------------------------------------
    def _complete(self, pending: _Pending, acks: dict[SubtaskKey, dict[str, bytes]],
                  notify: bool = True) -> None:
        record = pending.record
        request = pending.savepoint
        try:
            completed = self.store.write(
                record.id, self.job.name, self._operator_states(acks),
                savepoint_dir=(request.target or self.savepoint_dir) if request else None,
            )
        except Exception as exc:
            self._fail(pending, f"writing it failed: {type(exc).__name__}: {exc}")
            return
        with self.lock:
            record.status, record.path, record.size = "COMPLETED", completed.path, completed.size
            record.duration_s = self.clock.monotonic() - pending.started
            self.job.checkpoints.completed += 1
        self.last_end = self.clock.monotonic()
        if not completed.is_savepoint:
            self.latest = completed
            self.store.prune(self.retained)
        if notify:
            stop = request is not None and request.stop
            for key in self.keys:
                self.send(key, NotifyCheckpointComplete(key, record.id, reply=stop))
            if stop:
                assert request is not None
                self.stopping = (record.id, set(self.keys), request)
        if request is not None and not request.stop:
            request.result.set_result(completed.path)

    def _operator_states(self, acks: dict[SubtaskKey, dict[str, bytes]]) -> list[OperatorState]:
        graph = self.job.graph
        out = []
        for chain in graph.chains:
            keys = [SubtaskKey(self.job.id, self.job.attempt, chain.id, i) for i in range(chain.parallelism)]
            for name, kind in state_names(chain):
                blobs = [acks.get(key, {}).get(name) for key in keys]
                if any(b is not None for b in blobs):
                    out.append(OperatorState(name, kind, chain.parallelism,
                                             tuple(b if b is not None else _NO_STATE for b in blobs)))
        return out

    def _fail(self, pending: _Pending, why: str, *, quiet: bool = False) -> None:
        if self.pending is pending:
            self.pending = None
        with self.lock:
            pending.record.status, pending.record.failure = "FAILED", why
            pending.record.duration_s = self.clock.monotonic() - pending.started
            self.job.checkpoints.failed += 1
        self.last_end = self.clock.monotonic()
        _log.log(logging.INFO if quiet else logging.WARNING, "%s: checkpoint %d failed: %s",
                 self.job.id, pending.record.id, why)
        if pending.savepoint is not None:
            pending.savepoint.result.set_exception(
                CheckpointError(f"savepoint of {self.job.id} failed: {why}", path=self.store.job_path))

    def _remember(self, record: CheckpointRecord) -> None:
        with self.lock:
            history = self.job.checkpoints.history
            history.append(record)
            del history[:-HISTORY]

    # -- the job's end -------------------------------------------------------------------------
    def finish_stop(self) -> str | None:
        """The stop-with-savepoint's path once every subtask published (the job then ends)."""
        if self.stopping is None:
            return None
        request = self.stopping[2]
        path = next(r.path for r in self.job.checkpoints.history if r.id == self.stopping[0])
        request.result.set_result(path or "")
        return path

    def job_ended(self, state: str) -> None:
        """Keep the job's checkpoints or discard them (:func:`checkpoints_retained`)."""
        keep = checkpoints_retained(state, self.retention)
        if self.pending is not None and self.pending.savepoint is not None:
            self._fail(self.pending, f"the job ended ({state})", quiet=True)
        while True:
            try:
                self.requests.get_nowait().result.set_exception(
                    CheckpointError(f"{self.job.id} ended ({state}) before its savepoint",
                                    path=self.store.job_path))
            except queue.Empty:
                break
        if keep and self.latest is not None:
            _log.info("%s: checkpoints retained at %s (resume with: accelflow run -s %s ...)",
                      self.job.id, self.latest.path, self.latest.path)
            return
        if not self._store_used:
            return  # no checkpoint was ever written
        try:
            self.store.discard_all()
        except Exception as exc:  # the job's outcome stands; say what was left
            _log.warning("%s: could not remove its checkpoints at %s: %s", self.job.id,
                         self.store.job_path, exc)


def upstream_of(graph: JobGraph, keys: list[SubtaskKey]) -> dict[SubtaskKey, list[SubtaskKey]]:
    """Per subtask of ``keys`` that has inputs, the subtasks of ``keys`` that send to it.

    Example: ``source (p=2) -> rebalance -> map (p=2)`` gives each map subtask both source
    subtasks; a forward edge gives subtask *i* the upstream subtask *i* only, a ``rescale``
    edge the upstream subtasks that feed *i*; a chain with several inputs gets those of each.
    """
    found = {(key.chain, key.index): key for key in keys}
    upstream: dict[SubtaskKey, list[SubtaskKey]] = {}
    for key in keys:
        chain = graph.chains[key.chain]
        if not chain.inputs:
            continue
        senders: list[SubtaskKey] = []
        for inp in chain.inputs:
            up = graph.chains[inp.chain].parallelism
            if inp.edge.partitioning == "forward":
                indices: Iterable[int] = [key.index]
            elif inp.edge.partitioning == "rescale":
                indices = [u for u in range(up) if key.index in rescale_targets(u, up, chain.parallelism)]
            else:
                indices = range(up)
            senders += [found[(inp.chain, i)] for i in indices if (inp.chain, i) in found]
        upstream[key] = senders
    return upstream


def _warn_about_replaying_sources(job: Job) -> None:
    """Warn, once per job, about each unbounded source that keeps :class:`Source`'s default
    ``snapshot_split``: a restore reads its whole history again, skipping what was read."""
    for t in job.graph.transformations:
        fn = t.source
        if getattr(fn, "bounded", True) or not isinstance(fn, Source):
            continue
        if type(fn).snapshot_split is Source.snapshot_split:
            cls = type(fn).__qualname__
            _log.warning(
                "%s: source %r (%s) is unbounded and has no snapshot_split, so a restore reads its "
                "input again from the start and skips every record read before the checkpoint, "
                "which takes as long as reading them did; implement %s.snapshot_split(split, "
                "records_read, checkpoint_id) to return the split's position (see docs/checkpoints.md)",
                job.id, t.name, cls, cls)
