"""The GPU driver's :class:`~accelflow.resources.DeviceWatch`: NVML where it loads (fault events
and probes through one NVML session for the TaskExecutor's life), else ``nvidia-smi`` (probes
and compute processes only: it has no events).

The source follows discovery's (``ACCELFLOW_GPU_DISCOVERY``: ``nvml``, ``nvidia-smi`` or
``auto``, NVML first). With neither, the GPUs are not watched (a discovery script's GPUs of
another vendor). NVML events that stop coming (``nvmlEventSetWait`` fails) are logged once;
probes go on.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Collection, Mapping
from types import ModuleType

from accelflow._errors import ConfigError, DiscoveryError
from accelflow.resources import ComputeProcess, DeviceWatch, ExternalResourceInfo, Fault, ProbeResult
from accelflow.resources.gpu import _nvml, _smi
from accelflow.resources.gpu._device import GPUDevice
from accelflow.resources.gpu._params import discovery_source
from accelflow.resources.gpu._probe import nvml_compute_processes, nvml_probe, smi_compute_processes, smi_probe
from accelflow.resources.gpu._watch import NvmlEventWatcher, devices_hit

log = logging.getLogger("accelflow.resources.gpu")


def gpu_device(info: ExternalResourceInfo) -> GPUDevice:
    """The :class:`GPUDevice` an info describes (the driver's own properties).

    Example:
        >>> gpu_device(ExternalResourceInfo(index="0:1", parent_index="0")).is_mig
        True
    """
    memory = info.get_property("memory_total")
    return GPUDevice(
        index=info.address, uuid=info.get_property("uuid"), name=info.get_property("name"),
        memory_total_mib=int(memory) if memory and memory.isdigit() else None,
        pci_bus_id=info.get_property("pci_bus_id"), parent_index=info.get_property("parent_index"),
        parent_uuid=info.get_property("parent_uuid"), mig_profile=info.get_property("mig_profile"),
    )


class GPUWatch(DeviceWatch):
    """Watches GPUs through NVML (``nvml`` set) or ``nvidia-smi`` (``executable`` set)."""

    def __init__(self, devices: list[GPUDevice], *, nvml: ModuleType | None = None,
                 executable: str | None = None, session: contextlib.ExitStack | None = None) -> None:
        self.devices, self._nvml, self._executable = devices, nvml, executable
        self._session = session or contextlib.ExitStack()
        self._events: NvmlEventWatcher | None = None
        if nvml is not None:
            uuids = [u for d in devices for u in [d.parent_uuid if d.is_mig else d.uuid] if u]
            try:
                self._events = NvmlEventWatcher(nvml, uuids)
                self._events.start()
            except DiscoveryError as exc:
                log.warning("GPU fault events are not watched (probes are): %s", exc)
                self._events = None
            if self._events is not None and self._events.unwatched:
                log.info("GPUs without fault events (probes watch them): %s", self._events.unwatched)

    @classmethod
    def open(cls, infos: Collection[ExternalResourceInfo]) -> GPUWatch | None:
        """A watch of ``infos`` through the source discovery uses, or ``None`` when neither
        NVML nor ``nvidia-smi`` is there."""
        devices = [gpu_device(info) for info in sorted(infos)]
        try:
            source = discovery_source()
        except ConfigError:
            source = "auto"
        if source != "nvidia-smi":
            session = contextlib.ExitStack()
            try:
                nvml = session.enter_context(_nvml.open_nvml())
                return cls(devices, nvml=nvml, session=session)
            except _nvml.NvmlUnavailable as exc:
                log.debug("GPUs not watched through NVML: %s", exc)
        executable = _smi.find_nvidia_smi()
        return None if executable is None else cls(devices, executable=executable)

    def probe(self) -> Mapping[str, ProbeResult]:
        if self._nvml is not None:
            return nvml_probe(self._nvml, self.devices)
        assert self._executable is not None
        return smi_probe(self._executable, self.devices)

    def wait(self, timeout: float) -> list[tuple[str, Fault]]:
        if self._events is None:
            return super().wait(timeout)
        try:
            event = self._events.wait(timeout)
        except DiscoveryError as exc:
            log.warning("GPU fault events stopped (probes go on): %s", exc)
            self._events.close()
            self._events = None
            return []
        if event is None:
            return []
        return [(d.index, event.fault) for d in devices_hit(event, self.devices)]

    def compute_processes(self) -> list[ComputeProcess]:
        if self._nvml is not None:
            return nvml_compute_processes(self._nvml, self.devices)
        assert self._executable is not None
        return smi_compute_processes(self._executable)

    def uuid(self, address: str) -> str | None:
        device = next((d for d in self.devices if d.index == address), None)
        if device is None:
            return None
        return device.parent_uuid if device.is_mig else device.uuid

    def close(self) -> None:
        if self._events is not None:
            self._events.close()
            self._events = None
        self._session.close()
