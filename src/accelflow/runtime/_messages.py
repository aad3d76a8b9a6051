"""Everything that crosses a process boundary in the runtime, as typed messages.

Each message is a frozen ``msgspec.Struct``, pickled as it is (user code inside a
:class:`SubtaskDescriptor` travels as a cloudpickle blob). Errors travel as
:class:`accelflow._errors.RemoteError` and are raised again with their class on the other side.

JobManager → TaskExecutor (:data:`Command`): :class:`Deploy`, :class:`CancelJob`,
:class:`Shutdown`.

TaskExecutor → JobManager: :class:`Registration` (its devices as :class:`RegisteredResource`
and :class:`RegisteredDevice`) or :class:`RegistrationFailed` once, then :class:`SubtaskExited`
and every subtask event, relayed, and ``DeviceStatus`` (warm devices: ``_device_messages``). A :class:`SubtaskDescriptor` hands a subtask its devices as
:class:`DeviceShare`.

Subtask → TaskExecutor (:data:`SubtaskEvent`): :class:`SubtaskRunning`,
:class:`SubtaskProgress`, :class:`Collected`, :class:`SubtaskFinished`,
:class:`SubtaskFailed`.

Launcher → JobManager (about a TaskExecutor's end, carrying the pid of the incarnation they
are about, so that a restarted TaskExecutor with the same id is not mistaken for the dead one):
:class:`TaskExecutorLost` (its connection dropped), :class:`TaskExecutorExited` (its process
ended).

Subtask → relay (the Ray target's data channels): :class:`OpenChannel`, then chunks, then
``None``; the relay answers :class:`ChannelDone` or :class:`ChannelFailed`.

Client ↔ session cluster (the submission channel): ``_session_messages``.

JobManager → subtask, relayed by its TaskExecutor (:data:`ToSubtask`): the checkpoint
commands and :class:`Rollback` (a rollback in place, ``docs/failover.md``).
"""

from __future__ import annotations

from fractions import Fraction
from typing import TYPE_CHECKING, Any, Literal, NamedTuple, Union

from msgspec import Struct, field

from accelflow._errors import RemoteError
from accelflow.dataflow import Partitioning
from accelflow.resources import ExternalResourceInfo, info_properties

if TYPE_CHECKING:  # device health and memory (``_device_messages``, which imports this module)
    from accelflow.runtime._device_messages import DeviceEvent, DeviceStatus, InjectFault

PROTOCOL = 2


class _Message(Struct, frozen=True):
    """A message: immutable, compared and hashed by value, pickled as it is. A ``Struct``
    class is built in C: the same 38 classes as frozen dataclasses took 60-100 ms to define
    (each method ``exec``-ed from source) in every TaskExecutor and forkserver, on the way
    to the first subtask."""


class SubtaskKey(NamedTuple):
    job_id: str
    attempt: int
    chain: int
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the subtask index


class OutputEdge(_Message, frozen=True):
    """Where one edge out of a chain sends its records: the consumer's subtasks
    (``addresses``), spread by ``partitioning`` (``key_fn`` for ``hash`` and ``custom``,
    ``partitioner`` for ``custom``, over ``max_parallelism`` key groups for ``hash``), into
    the consumer's input ``input_index``; the records of node ``node`` of the chain (-1: the
    last), of its side output ``side`` (None: its main output). ``names``: of that node and of
    the consumer's first operator (errors name the edge by them)."""

    partitioning: Partitioning
    key_fn: Any
    addresses: tuple[str, ...]
    input_index: int = 0
    node: int = -1
    side: str | None = None
    partitioner: Any = None
    max_parallelism: int = 128
    names: tuple[str, str] = ("", "")


