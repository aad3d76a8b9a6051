"""Reconciliation after a subtask ends: its device memory must come back before the share
goes to a replacement.

A driver lists the processes computing on a device (:class:`ComputeProcess`: for NVIDIA,
``nvidia-smi --query-compute-apps`` or NVML's compute processes); :class:`LeftoverCheck` decides,
check after check, what to do about the ones left by this TaskExecutor's subtasks: kill them,
wait (the share stays held) until none is left, or, past ``timeout``, give up and quarantine the
device with a reason naming them. Processes that are not this TaskExecutor's are reported, never
killed, and do not hold the share. Pure, with an injected clock.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

from accelflow.resources._health import DeviceRef, Fault
from accelflow.scheduling import format_bytes


@dataclass(frozen=True, slots=True)
class ComputeProcess:
    """A process computing on a device.

    Attributes:
        pid: its process id (in the TaskExecutor's PID namespace, as the driver reports it).
        device_uuid: the device it computes on.
        used_memory: bytes of device memory it holds (``None``: not reported).
    """

    pid: int
    device_uuid: str
    used_memory: int | None = None

    def describe(self) -> str:
        held = "memory unknown" if self.used_memory is None else format_bytes(self.used_memory)
        return f"pid {self.pid} ({held})"


@dataclass(frozen=True, slots=True)
class Verdict:
    """What one check found.

    Attributes:
        free: nothing of this TaskExecutor's is left: the share may go back.
        kill: pids to kill (this TaskExecutor's leftovers; killed again on every check until gone).
        others: processes of others on the device (reported only).
        fault: set when the wait timed out: quarantine the device for this (needs a reset).
    """

    free: bool
    kill: tuple[int, ...] = ()
    others: tuple[ComputeProcess, ...] = field(default=())
    fault: Fault | None = None


class LeftoverCheck:
    """The wait for one device's memory after this TaskExecutor's subtasks on it ended.

    Example:
        >>> now = iter([0.0, 1.0, 31.0]).__next__
        >>> check = LeftoverCheck(DeviceRef("gpu", "0", "GPU-1"), lambda pid: pid == 42, 30.0, now)
        >>> check.step([ComputeProcess(42, "GPU-1", 2**30)]).kill
        (42,)
        >>> check.step([ComputeProcess(42, "GPU-1", 2**30)]).fault.reason
        'memory still held 31 s after its subtasks ended: pid 42 (1 GiB)'
        >>> check.step([]).free
        True
    """

    def __init__(self, device: DeviceRef, is_ours: Callable[[int], bool], timeout: float,
                 clock: Callable[[], float] = time.monotonic) -> None:
        self.device, self._is_ours, self.timeout, self._clock = device, is_ours, timeout, clock
        self._start = clock()

    def step(self, processes: Sequence[ComputeProcess]) -> Verdict:
        """Decide on the device's compute processes now (those of other devices are ignored)."""
        here = [p for p in processes if p.device_uuid == self.device.uuid]
        ours = tuple(p for p in here if self._is_ours(p.pid))
        others = tuple(p for p in here if not self._is_ours(p.pid))
        if not ours:
            return Verdict(True, others=others)
        waited = self._clock() - self._start
        if waited <= self.timeout:
            return Verdict(False, tuple(p.pid for p in ours), others)
        held = ", ".join(p.describe() for p in ours)
        fault = Fault(f"memory still held {waited:g} s after its subtasks ended: {held}", "hardware",
                      fail_subtasks=False)
        return Verdict(False, tuple(p.pid for p in ours), others, fault)
