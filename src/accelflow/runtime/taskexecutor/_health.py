"""A TaskExecutor's eyes on its devices: the health monitor (issue 29).

One thread per TaskExecutor watches every resource whose driver gives a
:class:`~accelflow.resources.DeviceWatch` (``param.health.enabled``, the default): it waits for
the devices' fault events (NVML's Xid and double-bit ECC events), probes them every
``param.health.probe-interval``, and feeds both to one
:class:`~accelflow.resources.DeviceHealth` per device. A drill (:class:`InjectFault`, from
``accelflow cluster inject-fault``) takes the same path as an NVML event.

What the health state machine answers becomes, in order, in the monitor's outbox:

* a :class:`DeviceReport` for the JobManager (which quarantines the device in its ledger, or
  ends the quarantine);
* for a quarantine that fails its subtasks, or an application fault, a :class:`FailDevice`:
  the TaskExecutor's serve loop fails the subtasks on the device (``HardwareFailure``,
  ``DeviceFault``) and stops them.

After a subtask ends, the monitor reconciles its devices: a
:class:`~accelflow.resources.LeftoverCheck` per device kills what the subtask's processes left
computing on it, and once none is left (or, after ``param.health.memory-release-timeout``, with
the device quarantined) it says :class:`DevicesFree`: only then does the JobManager hand the
share to another subtask. Every probe also reports the device memory each running subtask's
processes hold (:class:`MemoryReport`).

The serve loop waits on :attr:`HealthMonitor.wakeup` (a pipe) beside its other connections and
calls :meth:`HealthMonitor.drain`. Time comes from a :class:`~accelflow.runtime.Clock`; tests
drive :meth:`HealthMonitor.step` on a ``ManualClock`` with a scripted watch.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass, field
from functools import partial
from typing import Any, Union

from accelflow._errors import AccelflowError, DeviceFault, DiscoveryError, HardwareFailure
from accelflow.resources import (
    ApplicationFault, ComputeProcess, DeviceHealth, DeviceQuarantined, DeviceRef, DeviceRejoined, DeviceWatch,
    SUBTASK_ENV_VAR, Fault, HealthConfig, HealthEvent, LeftoverCheck, ProbeResult,
)
from accelflow.runtime import (
    SYSTEM_CLOCK, Clock, DeviceChange, DeviceReport, DevicesFree, MemoryReport, SubtaskKey, SubtaskMemory,
)

#: the longest a wait for fault events blocks (so a new reconciliation starts soon)
MAX_WAIT_S = 0.2
#: how often the compute processes of a device whose subtask ended are listed
RECONCILE_EVERY_S = 0.1
_log = logging.getLogger("accelflow.runtime")


@dataclass(frozen=True, slots=True)
class FailDevice:
    """For the serve loop: fail (and stop) the subtasks on ``resource`` ``address`` with ``error``."""

    resource: str
    address: str
    error: AccelflowError


Notice = Union[DeviceReport, MemoryReport, DevicesFree, FailDevice]


@dataclass
class _Subtask:
    key: SubtaskKey
    pid: int
    devices: dict[str, list[str]]  # watched resource -> addresses
    checks: list[tuple[str, str, LeftoverCheck]] | None = None  # once it ended
    pids: set[int] = field(default_factory=set)  # its own, and those of processes it started

    def __post_init__(self) -> None:
        self.pids.add(self.pid)


class HealthMonitor:
    """Watches ``watches`` (per resource: its watch and health config) for one TaskExecutor.

    Args:
        watches: per resource, the driver's watch and its ``param.health.*`` config.
        addresses: per resource, the addresses of its devices.
        clock: time for probes, faults and reconciliation.
    """

    def __init__(self, watches: Mapping[str, tuple[DeviceWatch, HealthConfig]],
                 addresses: Mapping[str, Collection[str]], *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.watches = dict(watches)
        self.clock = clock
        self.health = {
            (r, a): DeviceHealth(DeviceRef(r, a, watch.uuid(a)), config, clock.monotonic)
            for r, (watch, config) in self.watches.items() for a in addresses.get(r, ())
        }
        self._lock = threading.Lock()
        self._outbox: list[Notice] = []
        self._subtasks: dict[SubtaskKey, _Subtask] = {}
        self._renamed: dict[SubtaskKey, SubtaskKey] = {}  # rolled back in place: old key -> new
        self._next_probe = {r: clock.monotonic() + config.probe_interval for r, (_, config) in self.watches.items()}
        self._next_check = 0.0
        self._closed = threading.Event()
        self._thread: threading.Thread | None = None
        self._wake_r, self._wake_w = os.pipe()
        os.set_blocking(self._wake_r, False)
        os.set_blocking(self._wake_w, False)

    @property
    def wakeup(self) -> int:
        """A file descriptor that is readable when :meth:`drain` has something."""
        return self._wake_r

    def watched(self, resource: str) -> bool:
        return resource in self.watches

    # -- the serve loop's side -------------------------------------------------------------------
    def start(self) -> None:
        """Report every device's health once, then watch on a thread of its own."""
        with self._lock:
            for (resource, address), health in self.health.items():
                self._report(resource, address, health, None)
        self._thread = threading.Thread(target=self._run, daemon=True, name="accelflow-health")
        self._thread.start()

    def drain(self) -> list[Notice]:
        """What happened since the last call, in order."""
        try:
            while os.read(self._wake_r, 4096):
                pass
        except BlockingIOError:
            pass
        with self._lock:
            out, self._outbox = self._outbox, []
        return out

    def subtask_started(self, key: SubtaskKey, pid: int, devices: Mapping[str, Iterable[str]]) -> None:
        """Subtask ``key`` runs as ``pid`` on ``devices`` (per resource, its addresses); on a
        device quarantined so that its subtasks fail, it fails at once (:class:`FailDevice`)."""
        mine = {r: list(a) for r, a in devices.items() if r in self.watches}
        if mine:
            with self._lock:
                self._subtasks[key] = _Subtask(key, pid, mine)
                for r, addresses in mine.items():
                    for a in addresses:
                        failing = self.health[(r, a)].failing() if (r, a) in self.health else None
                        if failing is not None:  # placed there before the JobManager heard of it
                            self._post(_fail(r, a, failing))

    def subtask_renamed(self, old: SubtaskKey, new: SubtaskKey) -> None:
        """Subtask ``old`` goes on as ``new`` (rolled back in place); the processes it starts
        still carry ``old`` in their environment."""
        with self._lock:
            sub = self._subtasks.pop(old, None)
            if sub is not None:
                sub.key = new
                self._subtasks[new] = sub
                self._renamed[old] = new

    def subtask_ended(self, key: SubtaskKey) -> None:
        """Subtask ``key``'s process ended: reconcile its devices, then say ``DevicesFree``."""
        with self._lock:
            sub = self._subtasks.get(key)
            if sub is None or sub.checks is not None:
                return
            sub.checks = [
                (r, a, LeftoverCheck(self.health[(r, a)].device, partial(self._is_of, sub.key),
                                     self.watches[r][1].memory_release_timeout, self.clock.monotonic))
                for r, addresses in sub.devices.items() for a in addresses if (r, a) in self.health
            ]
            self._next_check = self.clock.monotonic()

    def inject(self, resource: str, address: str, fault: Fault) -> None:
        """A drill: ``fault`` on the device, as if its driver had reported it."""
        with self._lock:
            if (resource, address) in self.health:
                self._feed(resource, address, fault=fault)
            else:
                _log.warning("drill on %s %s ignored: not a watched device", resource, address)

    def close(self) -> None:
        self._closed.set()
        if self._thread is not None and self._thread is not threading.current_thread():
            self._thread.join(5)
        for watch, _ in self.watches.values():
            try:
                watch.close()
            except Exception:
                _log.exception("closing a device watch failed")
        for fd in (self._wake_r, self._wake_w):
            try:
                os.close(fd)
            except OSError:
                pass

    # -- the monitor's thread --------------------------------------------------------------------
    def _run(self) -> None:
        while not self._closed.is_set():
            try:
                self.step(MAX_WAIT_S)
            except Exception:  # the monitor must outlive any one bad probe
                _log.exception("accelflow internal error in the device health monitor")
                self.clock.sleep(MAX_WAIT_S)

    def step(self, wait: float) -> None:
        """Wait (at most ``wait`` s, less when a probe or check is due) for fault events, then
        probe the resources whose probe is due and reconcile the ended subtasks' devices."""
        now = self.clock.monotonic()
        due = min([*self._next_probe.values(), self._next_check if self._checking() else now + wait])
        timeout = max(0.0, min(wait, due - now))
        for n, (resource, (watch, _)) in enumerate(self.watches.items()):
            try:
                faults = watch.wait(timeout if n == 0 else 0.0)
            except DiscoveryError as exc:
                _log.warning("%s: fault events stopped (probes go on): %s", resource, exc)
                faults = []
            with self._lock:
                for address, fault in faults:
                    if (resource, address) in self.health:
                        self._feed(resource, address, fault=fault)
        now = self.clock.monotonic()
        for resource, at in self._next_probe.items():
            if at <= now:
                self._probe(resource)
                self._next_probe[resource] = now + self.watches[resource][1].probe_interval
        if self._checking() and self._next_check <= now:
            self._reconcile()
            self._next_check = now + RECONCILE_EVERY_S

    def _checking(self) -> bool:
        return any(sub.checks is not None for sub in self._subtasks.values())

    def _probe(self, resource: str) -> None:
        watch = self.watches[resource][0]
        results: Mapping[str, ProbeResult] = watch.probe()
        with self._lock:
            for address, result in results.items():
                if (resource, address) in self.health:
                    self._feed(resource, address, probe=result)
            running = [s for s in self._subtasks.values() if s.checks is None and resource in s.devices]
        if running:
            self._memory(resource, watch, running)

    def _memory(self, resource: str, watch: DeviceWatch, running: list[_Subtask]) -> None:
        """Report the device memory each running subtask's processes hold."""
        try:
            processes = watch.compute_processes()
        except DiscoveryError:
            return
        usage = []
        with self._lock:
            for sub in running:
                ours = [p for p in processes if self._owner(p.pid) == sub.key]
                for address in sub.devices[resource]:
                    used = sum(p.used_memory or 0 for p in ours if p.device_uuid == watch.uuid(address))
                    usage.append(SubtaskMemory(sub.key, resource, address, used))
            self._post(MemoryReport(tuple(usage)))

    def _reconcile(self) -> None:
        """One check of every ended subtask's devices."""
        with self._lock:
            ended = [s for s in self._subtasks.values() if s.checks is not None]
        listed: dict[str, list[ComputeProcess] | None] = {}
        for resource in {r for s in ended for r, _, _ in s.checks or ()}:
            try:
                listed[resource] = self.watches[resource][0].compute_processes()
            except DiscoveryError as exc:
                _log.warning("%s: cannot list the processes on its devices; taking them as free: %s", resource, exc)
                listed[resource] = None
        with self._lock:
            for sub in ended:
                self._check(sub, listed)

    def _check(self, sub: _Subtask, listed: Mapping[str, list[ComputeProcess] | None]) -> None:
        left = []
        for resource, address, check in sub.checks or ():
            processes = listed.get(resource)
            verdict = check.step(processes) if processes is not None and check.device.uuid else None
            if verdict is None or verdict.free:
                continue
            for pid in verdict.kill:
                _kill(pid)
            if verdict.fault is not None:
                self._feed(resource, address, fault=verdict.fault)
                continue
            left.append((resource, address, check))
        sub.checks = left
        if not left:
            del self._subtasks[sub.key]
            self._post(DevicesFree(sub.key))

    def _is_of(self, key: SubtaskKey, pid: int) -> bool:
        """Whether ``pid`` is subtask ``key``'s process or one it started: only those are its
        leftovers. The TaskExecutor's other subtasks on the device (sharers of a GPU, a
        survivor rolled back in place) run on and are never killed for it."""
        return self._owner(pid) == key

    def _owner(self, pid: int) -> SubtaskKey | None:
        """The subtask ``pid`` is, or was started by (its ``ACCELFLOW_SUBTASK``), if ours; a
        process once found ours stays ours (killed, its environment is gone)."""
        for sub in self._subtasks.values():
            if pid in sub.pids:
                return sub.key
        key = owner_of(pid)
        while key in self._renamed:
            key = self._renamed[key]
        if key in self._subtasks:
            self._subtasks[key].pids.add(pid)
        return key

    # -- under the lock ------------------------------------------------------------------------
    def _feed(self, resource: str, address: str, *, fault: Fault | None = None,
              probe: ProbeResult | None = None) -> None:
        health = self.health[(resource, address)]
        before = health.state
        events = health.fault(fault) if fault is not None else health.probe(probe or ProbeResult())
        if not events and fault is None and health.state == before:
            return
        if not events:
            self._report(resource, address, health, None)
        for event in events:
            self._report(resource, address, health, event)

    def _report(self, resource: str, address: str, health: DeviceHealth, event: HealthEvent | None) -> None:
        ref = health.device
        change = None if event is None else _change(event)
        self._post(DeviceReport(resource, address, ref.uuid, _plain(health.snapshot()), change))
        if isinstance(event, DeviceQuarantined) and event.fail_subtasks:
            self._post(_fail(resource, address, event))
        elif isinstance(event, ApplicationFault):
            self._post(FailDevice(resource, address, DeviceFault(
                event.describe(), device=ref.label(), uuid=ref.uuid, xid=event.xid)))

    def _post(self, notice: Notice) -> None:
        self._outbox.append(notice)
        try:
            os.write(self._wake_w, b"!")
        except (BlockingIOError, OSError):
            pass  # full (the loop will drain it) or closed


