"""Discovery through NVML (``nvidia-ml-py``, imported only when discovery runs).

:func:`open_nvml` returns ``None`` with a reason when the package is missing or the NVML
library cannot be initialised (no driver, no ``libnvidia-ml.so``), so the caller can fall back
to ``nvidia-smi``. Once NVML is up, a failing query is a :class:`DiscoveryError`: the driver is
there but broken, and guessing from another source would hide that. ``nvmlShutdown`` runs even
when a query raises (Ray skips it).

MIG: for a GPU whose current MIG mode is on, its MIG units are listed instead of the GPU, with
indexes ``"<gpu>:<n>"`` (``n`` counts the populated units, as ``nvidia-smi -L`` numbers them).
"""

from __future__ import annotations

import importlib
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from types import ModuleType
from typing import Any

from accelflow._errors import DiscoveryError
from accelflow.resources.gpu._device import GPUDevice

log = logging.getLogger("accelflow.resources.gpu")

NVML_MODULE = "pynvml"  # provided by the nvidia-ml-py package (extra accelflow[nvml])
_MIB = 1024 * 1024


class NvmlUnavailable(Exception):
    """NVML cannot be used here; ``str()`` says why (for the fallback's log and errors)."""


@contextmanager
def open_nvml() -> Iterator[ModuleType]:
    """Import and initialise NVML for the duration of the block; shut it down after.

    Raises:
        NvmlUnavailable: ``nvidia-ml-py`` is not installed or ``nvmlInit`` failed.
    """
    try:
        nvml = importlib.import_module(NVML_MODULE)
    except ImportError as exc:
        raise NvmlUnavailable(
            f"nvidia-ml-py is not installed ({exc}); pip install 'accelflow[nvml]'"
        ) from exc
    try:
        nvml.nvmlInit()
    except nvml.NVMLError as exc:
        raise NvmlUnavailable(f"NVML could not be initialised: {exc}") from exc
    try:
        yield nvml
    finally:
        try:
            nvml.nvmlShutdown()
        except nvml.NVMLError as exc:
            log.warning("nvmlShutdown failed: %s", exc)


def query_gpus(nvml: ModuleType) -> list[GPUDevice]:
    """Every GPU NVML sees, with MIG units in place of GPUs that have MIG on.

    Raises:
        DiscoveryError: an NVML query failed.
    """
    try:
        devices: list[GPUDevice] = []
        for i in range(nvml.nvmlDeviceGetCount()):
            handle = nvml.nvmlDeviceGetHandleByIndex(i)
            gpu = _describe(nvml, handle, index=str(i))
            units = _mig_units(nvml, handle, gpu)
            devices.extend(units or [gpu])
        return devices
    except nvml.NVMLError as exc:
        raise DiscoveryError(f"an NVML query failed: {exc}") from exc


def _describe(nvml: ModuleType, handle: Any, *, index: str) -> GPUDevice:
    return GPUDevice(
        index=index,
        uuid=_text(nvml.nvmlDeviceGetUUID(handle)),
        name=_text(nvml.nvmlDeviceGetName(handle)),
        memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(handle).total) // _MIB,
        pci_bus_id=_text(nvml.nvmlDeviceGetPciInfo(handle).busId),
    )


def _mig_units(nvml: ModuleType, handle: Any, gpu: GPUDevice) -> list[GPUDevice]:
    if not _mig_enabled(nvml, handle):
        return []
    units: list[GPUDevice] = []
    for slot in range(nvml.nvmlDeviceGetMaxMigDeviceCount(handle)):
        try:
            unit = nvml.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
        except nvml.NVMLError as exc:
            if _code(exc) == nvml.NVML_ERROR_NOT_FOUND:
                continue  # an unpopulated slot
            raise
        name = _text(nvml.nvmlDeviceGetName(unit))
        units.append(
            GPUDevice(
                index=f"{gpu.index}:{len(units)}",
                uuid=_text(nvml.nvmlDeviceGetUUID(unit)),
                name=name,
                memory_total_mib=int(nvml.nvmlDeviceGetMemoryInfo(unit).total) // _MIB,
                pci_bus_id=gpu.pci_bus_id,
                parent_index=gpu.index,
                parent_uuid=gpu.uuid,
                mig_profile=name.rpartition(" MIG ")[2] if " MIG " in name else None,
            )
        )
    return units


def _mig_enabled(nvml: ModuleType, handle: Any) -> bool:
    try:
        current, _pending = nvml.nvmlDeviceGetMigMode(handle)
    except nvml.NVMLError as exc:
        if _code(exc) in (nvml.NVML_ERROR_NOT_SUPPORTED, nvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            return False  # a GPU (or driver) without MIG
        raise
    return bool(current == nvml.NVML_DEVICE_MIG_ENABLE)


def _code(exc: BaseException) -> object:
    return getattr(exc, "value", None)


def _text(value: object) -> str:
    # nvidia-ml-py returns str in recent versions and bytes in older ones
    return value.decode() if isinstance(value, bytes) else str(value)
