"""Reconciliation when a TaskExecutor starts: what the subtasks of a *dead* TaskExecutor left
computing on the devices this one takes.

A TaskExecutor that is SIGKILLed takes its forkserver and its subtasks along (Linux's
parent-death signal, ``runtime/taskexecutor/_forkserver_guard.py``), but not what a subtask
started itself (a helper process, a data loader's workers, anything in a session of its own):
the parent-death signal is not inherited over ``fork``. Such a process keeps its device memory,
and nobody reconciles it: its TaskExecutor is gone. So the next TaskExecutor that takes the
device does, before it registers (:func:`reconcile_dead_owners`, called by the provider when it
opens the devices' watches).

What catches what: the parent-death signal catches the runtime's own processes (forkserver,
forked and warm subtasks, device hosts), also one whose parent died before it set the signal up
(it checks its parent's pid right after, ``accelflow._parent``): this module could not, a forked
subtask sets its marker after the fork, so ``/proc/<pid>/environ`` lacks it. This module catches
what the subtasks started themselves, which inherit the marker:

* a process is an **orphan** when it is provably an accelflow subtask's process of a
  TaskExecutor that no longer runs (:func:`orphan_of`): its environment carries the subtask
  marker ``ACCELFLOW_SUBTASK=<TaskExecutor pid>:<job>:<attempt>:<chain>:<index>`` (set for
  every subtask, inherited by what it starts), and that TaskExecutor is dead: no process has
  its pid, it is a zombie, or the process with its pid started *after* the orphan (a reused
  pid: a TaskExecutor starts before its subtasks). A marker naming a live process that may be
  its TaskExecutor is never an orphan, nor is a process whose environment cannot be read (another
  user's) or one in another PID namespace (a container's, seen from the host: its marker's pid
  is not a pid here);
* the orphans among the device's compute processes are killed (``SIGKILL``, through psutil,
  which refuses a reused pid), and the device waits, at most ``health.memory-release-timeout``,
  until none is listed; then the device is quarantined with a reason naming them (its watch's
  first :meth:`~accelflow.resources.DeviceWatch.wait` reports the fault), which also fails a
  subtask the JobManager placed there in the moment between the registration and that report.

Processes of others (no marker, a live TaskExecutor's) are never killed nor waited for. Without
an orphan on the host (one scan of ``/proc``, milliseconds) the devices are not even listed.

Example (a watch of GPU 0; the GPU driver's lists ``nvidia-smi --query-compute-apps``)::

    class Idle(DeviceWatch):   # nothing computes on it: nothing to kill, nothing held
        def probe(self):
            return {}
        def uuid(self, address):
            return "GPU-0"

    assert reconcile_dead_owners("gpu", Idle(), ["0"], timeout=30.0) == []
"""

from __future__ import annotations

import dataclasses
import logging
import os
import time
from collections.abc import Callable, Collection, Mapping, Sequence

import psutil

from accelflow._errors import DiscoveryError
from accelflow.resources._device_watch import DeviceWatch
from accelflow.resources._health import DeviceRef, Fault, ProbeResult
from accelflow.resources._reconcile import ComputeProcess, LeftoverCheck

#: the variable the TaskExecutor sets for each subtask (and every process it starts inherits):
#: ``<TaskExecutor pid>:<job>:<attempt>:<chain>:<index>``
SUBTASK_ENV_VAR = "ACCELFLOW_SUBTASK"
#: how often the devices' compute processes are listed while orphans hold memory
CHECK_EVERY_S = 0.1
_PREFIX = f"{SUBTASK_ENV_VAR}=".encode()
_log = logging.getLogger("accelflow.resources")


@dataclasses.dataclass(frozen=True, slots=True)
class Orphan:
    """A process of a subtask of a TaskExecutor that died.

    Attributes:
        process: the process (psutil: killing it checks that its pid was not reused).
        taskexecutor: the dead TaskExecutor's pid.
        marker: its ``ACCELFLOW_SUBTASK`` value, e.g. ``4242:job-1:0:1:0``.
    """

    process: psutil.Process
    taskexecutor: int
    marker: str

    @property
    def pid(self) -> int:
        return self.process.pid


def orphan_of(pid: int) -> Orphan | None:
    """The orphan process ``pid`` is, or ``None`` when it is not provably one (see the module
    docstring).

    Example:
        >>> orphan_of(os.getpid()) is None   # no marker (and, with one, this process lives)
        True
    """
    try:
        marker = _marker(pid)  # first: another user's cannot be read, and most have none
        if marker is None or not _same_pid_namespace(pid):
            return None
        process = psutil.Process(pid)
        started = process.create_time()
    except (psutil.Error, OSError):
        return None
    owner = marker.split(":", 1)[0]
    if not owner.isdecimal():
        return None
    return Orphan(process, int(owner), marker) if _dead_before(int(owner), started) else None


def _marker(pid: int) -> str | None:
    with open(f"/proc/{pid}/environ", "rb") as f:
        for entry in f.read().split(b"\0"):
            if entry.startswith(_PREFIX):
                return entry[len(_PREFIX):].decode(errors="replace")
    return None


