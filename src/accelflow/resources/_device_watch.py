"""How a TaskExecutor watches the devices one driver discovered: the driver's
:meth:`~accelflow.resources.ExternalResourceDriver.device_watch`.

A :class:`DeviceWatch` is the driver's eyes on its devices, vendor-neutral: it probes them
(:class:`~accelflow.resources.ProbeResult` per device address), waits for their fault events
(:class:`~accelflow.resources.Fault` per address) and lists the processes computing on them
(:class:`~accelflow.resources.ComputeProcess`). The TaskExecutor's health monitor feeds what it
says to one :class:`~accelflow.resources.DeviceHealth` per device, and the processes to a
:class:`~accelflow.resources.LeftoverCheck` after a subtask ends. A driver without a watch
(the default) has devices nobody watches: they are trusted for the TaskExecutor's life.

Example (a driver whose devices answer a probe and never fault)::

    from accelflow.resources import DeviceWatch, ExternalResourceDriver, ProbeResult

    class FPGAWatch(DeviceWatch):
        def __init__(self, addresses):
            self.addresses = addresses
        def probe(self):
            return {a: ProbeResult(reachable=True) for a in self.addresses}

    class FPGADriver(ExternalResourceDriver):
        ...
        def device_watch(self, infos):
            return FPGAWatch([i.address for i in infos])

    assert FPGAWatch(["0"]).probe()["0"].reachable
"""

from __future__ import annotations

import time
from abc import ABC, abstractmethod
from collections.abc import Mapping

from accelflow.resources._health import Fault, ProbeResult
from accelflow.resources._reconcile import ComputeProcess


class DeviceWatch(ABC):
    """Probes, fault events and compute processes of one resource's devices on one
    TaskExecutor. Called from one thread (the TaskExecutor's health monitor) only."""

    @abstractmethod
    def probe(self) -> Mapping[str, ProbeResult]:
        """Probe every device now: its result by device address (a device left out is
        unknown, neither good nor bad)."""

    def wait(self, timeout: float) -> list[tuple[str, Fault]]:
        """Fault events within ``timeout`` seconds, by device address (the default has no
        events: it sleeps). Returns as soon as one came; ``[]`` after the timeout.

        Raises:
            DiscoveryError: the event source stopped (the monitor probes on, and asks again).
        """
        time.sleep(max(0.0, timeout))
        return []

    def compute_processes(self) -> list[ComputeProcess]:
        """The processes computing on the devices now (the default knows none).

        Raises:
            DiscoveryError: they cannot be listed (the monitor then takes the devices as free).
        """
        return []

    def uuid(self, address: str) -> str | None:
        """The device's UUID, which :class:`ComputeProcess` values name it by (``None``:
        unknown; its processes are then not checked)."""
        return None

    def close(self) -> None:
        """Stop watching (free event sets, shut libraries down); safe to call twice."""