class ChainPlan(_Message, frozen=True):
    """Pickled once per chain and attempt with cloudpickle (user code inside): the chain's
    operators as the user declared them (their ``Transformation`` nodes), and the facts of this run
    that the JobManager decided, which never go into the user's graph."""

    name: str
    nodes: list[Any]
    outputs: tuple[OutputEdge, ...]
    #: whether keyed operators emit a value per record (streaming) or once per key at the end
    rolling: bool
    #: whether the job takes checkpoints (every subtask then acks a final one at its end)
    checkpointing: bool = False
    #: whether a failure elsewhere rolls this subtask back in place (:class:`Rollback`): a
    #: data channel that breaks then makes it wait for its rollback instead of failing
    in_place: bool = False
    #: the number of key groups of the chain's keyed state (``pipeline.max-parallelism``)
    max_parallelism: int = 128
    #: how often watermarks are generated (``pipeline.auto-watermark-interval``), in ms
    watermark_interval_ms: int = 200
    #: how long a record may wait in a partly filled chunk (``execution.buffer-timeout``), in
    #: ms; 0: never, -1: until the chunk is full (or the input pauses)
    buffer_timeout_ms: int = 100


# -- devices (inside Registration and SubtaskDescriptor) ------------------------------------------
class RegisteredDevice(_Message, frozen=True):
    """One device a TaskExecutor's driver discovered: its scheduling address and properties.

    Example:
        >>> RegisteredDevice.of(ExternalResourceInfo(index="0", uuid="GPU-8f6c"))
        RegisteredDevice(address='0', properties={'index': '0', 'uuid': 'GPU-8f6c'})
    """

    address: str
    properties: dict[str, str]

    @classmethod
    def of(cls, info: ExternalResourceInfo) -> RegisteredDevice:
        properties = info_properties(info)
        return cls(ExternalResourceInfo(properties).address, properties)

    def info(self) -> ExternalResourceInfo:
        """The device as the subtask's ``RuntimeContext`` hands it out."""
        return ExternalResourceInfo(self.properties)


class RegisteredResource(_Message, frozen=True):
    """What one TaskExecutor registers of one external resource (``accelflow resources
    --json`` shows the same fields).

    A resource without a driver, or whose discovery degraded, has no devices: it is counted
    by ``amount`` only (as in Flink), see :attr:`counted`.

    Example:
        >>> RegisteredResource("fpga", 2, status="no-driver").counted
        True
    """

    name: str
    amount: int
    #: the driver factory as configured; None: no driver
    driver: str | None = None
    status: Literal["ok", "no-driver", "degraded"] = "ok"
    #: why discovery degraded, if it did
    message: str | None = None
    devices: tuple[RegisteredDevice, ...] = ()
    #: the TaskExecutor watches these devices: it reports their health and says when a
    #: subtask's shares are free again (``DevicesFree``)
    watched: bool = False

    @property
    def counted(self) -> bool:
        """Whether this resource is counted by amount only (no driver, or a degraded one)."""
        return self.status != "ok"

    def device(self, address: str) -> RegisteredDevice | None:
        """The device registered at ``address``, or None (a counted resource has none)."""
        return next((d for d in self.devices if d.address == address), None)


class DeviceShare(_Message, frozen=True):
    """A device assigned to a subtask and the exact share of it the subtask holds.

    Example:
        >>> DeviceShare.of({"index": "0"}, Fraction(1, 4)).share
        Fraction(1, 4)
    """

    properties: dict[str, str]
    numerator: int
    denominator: int

    @classmethod
    def of(cls, properties: dict[str, str], share: Fraction) -> DeviceShare:
        return cls(properties, share.numerator, share.denominator)

    @property
    def share(self) -> Fraction:
        return Fraction(self.numerator, self.denominator)

    def info(self) -> ExternalResourceInfo:
        return ExternalResourceInfo(self.properties)


