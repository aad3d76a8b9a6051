"""The health of one device: a pure state machine over faults, probes and resets.

Vendor-neutral (GPUs and FPGAs fail alike): a driver's watcher turns what it sees into
:class:`Fault` values (for NVIDIA GPUs: an Xid, classified by ``resources/gpu/_xid.py``, or a
double-bit ECC error) and :class:`ProbeResult` values, and feeds them to a
:class:`DeviceHealth`, which returns the events the TaskExecutor reports: :class:`DeviceQuarantined`,
:class:`DeviceRejoined` and :class:`ApplicationFault`. Time comes from an injected clock, so
tests drive it without sleeping. Not thread-safe: one watcher thread, or a lock around it.

States::

    healthy ──fault / bad probe──► quarantined ──a good probe, after a reset where needed──► rejoining
       ▲                               ▲                                                     │
       │                               └──────────── a bad probe / a new fault ◄─────────────┤
       └───────────────────────── rejoin-probes good probes in a row ◄───────────────────────┘

* A **hardware** fault (a hardware Xid, a double-bit ECC error, an unreachable device)
  quarantines the device and fails the subtasks on it (``fail_subtasks``); it rejoins only
  after a reset. A **drain** (pages or rows pending retirement: a reset applies them;
  temperature over the limit: it cools down) takes no new work but lets running subtasks
  finish. An **application** fault fails the subtasks on the device and leaves it in service.
  An **informational** one is only recorded.
* A reset is seen when the watcher reports one (:meth:`DeviceHealth.reset`), or when a
  probe finds the device reachable after it was not, or no longer pending retirement.
* ``max-faults`` faults within ``fault-window`` keep the device out for good (until its
  TaskExecutor restarts): a card that keeps failing is not worth its restarts. A fault counts
  when it needs a reset and comes while the device is in service or coming back after a reset:
  the burst of Xids one failure brings counts once, a hot spell not at all.
* A probe value that is unknown (``None``: the tool did not say) is neither good nor bad; a
  probe counts as good only when the device is reachable and nothing is wrong.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import Literal

from accelflow.resources._health_params import HealthConfig

FaultKind = Literal["application", "hardware", "informational"]
State = Literal["healthy", "quarantined", "rejoining"]
HISTORY = 64
"""How many faults a device's history keeps (its counts keep all)."""


@dataclass(frozen=True, slots=True)
class DeviceRef:
    """Which device: resource name, address, and UUID when known.

    Example:
        >>> DeviceRef("gpu", "1", "GPU-8f6c").label()
        'gpu 1 (GPU-8f6c)'
    """

    resource: str
    address: str
    uuid: str | None = None

    def label(self) -> str:
        return f"{self.resource} {self.address}" + (f" ({self.uuid})" if self.uuid else "")


@dataclass(frozen=True, slots=True)
class Fault:
    """A fault of one device, classified.

    Attributes:
        reason: what happened, e.g. ``Xid 79 (GPU has fallen off the bus)``.
        kind: ``application``, ``hardware`` or ``informational``.
        xid: the Xid, when the fault is one.
        fail_subtasks: hardware faults: whether the subtasks on the device fail now (a drain
            lets them finish).
        needs_reset: hardware faults: whether the device rejoins only after a reset.
    """

    reason: str
    kind: FaultKind
    xid: int | None = None
    fail_subtasks: bool = True
    needs_reset: bool = True


