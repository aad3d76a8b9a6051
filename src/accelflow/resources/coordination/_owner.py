"""Who holds a device in a coordination file: a process identity that survives PID reuse.

A PID alone is not an identity: after a ``kill -9`` the PID is free and may be reused, and in
another PID namespace (a container sharing the file) the same number is another process.
So an owner is ``pid`` + the process start time + the host's boot id + the host name + the
PID namespace. Flink records only the PID, so a reused PID keeps a dead TaskManager's GPU
"owned" for ever.

The start time that decides is ``starttime`` from ``/proc/<pid>/stat`` (clock ticks since
boot): exact and immune to clock changes. psutil's ``create_time()`` adds the boot time,
which moves with NTP adjustments, so comparing it could declare a live owner dead; it is
recorded for people to read, and compared (within a second) only where ``/proc`` is missing.

Who the owner is, when a command allocates for another process: the driver passes its own
identity in the variable :func:`owner_env_var` names (``<pid>:<start_ticks>``; the GPU driver's
is ``ACCELFLOW_GPU_OWNER``) to every discovery script, so a wrapper script (``#!/bin/sh`` +
``accelflow-gpu-discovery "$@"``, no ``exec``) does not make the short-lived shell the owner.
:func:`owner_from_env` refuses an owner that has already exited.

Who started the owner: its parent's pid and start ticks are recorded too, so that a shortage
can tell a holder that is another TaskExecutor of the same cluster (the TaskExecutors of one
``accelflow run`` or session cluster are children of one process, the client or its zygote)
from one of another cluster (:meth:`Owner.same_parent`).
"""

from __future__ import annotations

import enum
import os
import socket
from dataclasses import dataclass
from functools import cache
from typing import Any, TypeGuard

from accelflow._parent import pid_namespace
from accelflow.resources.coordination._names import check_resource, noun

import psutil

_BOOT_ID_PATH = "/proc/sys/kernel/random/boot_id"
_STAT_PATH = "/proc/{pid}/stat"
_START_TIME_TOLERANCE_S = 1.0  # only where /proc is missing: wall-clock start times
_DEAD_STATES = ("Z", "X")  # zombie (killed, not yet reaped), dead



def owner_env_var(resource: str) -> str:
    """The variable a driver of ``resource`` sets for its discovery script to name the owner:
    ``<pid>:<start_ticks>`` of the TaskExecutor (``<pid>:`` where there is no ``/proc``), read
    with :func:`owner_from_env`. A script then records that process as the owner of what it
    allocates, whatever its parent is.

    Example:
        >>> owner_env_var("gpu"), owner_env_var("my-fpga")
        ('ACCELFLOW_GPU_OWNER', 'ACCELFLOW_MY_FPGA_OWNER')

    Raises:
        ValueError: ``resource`` is not a resource name.
    """
    return f"ACCELFLOW_{check_resource(resource).upper().replace('-', '_')}_OWNER"


class Liveness(enum.Enum):
    """Whether a recorded owner still runs, as far as this process can tell."""

    ALIVE = "alive"
    DEAD = "dead"
    UNKNOWN = "unknown"  # another host or PID namespace: treated as alive, never reclaimed