class SubtaskDescriptor(_Message, frozen=True):
    key: SubtaskKey
    parallelism: int
    chain_blob: bytes
    listen_address: str | None
    expected_senders: int
    splits: list[Any] | None
    #: per resource the subtask asked for, its devices and shares (none for a counted resource)
    assigned: dict[str, tuple[DeviceShare, ...]]
    #: per resource, every device of the TaskExecutor the subtask runs on
    taskexecutor_infos: dict[str, tuple[RegisteredDevice, ...]]
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
    #: per resource, the device memory (bytes) this subtask holds of each device it was
    #: assigned whose memory is known: its per-process limit
    memory: dict[str, dict[str, int]] = field(default_factory=dict)
    #: a standby subtask (``execution.failover.standby-subtasks``): opened, then idle until a
    #: :class:`Rollback` gives it the index of a failed subtask
    standby: bool = False
    #: every operator of its chain that uses a device is resident (its device host computes
    #: on the device): it needs no device context of its own, so it is forked, never started
    #: in a warm process of its device (which makes one), and not counted in that device's pool
    resident_only: bool = False


def in_flight_name(operator: str) -> str:
    """The checkpointed state that holds the records a subtask had taken out of its ended
    inputs but not processed yet (checkpoints after the sources finished), beside the state
    of its chain's first operator ``operator``. Its kind is :data:`IN_FLIGHT_KIND`."""
    return f"{operator}#in-flight"


IN_FLIGHT_KIND = "in-flight"


# -- JobManager → TaskExecutor ------------------------------------------------------------------
class Deploy(_Message, frozen=True):
    descriptor: SubtaskDescriptor


class CancelJob(_Message, frozen=True):
    """Stop a job's subtasks (to a TaskExecutor), or cancel the job (client → session)."""

    job_id: str | None = None


class Shutdown(_Message, frozen=True):
    pass


class TriggerCheckpoint(_Message, frozen=True):
    """To a source subtask (relayed by its TaskExecutor): take checkpoint ``checkpoint_id``
    between two chunks and send its barrier downstream."""

    key: SubtaskKey
    checkpoint_id: int


class NotifyCheckpointComplete(_Message, frozen=True):
    """To every subtask: checkpoint ``checkpoint_id`` is complete, commit what it covers.
    ``reply``: answer :class:`CheckpointCommitted` once committed (stop-with-savepoint).
    ``final``: it is the job's final checkpoint (every subtask has ended its input), the one
    a subtask that ended waits for before it finishes."""

    key: SubtaskKey
    checkpoint_id: int
    reply: bool = False
    final: bool = False


class Rollback(_Message, frozen=True):
    """To a subtask that survived another's failure (relayed by its TaskExecutor, which files
    it under ``new_key`` from then on): drop the records in flight, restore checkpoint
    ``checkpoint_id`` (``restored`` as in :class:`SubtaskDescriptor`; 0 and None: the start),
    rewind the source to ``splits``, connect the data channels of the new epoch and go on as
    ``new_key``, without calling ``open()`` again. To a standby: the same activates it as
    ``new_key.index``; an index past the parallelism only renames it (it stays idle)."""

    key: SubtaskKey
    new_key: SubtaskKey
    checkpoint_id: int
    restored: dict[str, list[bytes]] | None
    splits: list[Any] | None
    listen_address: str | None
    expected_senders: int
    #: per output edge of the chain, in order, the addresses of the new epoch
    outputs: tuple[tuple[str, ...], ...]


#: JobManager messages a TaskExecutor hands to one of its subtasks
ToSubtask = TriggerCheckpoint | NotifyCheckpointComplete | Rollback
Command = Union[Deploy, CancelJob, Shutdown, TriggerCheckpoint, NotifyCheckpointComplete, Rollback,
                "InjectFault"]


# -- TaskExecutor → JobManager ------------------------------------------------------------------
class Registration(_Message, frozen=True):
    taskexecutor_id: str
    pid: int
    slots: int
    resources: tuple[RegisteredResource, ...] = ()
    protocol: int = PROTOCOL

    def resource(self, name: str) -> RegisteredResource | None:
        """What this TaskExecutor registered of resource ``name``, or None."""
        return next((r for r in self.resources if r.name == name), None)


