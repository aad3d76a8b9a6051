"""The messages about devices, beside :mod:`._messages`: frozen ``msgspec.Struct`` classes.

Device health and memory (``docs/gpu.md``, "Health and memory"):

TaskExecutor → JobManager: :class:`DeviceReport` (a device's health after a fault, a probe that
changed it, or a drill; with :class:`DeviceChange` when it was quarantined, rejoined or had an
application fault), :class:`MemoryReport` (device memory each subtask's processes hold, per
probe) and :class:`DevicesFree` (a subtask's processes are gone from its devices: its shares
may go to another subtask; until then the JobManager keeps them held).

JobManager → TaskExecutor: :class:`InjectFault` (a drill: the same path as a real NVML event).

Warm devices (``docs/gpu.md``, "Warm devices and resident models"):

TaskExecutor ↔ warm subtask process (a socket pair it was spawned with, then the subtask's
status pipe): :class:`WarmReady` once its imports and device context are done, then
:class:`StartSubtask`.

TaskExecutor ↔ device host (its control pipe): :class:`HostReady`, then a :class:`HostReport`
whenever what is resident changes.

Subtask → TaskExecutor (its device-host broker): :class:`HostRequest` → :class:`HostAddress`
or :class:`HostFailed`.

Subtask ↔ device host: :class:`Attach` → :class:`Attached` or :class:`HostFailed`; then
:class:`ResidentRequest` → :class:`ResidentReply`. A chunk of arrays lies in shared memory, where
the message's :class:`SharedArrays` says (``runtime/subtask/_resident_ring.py``); any other
chunk follows its message (pickle protocol 5, the arrays' buffers out of band: ``runtime/_oob.py``).

TaskExecutor → JobManager: :class:`DeviceStatus` (what is resident where, and the warm pools),
shown by ``accelflow cluster status`` and ``/v1/taskexecutors``.
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct

from accelflow._errors import RemoteError
from accelflow.runtime._messages import SubtaskKey

ChangeKind = Literal["quarantined", "rejoined", "application-fault"]


class DeviceChange(Struct, frozen=True):
    """What happened to a device.

    Attributes:
        kind: ``quarantined`` (no new shares; its subtasks fail when ``fail_subtasks``),
            ``rejoined`` or ``application-fault`` (its subtasks fail, it stays).
        reason: e.g. ``Xid 79 (GPU has fallen off the bus)``.
        xid: the Xid, when the change came from one.
        fail_subtasks: a quarantine that fails the subtasks on the device (a drain does not).
        permanent: a quarantine that lasts until the TaskExecutor restarts (``max-faults``).
    """

    kind: ChangeKind
    reason: str
    xid: int | None = None
    fail_subtasks: bool = False
    permanent: bool = False


class DeviceReport(Struct, frozen=True):
    """A device's health (``DeviceHealth.snapshot()``: state, reason, Xid counts and
    history), sent when it changed, with what changed."""

    resource: str
    address: str
    uuid: str | None
    health: dict[str, Any]
    change: DeviceChange | None = None


class SubtaskMemory(Struct, frozen=True):
    """Device memory (bytes) the processes of subtask ``key`` hold on one device."""

    key: SubtaskKey
    resource: str
    address: str
    used: int


class MemoryReport(Struct, frozen=True):
    """Device memory in use per running subtask, as the TaskExecutor's last probe saw it."""

    usage: tuple[SubtaskMemory, ...]


class DevicesFree(Struct, frozen=True):
    """Subtask ``key``'s processes are gone from its watched devices (leftovers killed, or
    given up on with the device quarantined): the JobManager may hand its shares out again."""

    key: SubtaskKey


class InjectFault(Struct, frozen=True):
    """A drill (``accelflow cluster inject-fault``): Xid ``xid`` on device ``address`` of
    ``resource``, fed to the device's health as an NVML event would be."""

    resource: str
    address: str
    xid: int



#: in every subtask's environment: its TaskExecutor's device-host broker (a Unix socket) and the
#: key of its connections and of the hosts' (hex)
HOSTS_ENV_VAR, HOSTS_KEY_ENV_VAR = "ACCELFLOW_DEVICE_HOSTS", "ACCELFLOW_DEVICE_HOSTS_KEY"


class _Message(Struct, frozen=True):
    """A message: immutable, compared by value, pickled as it is."""


# -- warm subtask processes --------------------------------------------------------------------
class WarmReady(_Message, frozen=True):
    """A warm subtask process is ready: ``note`` says what it initialised (or why not)."""

    pid: int
    framework: str
    note: str