@dataclass(frozen=True, slots=True, kw_only=True)
class Owner:
    """The process that holds a device.

    Example:
        >>> me = Owner.of_process()
        >>> me.liveness() is Liveness.ALIVE
        True
        >>> me.same_parent(me), me.same_parent(Owner.of_process(me.parent_pid))
        (True, False)

    Attributes:
        pid: the process id.
        start_ticks: when it started, in clock ticks since boot (``/proc/<pid>/stat``);
            ``None`` where there is no ``/proc``.
        start_time: when it started, in seconds since the epoch (psutil), for messages.
        host: the host name.
        boot_id: the kernel's boot id, when readable (a new boot means every owner is dead).
        pid_namespace: the inode of the PID namespace, when readable.
        parent_pid: the pid of the process that started it, when known.
        parent_start_ticks: that parent's start ticks, when known (a reused parent pid is
            another parent).
    """

    pid: int
    start_ticks: int | None
    start_time: float
    host: str
    boot_id: str | None = None
    pid_namespace: int | None = None
    parent_pid: int | None = None
    parent_start_ticks: int | None = None

    @classmethod
    def of_process(cls, pid: int | None = None) -> Owner:
        """The identity of process ``pid`` (default: this process) on this host.

        Raises:
            psutil.NoSuchProcess: no process ``pid`` runs.
        """
        process = psutil.Process(pid)
        stat = _read_stat(process.pid)
        parent_pid = stat[2] if stat else process.ppid()
        parent = _read_stat(parent_pid) if parent_pid else None
        return cls(
            pid=process.pid,
            start_ticks=stat[1] if stat else None,
            start_time=process.create_time(),
            host=socket.gethostname(),
            boot_id=_boot_id(),
            pid_namespace=pid_namespace(),
            parent_pid=parent_pid or None,
            parent_start_ticks=parent[1] if parent else None,
        )

    def same_process(self, other: Owner) -> bool:
        """Whether both identities name the same process (not merely the same PID)."""
        return (
            self.pid == other.pid
            and self._same_start(other.start_ticks, other.start_time)
            and self.host == other.host
            and self.boot_id == other.boot_id
            and self.pid_namespace == other.pid_namespace
        )

    def same_parent(self, other: Owner) -> bool:
        """Whether both were started by the same process on the same host: e.g. two
        TaskExecutors of one cluster (children of its client, or of the client's zygote).
        See the class example."""
        return (
            self.parent_pid is not None
            and self.parent_pid == other.parent_pid
            and self.parent_start_ticks == other.parent_start_ticks
            and self.host == other.host
            and self.boot_id == other.boot_id
            and self.pid_namespace == other.pid_namespace
        )

    def liveness(self) -> Liveness:
        """Whether this owner still runs; a reused PID (other start time) counts as dead."""
        if self.host != socket.gethostname():
            return Liveness.UNKNOWN
        if None not in (self.boot_id, _boot_id()) and self.boot_id != _boot_id():
            return Liveness.DEAD  # the host rebooted since the allocation
        if None not in (self.pid_namespace, pid_namespace()) and (
            self.pid_namespace != pid_namespace()
        ):
            return Liveness.UNKNOWN
        return self._process_liveness()

    def _same_start(self, ticks: int | None, start_time: float) -> bool:
        if self.start_ticks is not None and ticks is not None:
            return self.start_ticks == ticks
        return abs(self.start_time - start_time) < _START_TIME_TOLERANCE_S

    def _process_liveness(self) -> Liveness:
        stat = _read_stat(self.pid)
        if stat is not None:
            state, ticks, _ = stat
            if state in _DEAD_STATES or not self._same_start(ticks, self.start_time):
                return Liveness.DEAD  # killed, or the PID now belongs to another process
            return Liveness.ALIVE
        if os.path.isdir("/proc/self"):
            return Liveness.DEAD  # /proc works and has no such process
        return _psutil_liveness(self)

    def to_env(self) -> str:
        """The value of the owner variable (:func:`owner_env_var`) naming this owner, e.g.
        ``"4242:123456"``."""
        return f"{self.pid}:{'' if self.start_ticks is None else self.start_ticks}"

    def describe(self) -> str:
        """For messages: ``pid 4242 on host gpu-node-1``."""
        return f"pid {self.pid} on host {self.host}"

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {
            "pid": self.pid,
            "start_ticks": self.start_ticks,
            "start_time": self.start_time,
            "host": self.host,
            "boot_id": self.boot_id,
            "pid_namespace": self.pid_namespace,
        }
        if self.parent_pid is not None:
            data["parent"] = {"pid": self.parent_pid, "start_ticks": self.parent_start_ticks}
        return data

    @classmethod
    def from_json(cls, data: object) -> Owner:
        """Parse :meth:`to_json` output.

        Raises:
            ValueError: a field is missing or has the wrong type.
        """
        if not isinstance(data, dict):
            raise ValueError(f"an owner must be an object, got {data!r}")
        pid, start, host = data.get("pid"), data.get("start_time"), data.get("host")
        boot_id, namespace = data.get("boot_id"), data.get("pid_namespace")
        ticks = data.get("start_ticks")
        if not _is_int(pid) or pid <= 0:
            raise ValueError(f"owner pid must be a positive integer, got {pid!r}")
        if ticks is not None and not _is_int(ticks):
            raise ValueError(f"owner start_ticks must be an integer or null, got {ticks!r}")
        if not isinstance(start, int | float) or isinstance(start, bool):
            raise ValueError(f"owner start_time must be a number, got {start!r}")
        if not isinstance(host, str) or not host:
            raise ValueError(f"owner host must be a non-empty string, got {host!r}")
        if boot_id is not None and not isinstance(boot_id, str):
            raise ValueError(f"owner boot_id must be a string or null, got {boot_id!r}")
        if namespace is not None and not _is_int(namespace):
            raise ValueError(f"owner pid_namespace must be an integer or null, got {namespace!r}")
        parent_pid, parent_ticks = _parent_from_json(data.get("parent"))
        return cls(
            pid=pid,
            start_ticks=ticks,
            start_time=float(start),
            host=host,
            boot_id=boot_id,
            pid_namespace=namespace,
            parent_pid=parent_pid,
            parent_start_ticks=parent_ticks,
        )