def _fail(resource: str, address: str, event: DeviceQuarantined) -> FailDevice:
    ref = event.device
    return FailDevice(resource, address, HardwareFailure(event.describe(), device=ref.label(), uuid=ref.uuid,
                                                         xid=event.xid))


def _change(event: HealthEvent) -> DeviceChange:
    if isinstance(event, DeviceQuarantined):
        return DeviceChange("quarantined", event.reason, event.xid, event.fail_subtasks, event.permanent)
    if isinstance(event, DeviceRejoined):
        return DeviceChange("rejoined", event.reason)
    return DeviceChange("application-fault", event.reason, event.xid, True)


def _plain(snapshot: dict[str, Any]) -> dict[str, Any]:
    """The snapshot with string keys throughout (Xid counts), as JSON has them."""
    snapshot["xid_counts"] = {str(k): v for k, v in snapshot.get("xid_counts", {}).items()}
    return snapshot


def subtask_marker(key: SubtaskKey) -> str:
    """The value of :data:`SUBTASK_ENV_VAR` for subtask ``key`` of this TaskExecutor."""
    return f"{os.getpid()}:{key.job_id}:{key.attempt}:{key.chain}:{key.index}"


def owner_of(pid: int) -> SubtaskKey | None:
    """The subtask of this TaskExecutor that started process ``pid`` (its environment has
    our :data:`SUBTASK_ENV_VAR`), or ``None``."""
    try:
        with open(f"/proc/{pid}/environ", "rb") as f:
            environ = f.read().split(b"\0")
    except OSError:
        return None
    prefix = f"{SUBTASK_ENV_VAR}={os.getpid()}:".encode()
    for entry in environ:
        if entry.startswith(prefix):
            job, attempt, chain, index = entry[len(prefix):].decode().rsplit(":", 3)
            return SubtaskKey(job, int(attempt), int(chain), int(index))
    return None


def _kill(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except OSError:
        pass