def _same_pid_namespace(pid: int) -> bool:
    """Whether ``pid`` sees pids as this process does (its marker's TaskExecutor pid then
    names the same process here): a container's processes, seen from the host, do not."""
    return os.stat(f"/proc/{pid}/ns/pid").st_ino == os.stat("/proc/self/ns/pid").st_ino


def _dead_before(owner: int, started: float) -> bool:
    """Whether TaskExecutor pid ``owner`` is dead for a process that ``started`` then: no such
    process, a zombie, or one that started after it (so it cannot have started it)."""
    try:
        process = psutil.Process(owner)
        return process.status() == psutil.STATUS_ZOMBIE or process.create_time() > started
    except psutil.NoSuchProcess:
        return True
    except psutil.Error:  # it exists and we may not look: it may be the TaskExecutor
        return False


def find_orphans() -> dict[int, Orphan]:
    """Every orphan on this host that this user may inspect, by pid (a scan of ``/proc``)."""
    try:
        names = os.listdir("/proc")
    except OSError:
        return {}
    found = {}
    for name in names:
        if name.isdecimal() and (orphan := orphan_of(int(name))) is not None:
            found[orphan.pid] = orphan
    return found


class _Orphans:
    """Which pids are orphans: those found at the start, and those seen later (a process found
    an orphan stays one once killed: its environment is gone with it)."""

    def __init__(self, found: Mapping[int, Orphan]) -> None:
        self.known = dict(found)
        self.killed: set[int] = set()

    def __call__(self, pid: int) -> bool:
        if pid not in self.known and (orphan := orphan_of(pid)) is not None:
            self.known[pid] = orphan
        return pid in self.known

    def kill(self, pid: int, device: DeviceRef) -> None:
        if pid not in self.killed:
            orphan = self.known[pid]
            _log.warning("%s: killing pid %d, left computing on it by a subtask (%s) of TaskExecutor pid %d, "
                         "which died", device.label(), pid, orphan.marker, orphan.taskexecutor)
            self.killed.add(pid)
        try:
            self.known[pid].process.kill()
        except psutil.Error:
            pass  # gone already, or its pid was reused: not ours any more

    def owners(self, pids: Collection[int]) -> str:
        dead = sorted({self.known[p].taskexecutor for p in pids if p in self.known})
        return ", ".join(f"pid {p}" for p in dead)


def reconcile_dead_owners(resource: str, watch: DeviceWatch, addresses: Collection[str], timeout: float, *,
                          clock: Callable[[], float] = time.monotonic,
                          sleep: Callable[[float], None] = time.sleep) -> list[tuple[str, Fault]]:
    """Kill the orphans computing on ``resource``'s devices ``addresses`` and wait (at most
    ``timeout`` seconds) until the watch lists none; returns the faults of the devices still
    held then (quarantine them), by address.

    Devices whose UUID the watch does not know are not checked; a watch that cannot list its
    processes leaves the devices as they are (logged).
    """
    devices = {a: uuid for a in sorted(addresses) if (uuid := watch.uuid(a))}
    found = find_orphans() if devices else {}
    if not found:
        return []
    orphans = _Orphans(found)
    checks = {a: LeftoverCheck(DeviceRef(resource, a, uuid), orphans, timeout, clock,
                               after="the TaskExecutor that ran them died", fail_subtasks=True)
              for a, uuid in devices.items()}
    faults: list[tuple[str, Fault]] = []
    while checks:
        try:
            processes = watch.compute_processes()
        except DiscoveryError as exc:
            _log.warning("%s: cannot list the processes on its devices, so a dead TaskExecutor's leftovers on "
                         "them are not reconciled: %s", resource, exc)
            break
        for address, check in list(checks.items()):
            if _step(check, processes, orphans, faults):
                del checks[address]
        if checks:
            sleep(CHECK_EVERY_S)
    return faults


def _step(check: LeftoverCheck, processes: Sequence[ComputeProcess], orphans: _Orphans,
          faults: list[tuple[str, Fault]]) -> bool:
    """One check of one device; whether it is done with (free, or given up on)."""
    verdict = check.step(processes)
    for pid in verdict.kill:
        orphans.kill(pid, check.device)
    if verdict.fault is not None:
        reason = f"{verdict.fault.reason} (left by the subtasks of TaskExecutor {orphans.owners(verdict.kill)})"
        faults.append((check.device.address, dataclasses.replace(verdict.fault, reason=reason)))
        _log.warning("%s: quarantined: %s", check.device.label(), reason)
    return verdict.free or verdict.fault is not None


class WithFaults(DeviceWatch):
    """``watch``, whose first :meth:`wait` reports ``faults`` (found before it was handed out)."""

    def __init__(self, watch: DeviceWatch, faults: Sequence[tuple[str, Fault]]) -> None:
        self.watch, self._faults = watch, list(faults)

    def probe(self) -> Mapping[str, ProbeResult]:
        return self.watch.probe()

    def wait(self, timeout: float) -> list[tuple[str, Fault]]:
        if self._faults:
            out, self._faults = self._faults, []
            return out
        return self.watch.wait(timeout)

    def compute_processes(self) -> list[ComputeProcess]:
        return self.watch.compute_processes()

    def uuid(self, address: str) -> str | None:
        return self.watch.uuid(address)

    def close(self) -> None:
        self.watch.close()
