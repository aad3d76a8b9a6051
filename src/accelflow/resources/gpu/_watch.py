"""NVML's fault events of a TaskExecutor's GPUs: Xid critical errors and double-bit ECC errors.

As NVIDIA's Kubernetes device plugin does: one event set (``nvmlEventSetCreate``), each GPU
registered for ``nvmlEventTypeXidCriticalError | nvmlEventTypeDoubleBitEccError`` (as far as
it supports them: ``nvmlDeviceGetSupportedEventTypes``), then ``nvmlEventSetWait_v2`` in a
loop with a timeout (``NVML_ERROR_TIMEOUT`` is no event). Each event becomes a
:class:`~accelflow.resources.Fault` (an Xid classified by :mod:`._xid`), naming the GPU by UUID;
:func:`devices_hit` says which of the TaskExecutor's devices (the GPU, or its MIG units) it hits.

Example (the fake NVML of :mod:`accelflow.testing` here; the same on a real GPU):
    >>> from accelflow.resources.gpu._nvml import open_nvml
    >>> from accelflow.testing import fake_gpu_uuid, inject_nvml_event, use_fake_nvml
    >>> _ = use_fake_nvml(monkeypatch, tmp_path, 2)
    >>> with open_nvml() as nvml, NvmlEventWatcher(nvml, [fake_gpu_uuid(1)]) as watcher:
    ...     print(watcher.wait(0.01))                   # nothing within 10 ms
    ...     inject_nvml_event(tmp_path, fake_gpu_uuid(1), xid=79)
    ...     print(watcher.wait(5.0).fault.reason)
    None
    Xid 79 (GPU has fallen off the bus)
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from types import ModuleType, TracebackType
from typing import Any

from accelflow._errors import DiscoveryError
from accelflow.resources import Fault
from accelflow.resources.gpu._device import GPUDevice
from accelflow.resources.gpu._xid import DOUBLE_BIT_ECC, xid_fault

_NO_INSTANCE = 0xFFFFFFFF  # the event is for the whole GPU, not one MIG instance


@dataclass(frozen=True, slots=True)
class NvmlEvent:
    """One fault NVML reported.

    Attributes:
        uuid: the physical GPU's UUID.
        fault: what it means for the device.
        gpu_instance: the MIG GPU instance, when NVML names one.
        compute_instance: the MIG compute instance, when NVML names one.
    """

    uuid: str
    fault: Fault
    gpu_instance: int | None = None
    compute_instance: int | None = None


class NvmlEventWatcher:
    """Registers GPUs for fault events and waits for them (one thread; close it after)."""

    def __init__(self, nvml: ModuleType, uuids: Sequence[str]) -> None:
        self._nvml, self.uuids = nvml, list(dict.fromkeys(uuids))
        self._set: Any = None
        #: GPUs that cannot report fault events, and why (they are watched by probes only)
        self.unwatched: dict[str, str] = {}

    def __enter__(self) -> NvmlEventWatcher:
        self.start()
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        self.close()

    def start(self) -> None:
        """Create the event set and register every GPU that supports the events.

        Raises:
            DiscoveryError: NVML cannot create an event set.
        """
        nvml = self._nvml
        wanted = nvml.nvmlEventTypeXidCriticalError | nvml.nvmlEventTypeDoubleBitEccError
        try:
            self._set = nvml.nvmlEventSetCreate()
        except nvml.NVMLError as exc:
            raise DiscoveryError(f"NVML cannot create an event set: {exc}") from exc
        for uuid in self.uuids:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                supported = nvml.nvmlDeviceGetSupportedEventTypes(handle) & wanted
                if not supported:
                    self.unwatched[uuid] = "it reports neither Xid nor double-bit ECC events"
                    continue
                nvml.nvmlDeviceRegisterEvents(handle, supported, self._set)
            except nvml.NVMLError as exc:
                self.unwatched[uuid] = f"NVML: {exc}"

    def wait(self, timeout: float) -> NvmlEvent | None:
        """The next fault event, or ``None`` after ``timeout`` seconds without one (or one
        that is no fault).

        Raises:
            DiscoveryError: NVML stopped reporting events (the caller starts again, and its
                probes keep watching meanwhile).
        """
        nvml = self._nvml
        try:
            data = nvml.nvmlEventSetWait_v2(self._set, max(1, int(timeout * 1000)))
        except nvml.NVMLError as exc:
            if getattr(exc, "value", None) == nvml.NVML_ERROR_TIMEOUT:
                return None
            raise DiscoveryError(f"waiting for NVML events failed: {exc}") from exc
        if data.eventType & nvml.nvmlEventTypeXidCriticalError:
            fault = xid_fault(int(data.eventData))
        elif data.eventType & nvml.nvmlEventTypeDoubleBitEccError:
            fault = DOUBLE_BIT_ECC
        else:
            return None
        try:
            uuid = _text(nvml.nvmlDeviceGetUUID(data.device))
        except nvml.NVMLError as exc:
            uuid = f"unknown GPU ({exc})"
        gi, ci = int(data.gpuInstanceId), int(data.computeInstanceId)
        return NvmlEvent(uuid, fault, None if gi == _NO_INSTANCE else gi, None if ci == _NO_INSTANCE else ci)

    def close(self) -> None:
        """Free the event set (safe to call twice)."""
        if self._set is not None:
            event_set, self._set = self._set, None
            try:
                self._nvml.nvmlEventSetFree(event_set)
            except self._nvml.NVMLError:
                pass


def devices_hit(event: NvmlEvent, devices: Sequence[GPUDevice]) -> list[GPUDevice]:
    """The devices ``event`` hits: the GPU with its UUID, or its MIG units (all of them: which
    MIG instance an address is is not known to discovery). An event NVML could not name a GPU
    for hits every device (as the device plugin marks them all)."""
    if event.uuid.startswith("unknown GPU"):
        return list(devices)
    return [d for d in devices if event.uuid in (d.uuid, d.parent_uuid)]


def _text(value: object) -> str:
    return value.decode() if isinstance(value, bytes) else str(value)