class StartSubtask(_Message, frozen=True):
    """Run this subtask (a ``SubtaskDescriptor``) with ``env`` on top of the process's own;
    ``watch``: what the TaskExecutor's watchdog shares with it (``run_subtask``'s argument)."""

    descriptor: Any
    env: dict[str, str]
    watch: tuple[str, str, float] | None = None


# -- device hosts ------------------------------------------------------------------------------
class HostReady(_Message, frozen=True):
    pid: int
    address: str
    framework: str
    note: str


class ResidentInstance(_Message, frozen=True):
    """One resident operator instance: where, which operator, its key, its device memory
    (bytes, None where the framework cannot measure it), its subtasks now, since when (epoch
    seconds), how many batches it has run (``map``: requests, a chunk of a subtask each) and
    whether it is ``hung`` (a call of it never returned: dropped, no subtask is given it, closed
    once the call returns)."""

    resource: str
    address: str
    operator: str
    key: str
    memory: int | None
    users: int
    since: float
    batches: int = 0
    hung: bool = False


class HostReport(_Message, frozen=True):
    instances: tuple[ResidentInstance, ...]


class HostRequest(_Message, frozen=True):
    """A subtask asks its TaskExecutor for the device host of one of its devices; ``gone``:
    the address of that device's host whose connection closed: the answer is how it ended (a
    :class:`HostFailed` naming the host, its pid and its exit code or signal)."""

    resource: str
    properties: dict[str, str]
    gone: str | None = None


class HostAddress(_Message, frozen=True):
    address: str


class HostFailed(_Message, frozen=True):
    error: RemoteError


class ResidentOptions(_Message, frozen=True):
    """How a resident operator is called: ``kind`` ``map`` (a record at a time) or
    ``map_batches`` (batches of up to ``batch_size`` records, from several subtasks)."""

    kind: Literal["map", "map_batches"]
    method: str | None = None
    batch_size: int = 1
    max_wait: float | None = None
    device: str | None = None
    prefetch: int = 2
    device_backend: str | None = None


#: the file next to a subtask's watchdog stack file where its device host writes the stack of a
#: resident call of it that runs long (``Attach.stack_path``); with :data:`RESIDENT_KILLED_SUFFIX`
#: added, the watchdog's mark that it killed the subtask as hung in that call
RESIDENT_STACK_SUFFIX, RESIDENT_KILLED_SUFFIX = ".resident", ".killed"


class Attach(_Message, frozen=True):
    """Use the instance of ``key`` (opened from ``blob`` if there is none yet). ``stack_path``:
    where the host writes the stack of a batch of this subtask's that runs long (the subtask's
    watchdog reads it when it finds the subtask hung); None: the subtask is not watched."""

    key: str
    blob: bytes
    operator: str
    options: ResidentOptions
    subtask: str
    resource: str
    properties: dict[str, str]
    numerator: int
    denominator: int
    taskexecutor_id: str
    stack_path: str | None = None


class Attached(_Message, frozen=True):
    """``opened``: this attach opened the instance (False: it was resident already)."""

    opened: bool
    memory: int | None


class SharedArrays(_Message, frozen=True):
    """A chunk's arrays in the sender's shared-memory ring: per array its offset, dtype and
    shape; ``columns``: they are the columns of a :class:`~accelflow.dataflow.Columns`;
    ``ring``: the size of a new ring whose descriptor follows this message (``SCM_RIGHTS``)."""

    arrays: tuple[tuple[int, Any, tuple[int, ...]], ...] = ()
    columns: bool = False
    ring: int = 0


class ResidentRequest(_Message, frozen=True):
    """``records`` records, in ``shared`` memory or following; ``flush``: run what is pending
    now, full batch or not; ``read``: the subtask has read every reply up to that ``seq`` (the
    host's ring space of those replies is free again)."""

    seq: int
    records: int
    flush: bool = False
    shared: SharedArrays | None = None
    read: int = 0


class ResidentReply(_Message, frozen=True):
    """The outputs of request ``seq``, in ``shared`` memory or following, unless ``error``."""

    seq: int
    error: RemoteError | None = None
    shared: SharedArrays | None = None


# -- TaskExecutor → JobManager -------------------------------------------------------------------
class DevicePool(_Message, frozen=True):
    """The warm subtask processes of one device: ``ready`` of ``size``."""

    resource: str
    address: str
    ready: int
    size: int


class DeviceStatus(_Message, frozen=True):
    taskexecutor_id: str
    resident: tuple[ResidentInstance, ...] = ()
    pools: tuple[DevicePool, ...] = ()


#: what a TaskExecutor's health monitor sends
DeviceEvent = DeviceReport | MemoryReport | DevicesFree
