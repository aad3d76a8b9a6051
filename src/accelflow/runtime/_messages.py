"""Everything that crosses a process boundary in the runtime, as typed messages.

Each message is a frozen dataclass, pickled as it is (user code inside a
:class:`SubtaskDescriptor` travels as a cloudpickle blob). Errors travel as
:class:`accelflow._errors.RemoteError` and are raised again with their class on the other side.

JobManager → TaskExecutor (:data:`Command`): :class:`Deploy`, :class:`CancelJob`,
:class:`Shutdown`.

TaskExecutor → JobManager: :class:`Registration` or :class:`RegistrationFailed` once, then
:class:`SubtaskExited` and every subtask event, relayed.

Subtask → TaskExecutor (:data:`SubtaskEvent`): :class:`SubtaskRunning`,
:class:`SubtaskProgress`, :class:`Collected`, :class:`SubtaskFinished`,
:class:`SubtaskFailed`.

Launcher → JobManager (about a TaskExecutor's end, carrying the pid of the incarnation they
are about, so that a restarted TaskExecutor with the same id is not mistaken for the dead one):
:class:`TaskExecutorLost` (its connection dropped), :class:`TaskExecutorExited` (its process
ended).

Subtask → relay (the Ray target's data channels): :class:`OpenChannel`, then chunks, then
``None``; the relay answers :class:`ChannelDone` or :class:`ChannelFailed`.

Client ↔ session cluster (the submission channel): :class:`SubmitJob` → :class:`JobAccepted`,
then :class:`JobProgress`... and :class:`JobSucceeded` or :class:`JobFailed`; the client may
send :class:`CancelJob`. :class:`StatusRequest` → :class:`StatusReply`; :class:`StopRequest`
→ :class:`Stopping`; :class:`ConfigRequest` → :class:`ConfigReply`;
:class:`TriggerSavepoint` → :class:`SavepointDone` or :class:`SavepointFailed` (``accelflow
savepoint|stop``).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from accelflow._errors import RemoteError
from accelflow.dataflow import Partitioning

PROTOCOL = 2


class SubtaskKey(NamedTuple):
    job_id: str
    attempt: int
    chain: int
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the subtask index


@dataclass(frozen=True, slots=True)
class OutputEdge:
    partitioning: Partitioning
    key_fn: Any
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChainPlan:
    """Pickled once per chain and attempt with cloudpickle (user code inside)."""

    name: str
    nodes: list[Any]
    outputs: tuple[OutputEdge, ...]
    rolling: bool
    #: whether the job takes checkpoints (every subtask then acks a final one at its end)
    checkpointing: bool = False


@dataclass(frozen=True, slots=True)
class SubtaskDescriptor:
    key: SubtaskKey
    parallelism: int
    chain_blob: bytes
    listen_address: str | None
    expected_senders: int
    splits: list[Any] | None
    assigned: dict[str, list[tuple[dict[str, str], str]]]
    taskexecutor_infos: dict[str, list[dict[str, str]]]
    isolate: bool
    authkey: bytes
    taskexecutor_id: str
    #: the checkpoint this attempt restores from: per operator name, every subtask's state
    #: (cloudpickled; each operator picks its share), and that checkpoint's id
    restored: dict[str, list[bytes]] | None = None
    restored_checkpoint: int = 0
    #: the NumPy source arrays this subtask reads through the object store (the Ray target):
    #: array id -> a Ray ``ObjectRef`` as the JobManager sends it, replaced by the
    #: ``SharedArray`` where the TaskExecutor mapped it before forking the subtask
    arrays: dict[str, Any] = field(default_factory=dict)


# -- JobManager → TaskExecutor ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Deploy:
    descriptor: SubtaskDescriptor


@dataclass(frozen=True, slots=True)
class CancelJob:
    """Stop a job's subtasks (to a TaskExecutor), or cancel the job (client → session)."""

    job_id: str | None = None


@dataclass(frozen=True, slots=True)
class Shutdown:
    pass


@dataclass(frozen=True, slots=True)
class TriggerCheckpoint:
    """To a source subtask (relayed by its TaskExecutor): take checkpoint ``checkpoint_id``
    between two chunks and send its barrier downstream."""

    key: SubtaskKey
    checkpoint_id: int


@dataclass(frozen=True, slots=True)
class NotifyCheckpointComplete:
    """To every subtask: checkpoint ``checkpoint_id`` is complete, commit what it covers.
    ``reply``: answer :class:`CheckpointCommitted` once committed (stop-with-savepoint)."""

    key: SubtaskKey
    checkpoint_id: int
    reply: bool = False


#: JobManager messages a TaskExecutor hands to one of its subtasks
ToSubtask = TriggerCheckpoint | NotifyCheckpointComplete
Command = Deploy | CancelJob | Shutdown | ToSubtask