def _parent_from_json(data: object) -> tuple[int | None, int | None]:
    """``(pid, start_ticks)`` of an owner's optional ``"parent"`` (absent in older files).

    Raises:
        ValueError: it is present but malformed.
    """
    if data is None:
        return None, None
    pid = data.get("pid") if isinstance(data, dict) else None
    ticks = data.get("start_ticks") if isinstance(data, dict) else None
    if not _is_int(pid) or pid <= 0 or (ticks is not None and not _is_int(ticks)):
        raise ValueError(
            f"owner parent must be {{'pid': <positive integer>, 'start_ticks': <integer or null>}}, "
            f"got {data!r}"
        )
    return pid, ticks


def owner_from_env(value: str, resource: str) -> Owner:
    """The live owner that ``value`` names: the value of the owner variable of ``resource``
    (:func:`owner_env_var`).

    Example:
        >>> import os
        >>> owner_from_env(Owner.of_process().to_env(), "fpga").pid == os.getpid()
        True

    Raises:
        ValueError: the value is malformed, or names a process that has exited (none runs
            with that pid, or the one that does started at another time).
    """
    variable = owner_env_var(resource)
    text = value.strip()
    pid_text, colon, ticks_text = text.partition(":")
    if not colon or not pid_text.isdecimal() or (ticks_text and not ticks_text.isdecimal()):
        raise ValueError(
            f"{variable}={value[:80]!r}: expected '<pid>:<start ticks>', e.g. '4242:123456'"
        )
    pid = int(pid_text)
    gone = f"{variable} names process {pid}, which has exited"
    try:
        owner = Owner.of_process(pid) if pid > 0 else None
    except psutil.NoSuchProcess:
        owner = None
    if owner is None:
        raise ValueError(f"{gone}; its {noun(resource)}s would be free again at once")
    if ticks_text and owner.start_ticks is not None and owner.start_ticks != int(ticks_text):
        raise ValueError(f"{gone} (pid {pid} now belongs to another process)")
    if owner.liveness() is Liveness.DEAD:
        raise ValueError(f"{gone} (it is a zombie)")
    return owner


def _is_int(value: object) -> TypeGuard[int]:
    return isinstance(value, int) and not isinstance(value, bool)


def _read_stat(pid: int) -> tuple[str, int, int] | None:
    """``(state, starttime, ppid)`` from ``/proc/<pid>/stat``, or ``None`` if unreadable."""
    try:
        with open(_STAT_PATH.format(pid=pid), "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return None
    # the command name (field 2) may hold spaces and parentheses: split after the last ')'
    fields = text[text.rfind(")") + 2 :].split()
    try:
        return fields[0], int(fields[19]), int(fields[1])  # fields 3 (state), 22, 4 (ppid)
    except (IndexError, ValueError):
        return None


def _psutil_liveness(owner: Owner) -> Liveness:
    try:
        process = psutil.Process(owner.pid)
        if abs(process.create_time() - owner.start_time) >= _START_TIME_TOLERANCE_S:
            return Liveness.DEAD
        if process.status() == psutil.STATUS_ZOMBIE:
            return Liveness.DEAD
    except psutil.NoSuchProcess:
        return Liveness.DEAD
    except psutil.AccessDenied:
        return Liveness.ALIVE  # it exists; we may not look at it
    return Liveness.ALIVE


@cache
def _boot_id() -> str | None:
    try:
        with open(_BOOT_ID_PATH, encoding="ascii") as f:
            return f.read().strip() or None
    except OSError:
        return None