@dataclass(frozen=True, slots=True)
class ProbeResult:
    """What one probe of one device found; ``None`` is unknown (the tool did not say).

    Attributes:
        reachable: the device answers (``False``: lost, fallen off the bus).
        retired_pages_pending: memory pages wait for a reset to be retired.
        remapped_rows_pending: memory rows wait for a reset to be remapped.
        temperature: degrees Celsius.
        detail: what the tool said when the device did not answer.
    """

    reachable: bool | None = None
    retired_pages_pending: bool | None = None
    remapped_rows_pending: bool | None = None
    temperature: float | None = None
    detail: str = ""

    @property
    def pending(self) -> bool | None:
        """Whether anything waits for a reset (``None``: unknown)."""
        flags = (self.retired_pages_pending, self.remapped_rows_pending)
        return True if True in flags else (False if False in flags else None)

    def faults(self, temperature_limit: float | None) -> list[Fault]:
        """What is wrong, the worst first (unreachable, pending retirement, too hot)."""
        found = []
        if self.reachable is False:
            why = f": {self.detail}" if self.detail else ""
            found.append(Fault(f"unreachable{why}", "hardware"))
        if self.retired_pages_pending:
            found.append(Fault("memory pages pending retirement (a reset retires them)", "hardware",
                               fail_subtasks=False))
        if self.remapped_rows_pending:
            found.append(Fault("memory rows pending remapping (a reset remaps them)", "hardware",
                               fail_subtasks=False))
        if self.temperature is not None and temperature_limit is not None and self.temperature > temperature_limit:
            found.append(Fault(f"temperature {self.temperature:g} C over the limit of {temperature_limit:g} C",
                               "hardware", fail_subtasks=False, needs_reset=False))
        return found


@dataclass(frozen=True, slots=True)
class DeviceQuarantined:
    """The device takes no new work; if ``fail_subtasks``, the subtasks on it fail with a
    ``HardwareFailure`` (:meth:`describe`) and restart on healthy devices. Sent again when a
    quarantined device gets a worse or a new hardware fault.

    Attributes:
        since: when the quarantine began (the monitor's clock).
        permanent: ``max-faults`` reached: it rejoins only when its TaskExecutor restarts.
    """

    device: DeviceRef
    reason: str
    xid: int | None
    since: float
    fail_subtasks: bool
    needs_reset: bool
    permanent: bool

    def describe(self) -> str:
        """The message of the ``HardwareFailure`` of a subtask on the device."""
        out = " (it stays out: too many faults)" if self.permanent else ""
        return f"{self.device.label()} failed: {self.reason}; quarantined{out}"


@dataclass(frozen=True, slots=True)
class DeviceRejoined:
    """A quarantined device passed its probes: it takes work again.

    Attributes:
        reason: why it was quarantined.
        quarantined_for: seconds out.
    """

    device: DeviceRef
    reason: str
    quarantined_for: float


@dataclass(frozen=True, slots=True)
class ApplicationFault:
    """An application Xid: the subtasks on the device fail and restart in place."""

    device: DeviceRef
    reason: str
    xid: int | None

    def describe(self) -> str:
        return f"{self.device.label()}: {self.reason}, an application error (the device stays in service)"


HealthEvent = DeviceQuarantined | DeviceRejoined | ApplicationFault


@dataclass(frozen=True, slots=True)
class _Out:
    """A quarantine in progress."""

    reason: str
    xid: int | None
    since: float
    fail_subtasks: bool
    needs_reset: bool
    permanent: bool = False
    reset_seen: bool = False
    good: int = 0