class RegistrationFailed(_Message, frozen=True):
    taskexecutor_id: str
    error: RemoteError


class SubtaskExited(_Message, frozen=True):
    key: SubtaskKey
    exitcode: int | None


# -- Subtask → TaskExecutor → JobManager ----------------------------------------------------------
class SubtaskRunning(_Message, frozen=True):
    key: SubtaskKey


class SubtaskProgress(_Message, frozen=True):
    key: SubtaskKey
    counts: list[tuple[int, int]]
    #: the source's own gauges (``Source.metrics()``), e.g. ``"kafka_lag:<topic>:<partition>"``
    metrics: dict[str, float] = field(default_factory=dict)


class Collected(_Message, frozen=True):
    """Records for ``execute_and_collect``, sent by the collecting sink's subtask."""

    key: SubtaskKey
    chunk: Any


class SubtaskFinished(_Message, frozen=True):
    key: SubtaskKey
    counts: list[tuple[int, int]]


class SubtaskFailed(_Message, frozen=True):
    key: SubtaskKey
    error: RemoteError


class CheckpointAck(_Message, frozen=True):
    """A subtask's part of checkpoint ``checkpoint_id``: per operator name, its state
    (cloudpickled). ``final``: the subtask's input has ended and this is its last state
    (the job's final checkpoint, see ``docs/checkpoints.md``)."""

    key: SubtaskKey
    checkpoint_id: int
    states: dict[str, bytes]
    final: bool = False


class CheckpointCommitted(_Message, frozen=True):
    """Answer to a :class:`NotifyCheckpointComplete` with ``reply``."""

    key: SubtaskKey
    checkpoint_id: int


SubtaskEvent = (SubtaskRunning | SubtaskProgress | Collected | SubtaskFinished | SubtaskFailed
                | CheckpointAck | CheckpointCommitted)
#: every message about one subtask (they all have a ``key``)
SUBTASK_MESSAGES = (SubtaskRunning, SubtaskProgress, Collected, SubtaskFinished, SubtaskFailed,
                    SubtaskExited, CheckpointAck, CheckpointCommitted)


# -- subtask → subtask (in a data channel, between chunks) ---------------------------------------
class Barrier(_Message, frozen=True):
    """Checkpoint ``checkpoint_id``'s barrier: every record before it is in the checkpoint,
    none after it."""

    checkpoint_id: int


class Watermark(_Message, frozen=True):
    """A watermark, in a data channel between chunks: no record with ``timestamp <= this``
    is expected any more on this channel."""

    timestamp: int


class StreamStatus(_Message, frozen=True):
    """The sending subtask's output became idle (its watermarks do not hold the receiver's
    back) or active again, in a data channel between chunks (Flink's ``WatermarkStatus``)."""

    idle: bool


class InputChannel(_Message, frozen=True):
    """The first message on a data channel: which input of the receiving operator it feeds
    (0, or 1 for the second stream of ``connect`` or ``interval_join``)."""

    input_index: int


# -- Launcher → JobManager ------------------------------------------------------------------------
class TaskExecutorLost(_Message, frozen=True):
    taskexecutor_id: str
    pid: int | None


class TaskExecutorExited(_Message, frozen=True):
    taskexecutor_id: str
    exitcode: int | None
    pid: int


TaskExecutorEvent = Union[Registration, RegistrationFailed, SubtaskExited, SubtaskEvent,
                          TaskExecutorLost, TaskExecutorExited, "DeviceEvent", "DeviceStatus"]


# -- relay (Ray target) ---------------------------------------------------------------------------
class OpenChannel(_Message, frozen=True):
    name: str
    sender: SubtaskKey | None


class ChannelDone(_Message, frozen=True):
    pass


class ChannelFailed(_Message, frozen=True):
    reason: str