# -- TaskExecutor → JobManager ------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class Registration:
    taskexecutor_id: str
    pid: int
    slots: int
    resources: list[dict[str, Any]] = field(default_factory=list)
    protocol: int = PROTOCOL


@dataclass(frozen=True, slots=True)
class RegistrationFailed:
    taskexecutor_id: str
    error: RemoteError


@dataclass(frozen=True, slots=True)
class SubtaskExited:
    key: SubtaskKey
    exitcode: int | None


# -- Subtask → TaskExecutor → JobManager ----------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SubtaskRunning:
    key: SubtaskKey


@dataclass(frozen=True, slots=True)
class SubtaskProgress:
    key: SubtaskKey
    counts: list[tuple[int, int]]
    #: the source's own gauges (``Source.metrics()``), e.g. ``"kafka_lag:<topic>:<partition>"``
    metrics: dict[str, float] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Collected:
    """Records for ``execute_and_collect``, sent by the collecting sink's subtask."""

    key: SubtaskKey
    chunk: Any


@dataclass(frozen=True, slots=True)
class SubtaskFinished:
    key: SubtaskKey
    counts: list[tuple[int, int]]
    parts: list[str]


@dataclass(frozen=True, slots=True)
class SubtaskFailed:
    key: SubtaskKey
    error: RemoteError


@dataclass(frozen=True, slots=True)
class CheckpointAck:
    """A subtask's part of checkpoint ``checkpoint_id``: per operator name, its state
    (cloudpickled). ``final``: the subtask's input has ended and this is its last state
    (the job's final checkpoint, see ``docs/checkpoints.md``)."""

    key: SubtaskKey
    checkpoint_id: int
    states: dict[str, bytes]
    final: bool = False


@dataclass(frozen=True, slots=True)
class CheckpointCommitted:
    """Answer to a :class:`NotifyCheckpointComplete` with ``reply``."""

    key: SubtaskKey
    checkpoint_id: int


SubtaskEvent = (SubtaskRunning | SubtaskProgress | Collected | SubtaskFinished | SubtaskFailed
                | CheckpointAck | CheckpointCommitted)
#: every message about one subtask (they all have a ``key``)
SUBTASK_MESSAGES = (SubtaskRunning, SubtaskProgress, Collected, SubtaskFinished, SubtaskFailed,
                    SubtaskExited, CheckpointAck, CheckpointCommitted)


# -- subtask → subtask (in a data channel, between chunks) ---------------------------------------
@dataclass(frozen=True, slots=True)
class Barrier:
    """Checkpoint ``checkpoint_id``'s barrier: every record before it is in the checkpoint,
    none after it."""

    checkpoint_id: int


# -- Launcher → JobManager ------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class TaskExecutorLost:
    taskexecutor_id: str
    pid: int | None


@dataclass(frozen=True, slots=True)
class TaskExecutorExited:
    taskexecutor_id: str
    exitcode: int | None
    pid: int


TaskExecutorEvent = (Registration | RegistrationFailed | SubtaskExited | SubtaskEvent
                     | TaskExecutorLost | TaskExecutorExited)


# -- relay (Ray target) ---------------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class OpenChannel:
    name: str
    sender: SubtaskKey | None


@dataclass(frozen=True, slots=True)
class ChannelDone:
    pass


@dataclass(frozen=True, slots=True)
class ChannelFailed:
    reason: str


# -- client ↔ session cluster ---------------------------------------------------------------------
@dataclass(frozen=True, slots=True)
class SubmitJob:
    graph_blob: bytes
    config: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobAccepted:
    job_id: str
    url: str


@dataclass(frozen=True, slots=True)
class JobProgress:
    snapshot: dict[str, Any]


@dataclass(frozen=True, slots=True)
class JobSucceeded:
    result: Any  # a JobResult


@dataclass(frozen=True, slots=True)
class JobFailed:
    error: RemoteError


@dataclass(frozen=True, slots=True)
class StatusRequest:
    pass


@dataclass(frozen=True, slots=True)
class StatusReply:
    overview: dict[str, Any]


@dataclass(frozen=True, slots=True)
class StopRequest:
    pass


@dataclass(frozen=True, slots=True)
class Stopping:
    pass


@dataclass(frozen=True, slots=True)
class ConfigRequest:
    pass


@dataclass(frozen=True, slots=True)
class ConfigReply:
    config: dict[str, Any]


@dataclass(frozen=True, slots=True)
class TriggerSavepoint:
    """Take a savepoint of job ``job_id`` in ``target`` (None: the job's
    ``execution.checkpointing.savepoint-dir``); ``stop``: end the job after it (Flink's
    stop-with-savepoint)."""

    job_id: str
    target: str | None = None
    stop: bool = False


@dataclass(frozen=True, slots=True)
class SavepointDone:
    """The savepoint's directory (once the stopped job has ended, for ``stop``)."""

    path: str


@dataclass(frozen=True, slots=True)
class SavepointFailed:
    error: RemoteError
