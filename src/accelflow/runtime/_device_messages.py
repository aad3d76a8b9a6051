"""The messages of device health and device memory (issue 29), beside :mod:`._messages`.

TaskExecutor → JobManager: :class:`DeviceReport` (a device's health after a fault, a probe that
changed it, or a drill; with :class:`DeviceChange` when it was quarantined, rejoined or had an
application fault), :class:`MemoryReport` (device memory each subtask's processes hold, per
probe) and :class:`DevicesFree` (a subtask's processes are gone from its devices: its shares
may go to another subtask; until then the JobManager keeps them held).

JobManager → TaskExecutor: :class:`InjectFault` (a drill: the same path as a real NVML event).
"""

from __future__ import annotations

from typing import Any, Literal

from msgspec import Struct

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


#: what a TaskExecutor's health monitor sends
DeviceEvent = DeviceReport | MemoryReport | DevicesFree
