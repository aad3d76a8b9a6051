"""The JobManager's book-keeping records: registered TaskExecutors, jobs and their subtasks.

Every field here is read by the REST API while the JobManager changes it, so the JobManager
mutates these records only while holding its ``lock`` (see :mod:`accelflow.runtime.rest._snapshot`).
"""

from __future__ import annotations

import functools
import queue
import threading
import time
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

from accelflow.config import Configuration
from accelflow.dataflow import JobGraph, iter_records, to_batch
from accelflow.runtime import DeviceStatus, Registration, SubtaskKey

#: States of a job, in the order a job usually passes them.
JOB_STATES = ("CREATED", "PENDING", "RUNNING", "RESTARTING", "FINISHED", "FAILED", "CANCELED")
#: States after which a job never changes again.
JOB_ENDED = frozenset({"FINISHED", "FAILED", "CANCELED"})
#: States of a subtask.
SUBTASK_STATES = ("DEPLOYING", "RUNNING", "STANDBY", "FINISHED", "FAILED", "CANCELED")
#: States after which a subtask never changes again.
SUBTASK_ENDED = frozenset({"FINISHED", "FAILED", "CANCELED"})


@dataclass
class TaskExecutorInfo:
    registration: Registration
    used_slots: int = 0
    #: what is resident on its devices and its warm pools, as it last said
    devices: DeviceStatus | None = None

    @property
    def id(self) -> str:
        return self.registration.taskexecutor_id


@dataclass
class SubtaskState:
    key: SubtaskKey
    name: str
    taskexecutor: str | None  # None: never placed (its job ended first, see ``never_deployed``)
    devices: dict[str, list[tuple[str, Fraction]]]
    state: str = "DEPLOYING"
    counts: list[tuple[int, int]] = field(default_factory=list)
    metrics: dict[str, float] = field(default_factory=dict)  # the source's (``Source.metrics``)
    #: how this subtask came into its attempt after a failure: ``rolled back`` (the same
    #: process, in place), ``replaced`` (a new process), ``standby`` (a standby took over);
    #: None for a deployed one
    recovery: str | None = None


@dataclass
class JobResult:
    """What :meth:`Environment.execute` returns.

    Attributes:
        job_id, name: the job.
        status: ``FINISHED`` (failures raise ``JobError`` instead; cancellation ``CANCELED``).
        duration_s: from submission to the end.
        startup_s: from submission until the first record left a source.
        attempts: 1 plus the number of restarts.
        operators: per operator name, ``records_in`` and ``records_out`` summed over subtasks.
        devices: per subtask (``"classify (1/2)"``), the TaskExecutor and devices it held.
        chunks: what ``execute_and_collect`` collected, in subtask order, as it travelled
            (arrays, :class:`~accelflow.dataflow.Columns` or lists of records); read it as
            :attr:`collected` or :meth:`collected_batch`.
    """

    job_id: str
    name: str
    status: str
    duration_s: float
    startup_s: float | None
    attempts: int
    operators: dict[str, dict[str, int]]
    devices: dict[str, str]
    chunks: list[Any] = field(default_factory=list, repr=False)

    @functools.cached_property
    def collected(self) -> list[Any]:
        """The collected records, one Python object each, in subtask order (made on first
        use: a million rows of an array become a million NumPy scalars, ~0.1 s)."""
        return [record for chunk in self.chunks for record in iter_records(chunk)]

    def collected_batch(self) -> Any:
        """The collected records as one batch, as a ``map_batches`` function over the whole
        stream would receive it: one NumPy array for array rows and numbers, a tuple of
        column arrays for tuples, else a list (``[]`` when nothing was collected)."""
        return to_batch(self.chunks) if self.chunks else []


@dataclass(frozen=True, slots=True)
class PendingReason:
    """Why a job waits: the placement failure against the capacity free right now.

    Example: ``PendingReason("cannot place map (1/1) asking for gpu: 1 on any of 1
    TaskExecutor(s) (2 slots in all):", ("taskexecutor-1: gpu 0 has 0.5 free, 1 needed",))``
    """

    message: str
    reasons: tuple[str, ...]
    since: float  # time.time()


