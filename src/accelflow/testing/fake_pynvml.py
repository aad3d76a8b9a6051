"""A fake ``pynvml`` (nvidia-ml-py) over the fake ``nvidia-smi``'s GPUs, for hosts without one.

It reads the state file of :func:`accelflow.testing.install_fake_nvidia_smi` (the folder named by
``$ACCELFLOW_FAKE_NVML``) on every call, so NVML and ``nvidia-smi`` agree, and a test changes
both while processes run. It answers what accelflow asks of NVML, with nvidia-ml-py's names,
values and errors (``NVMLError`` with ``.value``, one subclass per code, e.g.
``NVMLError_Timeout``): discovery (count, handles by index and UUID, UUID, name, memory, PCI
bus id, MIG mode and units), probes (``nvmlDeviceGetTemperature``,
``nvmlDeviceGetRetiredPagesPendingStatus``, ``nvmlDeviceGetRemappedRows``), compute processes
(``nvmlDeviceGetComputeRunningProcesses``) and events (``nvmlEventSetCreate``,
``nvmlDeviceRegisterEvents``, ``nvmlEventSetWait_v2``, ``nvmlEventSetFree``). A GPU marked
``lost`` raises ``NVML_ERROR_GPU_IS_LOST``; an ``exit_code`` (a broken driver) makes
``nvmlInit`` fail. Events come from :func:`accelflow.testing.inject_nvml_event`, from any
process, through ``nvml-events.jsonl`` beside the state.

Use it with :func:`accelflow.testing.use_fake_nvml` (this process) or
:func:`accelflow.testing.install_fake_nvml` (child processes: ``import pynvml`` finds it).
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass, field
from types import SimpleNamespace
from typing import Any

STATE_ENV_VAR = "ACCELFLOW_FAKE_NVML"
STATE_FILE_NAME = "nvidia-smi.json"
EVENTS_FILE_NAME = "nvml-events.jsonl"

NVML_SUCCESS = 0
NVML_ERROR_UNINITIALIZED = 1
NVML_ERROR_INVALID_ARGUMENT = 2
NVML_ERROR_NOT_SUPPORTED = 3
NVML_ERROR_NO_PERMISSION = 4
NVML_ERROR_NOT_FOUND = 6
NVML_ERROR_DRIVER_NOT_LOADED = 9
NVML_ERROR_TIMEOUT = 10
NVML_ERROR_LIBRARY_NOT_FOUND = 12
NVML_ERROR_FUNCTION_NOT_FOUND = 13
NVML_ERROR_GPU_IS_LOST = 15
NVML_ERROR_UNKNOWN = 999
NVML_FEATURE_DISABLED = 0
NVML_FEATURE_ENABLED = 1
NVML_TEMPERATURE_GPU = 0
NVML_DEVICE_MIG_DISABLE = 0
NVML_DEVICE_MIG_ENABLE = 1
nvmlEventTypeSingleBitEccError = 0x1
nvmlEventTypeDoubleBitEccError = 0x2
nvmlEventTypePState = 0x4
nvmlEventTypeXidCriticalError = 0x8
nvmlEventTypeClock = 0x10
nvmlEventTypeNone = 0x0
_SUPPORTED_EVENTS = 0x1F
_NO_INSTANCE = 0xFFFFFFFF
_MIB = 1 << 20
_NAMES = {
    NVML_ERROR_UNINITIALIZED: "Uninitialized", NVML_ERROR_INVALID_ARGUMENT: "Invalid Argument",
    NVML_ERROR_NOT_SUPPORTED: "Not Supported", NVML_ERROR_NO_PERMISSION: "Insufficient Permissions",
    NVML_ERROR_NOT_FOUND: "Not Found", NVML_ERROR_DRIVER_NOT_LOADED: "Driver Not Loaded",
    NVML_ERROR_TIMEOUT: "Timeout", NVML_ERROR_LIBRARY_NOT_FOUND: "NVML Shared Library Not Found",
    NVML_ERROR_FUNCTION_NOT_FOUND: "Function Not Found", NVML_ERROR_GPU_IS_LOST: "GPU is lost",
    NVML_ERROR_UNKNOWN: "Unknown Error",
}


class NVMLError(Exception):
    """As nvidia-ml-py's: ``NVMLError(code)`` is an instance of that code's subclass."""

    _classes: dict[int, type[NVMLError]] = {}
    value: int

    def __new__(cls, value: int = NVML_ERROR_UNKNOWN) -> NVMLError:
        if cls is NVMLError:
            cls = NVMLError._classes.get(value, cls)
        error = Exception.__new__(cls)
        error.value = value
        return error

    def __init__(self, value: int = NVML_ERROR_UNKNOWN) -> None:
        super().__init__(value)

    def __str__(self) -> str:
        return _NAMES.get(self.value, f"NVML Error with code {self.value}")


def _subclass(code: int, name: str) -> type[NVMLError]:
    def new(cls: type[NVMLError], *args: object) -> NVMLError:
        error = Exception.__new__(cls)
        error.value = code
        return error

    cls = type(name, (NVMLError,), {"__new__": new, "__init__": lambda self, *args: Exception.__init__(self, code)})
    NVMLError._classes[code] = cls
    return cls


NVMLError_Uninitialized = _subclass(NVML_ERROR_UNINITIALIZED, "NVMLError_Uninitialized")
NVMLError_InvalidArgument = _subclass(NVML_ERROR_INVALID_ARGUMENT, "NVMLError_InvalidArgument")
NVMLError_NotSupported = _subclass(NVML_ERROR_NOT_SUPPORTED, "NVMLError_NotSupported")
NVMLError_NotFound = _subclass(NVML_ERROR_NOT_FOUND, "NVMLError_NotFound")
NVMLError_DriverNotLoaded = _subclass(NVML_ERROR_DRIVER_NOT_LOADED, "NVMLError_DriverNotLoaded")
NVMLError_Timeout = _subclass(NVML_ERROR_TIMEOUT, "NVMLError_Timeout")
NVMLError_LibraryNotFound = _subclass(NVML_ERROR_LIBRARY_NOT_FOUND, "NVMLError_LibraryNotFound")
NVMLError_GpuIsLost = _subclass(NVML_ERROR_GPU_IS_LOST, "NVMLError_GpuIsLost")
NVMLError_Unknown = _subclass(NVML_ERROR_UNKNOWN, "NVMLError_Unknown")


def nvmlErrorString(code: int) -> str:
    return str(NVMLError(code))


# -- the state ---------------------------------------------------------------------------------
_inits = 0


def _folder() -> str:
    folder = os.environ.get(STATE_ENV_VAR, "")
    if not folder or not os.path.exists(os.path.join(folder, STATE_FILE_NAME)):
        raise NVMLError(NVML_ERROR_LIBRARY_NOT_FOUND)
    return folder


def _state() -> dict[str, Any]:
    if _inits <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    with open(os.path.join(_folder(), STATE_FILE_NAME)) as f:
        state: dict[str, Any] = json.load(f)
    return state


@dataclass(frozen=True)
class _Handle:
    """A GPU, or a MIG unit of one (``unit`` >= 0)."""

    gpu: int
    unit: int = -1

    def info(self) -> tuple[dict[str, Any], dict[str, Any] | None]:
        gpus = _state()["gpus"]
        if self.gpu >= len(gpus):
            raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
        gpu = gpus[self.gpu]
        if gpu["lost"]:
            raise NVMLError(NVML_ERROR_GPU_IS_LOST)
        return gpu, (gpu["mig_devices"][self.unit] if self.unit >= 0 else None)


def nvmlInit() -> None:
    global _inits
    folder = _folder()
    with open(os.path.join(folder, STATE_FILE_NAME)) as f:
        if json.load(f)["exit_code"]:
            raise NVMLError(NVML_ERROR_DRIVER_NOT_LOADED)
    _inits += 1


def nvmlShutdown() -> None:
    global _inits
    if _inits <= 0:
        raise NVMLError(NVML_ERROR_UNINITIALIZED)
    _inits -= 1


def nvmlSystemGetDriverVersion() -> str:
    _state()
    return "550.00.00"


def nvmlDeviceGetCount() -> int:
    return len(_state()["gpus"])


def nvmlDeviceGetHandleByIndex(index: int) -> _Handle:
    handle = _Handle(int(index))
    handle.info()
    return handle


def nvmlDeviceGetHandleByUUID(uuid: str | bytes) -> _Handle:
    text = uuid.decode() if isinstance(uuid, bytes) else uuid
    for i, gpu in enumerate(_state()["gpus"]):
        units = [n for n, unit in enumerate(gpu["mig_devices"]) if unit["uuid"] == text]
        if gpu["uuid"] == text or units:
            handle = _Handle(i, units[0] if units else -1)
            handle.info()
            return handle
    raise NVMLError(NVML_ERROR_NOT_FOUND)


def nvmlDeviceGetUUID(handle: _Handle) -> str:
    gpu, unit = handle.info()
    return str(unit["uuid"] if unit else gpu["uuid"])


def nvmlDeviceGetIndex(handle: _Handle) -> int:
    handle.info()
    return handle.gpu


def nvmlDeviceGetName(handle: _Handle) -> str:
    gpu, unit = handle.info()
    return f"{gpu['name']} MIG {unit['profile']}" if unit else str(gpu["name"])


def nvmlDeviceGetMemoryInfo(handle: _Handle) -> SimpleNamespace:
    gpu, unit = handle.info()
    if unit is not None:
        size = re.search(r"(\d+)gb", unit["profile"])
        total = int(size.group(1)) * 1024 * _MIB if size else 0
        return SimpleNamespace(total=total, used=0, free=total)
    used = gpu["memory_used"] + sum(a["used_memory"] or 0 for a in _apps(gpu["uuid"]))
    return SimpleNamespace(total=gpu["memory_total"] * _MIB, used=used * _MIB,
                           free=(gpu["memory_total"] - used) * _MIB)


def nvmlDeviceGetPciInfo(handle: _Handle) -> SimpleNamespace:
    gpu, _ = handle.info()
    return SimpleNamespace(busId=gpu["pci_bus_id"], busIdLegacy=gpu["pci_bus_id"][4:])


def nvmlDeviceGetMigMode(handle: _Handle) -> list[int]:
    gpu, _ = handle.info()
    mode = NVML_DEVICE_MIG_ENABLE if gpu["mig_devices"] else NVML_DEVICE_MIG_DISABLE
    return [mode, mode]


def nvmlDeviceGetMaxMigDeviceCount(handle: _Handle) -> int:
    gpu, _ = handle.info()
    return len(gpu["mig_devices"])


def nvmlDeviceGetMigDeviceHandleByIndex(handle: _Handle, index: int) -> _Handle:
    gpu, _ = handle.info()
    if not 0 <= index < len(gpu["mig_devices"]):
        raise NVMLError(NVML_ERROR_NOT_FOUND)
    return _Handle(handle.gpu, index)


def nvmlDeviceGetDeviceHandleFromMigDeviceHandle(handle: _Handle) -> _Handle:
    return _Handle(handle.gpu)


# -- health ------------------------------------------------------------------------------------
def nvmlDeviceGetTemperature(handle: _Handle, sensor: int) -> int:
    gpu, _ = handle.info()
    if sensor != NVML_TEMPERATURE_GPU:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    return int(_supported(gpu["temperature"]))


def nvmlDeviceGetRetiredPagesPendingStatus(handle: _Handle) -> int:
    gpu, _ = handle.info()
    return NVML_FEATURE_ENABLED if _supported(gpu["retired_pages_pending"]) else NVML_FEATURE_DISABLED


def nvmlDeviceGetRemappedRows(handle: _Handle) -> tuple[int, int, int, int]:
    gpu, _ = handle.info()
    pending = int(bool(_supported(gpu["remapped_rows_pending"])))
    return 0, pending, pending, 0


def nvmlDeviceGetComputeRunningProcesses(handle: _Handle) -> list[SimpleNamespace]:
    gpu, _ = handle.info()
    return [SimpleNamespace(pid=a["pid"], usedGpuMemory=None if a["used_memory"] is None else a["used_memory"] * _MIB,
                            gpuInstanceId=_NO_INSTANCE, computeInstanceId=_NO_INSTANCE)
            for a in _apps(gpu["uuid"])]


def _apps(uuid: str) -> list[dict[str, Any]]:
    return [a for a in _state().get("compute_apps", []) if a["gpu_uuid"] == uuid
            and (not a.get("while_alive") or _alive(a["pid"]))]


def _alive(pid: int) -> bool:
    """Whether process ``pid`` runs (a zombie's memory is back already)."""
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


def _supported(value: Any) -> Any:
    if value is None:
        raise NVMLError(NVML_ERROR_NOT_SUPPORTED)
    return value


# -- events ------------------------------------------------------------------------------------
@dataclass
class _EventSet:
    offset: int  # in the events file: what was read
    registered: dict[str, int] = field(default_factory=dict)
    queue: list[dict[str, Any]] = field(default_factory=list)  # read, not returned yet
    freed: bool = False


def nvmlDeviceGetSupportedEventTypes(handle: _Handle) -> int:
    handle.info()
    return _SUPPORTED_EVENTS


def nvmlEventSetCreate() -> _EventSet:
    path = os.path.join(_folder(), EVENTS_FILE_NAME)
    _state()
    return _EventSet(os.path.getsize(path) if os.path.exists(path) else 0)


def nvmlDeviceRegisterEvents(handle: _Handle, event_types: int, event_set: _EventSet) -> None:
    gpu, _ = handle.info()
    event_set.registered[gpu["uuid"]] = event_set.registered.get(gpu["uuid"], 0) | int(event_types)


def nvmlEventSetWait_v2(event_set: _EventSet, timeout_ms: int) -> SimpleNamespace:
    """The next injected event of a registered GPU and type; ``NVML_ERROR_TIMEOUT`` after
    ``timeout_ms`` without one."""
    if event_set.freed:
        raise NVMLError(NVML_ERROR_INVALID_ARGUMENT)
    path = os.path.join(_folder(), EVENTS_FILE_NAME)
    deadline = time.monotonic() + timeout_ms / 1000
    while True:
        event_set.queue += _read_events(event_set, path)
        while event_set.queue:
            event = event_set.queue.pop(0)
            mask = event_set.registered.get(event["uuid"], 0) & event["type"]
            if mask:
                return SimpleNamespace(device=nvmlDeviceGetHandleByUUID(event["uuid"]), eventType=mask,
                                       eventData=event.get("data", 0), gpuInstanceId=_NO_INSTANCE,
                                       computeInstanceId=_NO_INSTANCE, timestamp=event.get("at", 0))
        if time.monotonic() >= deadline:
            raise NVMLError(NVML_ERROR_TIMEOUT)
        time.sleep(0.01)


nvmlEventSetWait = nvmlEventSetWait_v2


def nvmlEventSetFree(event_set: _EventSet) -> None:
    event_set.freed = True


def _read_events(event_set: _EventSet, path: str) -> list[dict[str, Any]]:
    """The complete event lines after the set's offset (the offset moves past them)."""
    if not os.path.exists(path):
        return []
    with open(path, "rb") as f:
        f.seek(event_set.offset)
        data = f.read()
    end = data.rfind(b"\n") + 1
    event_set.offset += end
    return [json.loads(line) for line in data[:end].splitlines() if line.strip()]