class DeviceHealth:
    """One device's health (see the module docstring).

    Example:
        >>> clock = iter(range(100)).__next__
        >>> health = DeviceHealth(DeviceRef("gpu", "0"), HealthConfig(rejoin_probes=2), clock=clock)
        >>> [type(e).__name__ for e in health.fault(Fault("Xid 79 (GPU has fallen off the bus)", "hardware", 79))]
        ['DeviceQuarantined']
        >>> health.probe(ProbeResult(reachable=True)), health.state  # no reset yet
        ([], 'quarantined')
        >>> _ = health.reset(); health.probe(ProbeResult(reachable=True)), health.state
        ([], 'rejoining')
        >>> [type(e).__name__ for e in health.probe(ProbeResult(reachable=True))], health.state
        (['DeviceRejoined'], 'healthy')
    """

    def __init__(self, device: DeviceRef, config: HealthConfig,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.device, self.config, self._clock = device, config, clock
        self._out: _Out | None = None
        self._faults: deque[float] = deque()  # when each counted fault came (the window)
        self._last: ProbeResult | None = None
        self.history: deque[tuple[float, Fault]] = deque(maxlen=HISTORY)
        self.xid_counts: Counter[int] = Counter()

    @property
    def state(self) -> State:
        if self._out is None:
            return "healthy"
        return "rejoining" if self._eligible(self._out) and self._out.good > 0 else "quarantined"

    def fault(self, fault: Fault) -> list[HealthEvent]:
        """An Xid or ECC error of this device (classified by the driver's watcher)."""
        now = self._clock()
        self.history.append((now, fault))
        if fault.xid is not None:
            self.xid_counts[fault.xid] += 1
        if fault.kind == "application":
            return [ApplicationFault(self.device, fault.reason, fault.xid)]
        if fault.kind == "hardware":
            return self._quarantine(fault, now)
        return []

    def probe(self, result: ProbeResult) -> list[HealthEvent]:
        """A probe of this device."""
        last, self._last = self._last, result
        found = result.faults(self.config.temperature_limit)
        out = self._out
        if out is None:
            return self._quarantine(found[0], self._clock()) if found else []
        if last is not None and self._reset_between(last, result):
            out = self._out = replace(out, reset_seen=True, good=0)
        if found:
            return self._quarantine(found[0], self._clock())
        if result.reachable is not True or not self._eligible(out):
            return []
        out = self._out = replace(out, good=out.good + 1)
        if out.good < self.config.rejoin_probes:
            return []
        self._out = None
        return [DeviceRejoined(self.device, out.reason, self._clock() - out.since)]

    def reset(self) -> list[HealthEvent]:
        """The device was reset: good probes from now on let it rejoin."""
        if self._out is not None:
            self._out = replace(self._out, reset_seen=True, good=0)
        return []

    def snapshot(self) -> dict[str, object]:
        """A JSON-ready view for the REST API and the UI."""
        out = self._out
        view: dict[str, object] = {"state": self.state, "xid_counts": dict(self.xid_counts)}
        if out is not None:
            view.update(reason=out.reason, xid=out.xid, since=out.since, needs_reset=out.needs_reset,
                        reset_seen=out.reset_seen, good_probes=out.good, permanent=out.permanent)
        view["history"] = [{"at": at, "reason": f.reason, "kind": f.kind, "xid": f.xid} for at, f in self.history]
        return view

    def _quarantine(self, fault: Fault, now: float) -> list[HealthEvent]:
        """Quarantine for ``fault``, or keep the quarantine (and say so only when it changes:
        a fault worse than the one it is out for, or one after a reset)."""
        out = self._out
        fresh = out is None or out.reset_seen  # the device was in, or coming back to, service
        if out is not None and not fresh and not _worse(fault, out):
            self._out = replace(out, good=0)  # the same trouble again: wait on
            return []
        if fresh and fault.needs_reset:  # a failure of the card counts; a hot spell does not
            self._faults.append(now)
        while self._faults and self._faults[0] < now - self.config.fault_window:
            self._faults.popleft()
        permanent = (out is not None and out.permanent) or len(self._faults) >= self.config.max_faults
        since = now if out is None else out.since
        reason = fault.reason
        if permanent:
            reason += (f" ({len(self._faults)} faults within {self.config.fault_window:g} s: it stays "
                       "out until its TaskExecutor restarts)")
        fail = fault.fail_subtasks or (out is not None and out.fail_subtasks and not fresh)
        needs_reset = fault.needs_reset or (out is not None and out.needs_reset and not fresh)
        self._out = _Out(reason, fault.xid, since, fail, needs_reset, permanent)
        return [DeviceQuarantined(self.device, reason, fault.xid, since, fault.fail_subtasks,
                                  needs_reset, permanent)]

    @staticmethod
    def _eligible(out: _Out) -> bool:
        """Whether good probes now count toward rejoining."""
        return not out.permanent and (out.reset_seen or not out.needs_reset)

    @staticmethod
    def _reset_between(before: ProbeResult, after: ProbeResult) -> bool:
        """A reset shows as a device that comes back, or whose pending retirements cleared."""
        return (before.reachable is False and after.reachable is True) or (
            before.pending is True and after.pending is False)


def _worse(fault: Fault, out: _Out) -> bool:
    """Whether ``fault`` asks more than the quarantine ``out`` is for (failing the subtasks, or
    a reset)."""
    return (fault.fail_subtasks and not out.fail_subtasks) or (fault.needs_reset and not out.needs_reset)