def checkpoints_retained(state: str, retention: str) -> bool:
    """Whether a job that ended in ``state`` keeps its checkpoints, by Flink's rules for
    ``externalized-checkpoint-retention``: a finished job's go; a cancelled job's stay with
    ``RETAIN_ON_CANCELLATION``; a failed job's stay unless ``NO_EXTERNALIZED_CHECKPOINTS``."""
    return (state == "CANCELED" and retention == "RETAIN_ON_CANCELLATION") or (
        state == "FAILED" and retention != "NO_EXTERNALIZED_CHECKPOINTS")


@dataclass
class CheckpointRecord:
    """One checkpoint or savepoint of a job, as REST and the UI show it."""

    id: int
    status: str  # IN_PROGRESS, COMPLETED, FAILED
    trigger_time: float  # time.time()
    savepoint: bool = False
    duration_s: float | None = None
    size: int | None = None
    path: str | None = None
    failure: str | None = None


@dataclass
class CheckpointStats:
    """A job's checkpoints so far (the newest last) and the last restore."""

    history: list[CheckpointRecord] = field(default_factory=list)
    completed: int = 0
    failed: int = 0
    #: {"id", "path", "time", "attempt"} of the checkpoint the job last restored from
    restored: dict[str, Any] | None = None


@dataclass
class FailoverRecord:
    """One failure of a job and how it recovered (REST, the UI and ``/metrics`` show them).

    Example: ``FailoverRecord(attempt=0, path="in-place", cause="subtask model (2/4) on
    taskexecutor-1 exited with code -9 (killed by SIGKILL) without finishing", failed=["model (2/4)"],
    replaced=["model (2/4)"], rolled_back=["model (1/4)", "model (3/4)", "model (4/4)"])``
    """

    attempt: int  # the attempt that failed (the next one recovers)
    path: str  # "in-place" or "full"
    cause: str  # the failure's first line
    failed: list[str]
    why_full: str | None = None  # why a full restart: why the failure could not be confined
    replaced: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    standby: str | None = None  # the standby that took the failed subtask's place
    at: float = field(default_factory=time.time)
    #: from the failure seen to every subtask running again (None: not yet)
    recovery_s: float | None = None


@dataclass
class Job:
    """One submitted job. ``events`` receives the TaskExecutor events about its subtasks.

    Invariant: ``state`` only moves forward into :data:`JOB_ENDED`, and ``done`` is set
    exactly when it gets there.
    """

    id: str
    graph: JobGraph
    config: Configuration
    submitted: float  # time.monotonic(), for durations
    submitted_at: float = field(default_factory=time.time)  # wall clock, for people
    state: str = "CREATED"
    attempt: int = 0
    cancel_requested: bool = False
    pending: PendingReason | None = None
    error: str | None = None
    ended_at: float | None = None
    result: JobResult | None = None
    events: queue.Queue[tuple[str, Any]] = field(default_factory=queue.Queue)  # RoutedEvent
    done: threading.Event = field(default_factory=threading.Event)
    checkpoints: CheckpointStats = field(default_factory=CheckpointStats)
    #: where this job's checkpoints go (``<dir>/<job uid>``)
    checkpoint_path: str | None = None
    #: what the current attempt's subtasks restore (see ``_checkpoints``), and from which id
    restore_from: dict[str, list[bytes]] | None = None
    restore_id: int = 0
    #: the savepoint requests' queue while the job runs (``_checkpoints.SavepointRequest``)
    savepoints: Any = None
    #: the path of the savepoint a stop-with-savepoint ended the job with
    stopped_with_savepoint: str | None = None
    #: the sources' splits of the first deployment, per (chain, subtask index): a rollback
    #: in place rewinds to them when no checkpoint has completed yet
    splits: dict[tuple[int, int], list[Any]] = field(default_factory=dict)
    #: None: a failure is confined where it can be (rolled back in place); else why not
    #: (``execution.failover.in-place: false``, checkpointing off, the Ray target)
    in_place_off: str | None = "not decided yet"
    #: every failure and its recovery, oldest first
    failovers: list[FailoverRecord] = field(default_factory=list)
    #: per chain that has fewer standby subtasks than wanted, why (placement failed)
    standby_missing: dict[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.graph.name

    def end(self, state: str, *, error: str | None = None, result: JobResult | None = None) -> None:
        self.state, self.error, self.result = state, error, result
        self.pending = None
        self.ended_at = time.time()
        self.done.set()
