"""``torch.cuda`` of the fake ``torch``: the devices of the fake ``nvidia-smi`` on ``PATH`` (as
CUDA sees the driver's), restricted and ordered by ``CUDA_VISIBLE_DEVICES`` (indexes or UUIDs,
as CUDA reads it: unset is all, empty is none), each with an allocator that keeps the per-process
memory fraction as PyTorch's caching allocator does: an allocation that would take the memory
allocated on the device past ``fraction * total_memory`` raises :class:`OutOfMemoryError`.

A device's ``total_memory`` is what CUDA sees: the fake GPU's ``memory.total`` less its
``memory.reserved`` (MiB). Only what accelflow calls is here.
"""

from __future__ import annotations

import json
import os
import shutil
from dataclasses import dataclass
from pathlib import Path
from typing import Any

_MIB = 1 << 20
_GIB = 1 << 30
STATE_FILE_NAME = "nvidia-smi.json"  # the fake nvidia-smi's (``accelflow.testing._nvidia_smi``)


class OutOfMemoryError(RuntimeError):
    """``torch.OutOfMemoryError`` (``torch.cuda.OutOfMemoryError`` is the same class)."""


OutOfMemoryError.__module__ = "torch"


@dataclass(frozen=True, slots=True)
class _CudaDeviceProperties:
    name: str
    total_memory: int
    uuid: str


@dataclass
class _Allocator:
    """One device's memory in this process."""

    properties: _CudaDeviceProperties
    fraction: float = 1.0
    allocated: int = 0
    peak: int = 0

    def allocate(self, nbytes: int, index: int) -> None:
        allowed = int(self.fraction * self.properties.total_memory)
        if self.allocated + nbytes > allowed:
            total = self.properties.total_memory
            raise OutOfMemoryError(
                f"CUDA out of memory. Tried to allocate {_gib(nbytes)}. GPU {index} has a total capacity of "
                f"{_gib(total)} of which {_gib(total - self.allocated)} is free. Of the allocated memory "
                f"{_gib(self.allocated)} is allocated by PyTorch, and 0 bytes is reserved by PyTorch but "
                f"unallocated. This process is allowed {_gib(allowed)} (set_per_process_memory_fraction "
                f"{self.fraction:g}).")
        self.allocated += nbytes
        self.peak = max(self.peak, self.allocated)

    def free(self, nbytes: int) -> None:
        self.allocated -= nbytes


def _gib(n: int) -> str:
    return f"{n / _GIB:.2f} GiB" if n >= _GIB else f"{n / _MIB:.2f} MiB" if n >= _MIB else f"{n} bytes"


_devices: list[_Allocator] | None = None


def _visible() -> list[_Allocator]:
    """The devices CUDA sees in this process (read once, at the first call, as CUDA does)."""
    global _devices
    if _devices is None:
        gpus = _driver_gpus()
        wanted = os.environ.get("CUDA_VISIBLE_DEVICES")
        if wanted is not None:
            gpus = _select(gpus, [w.strip() for w in wanted.split(",") if w.strip()])
        _devices = [_Allocator(_CudaDeviceProperties(
            g["name"], (g["memory_total"] - g.get("memory_reserved", 0)) * _MIB, g["uuid"])) for g in gpus]
    return _devices


def _driver_gpus() -> list[dict[str, Any]]:
    smi = shutil.which("nvidia-smi")
    state = Path(smi).parent / STATE_FILE_NAME if smi else None
    if state is None or not state.is_file():
        return []
    gpus: list[dict[str, Any]] = json.loads(state.read_text())["gpus"]
    return [g for g in gpus if not g.get("lost")]


def _select(gpus: list[dict[str, Any]], wanted: list[str]) -> list[dict[str, Any]]:
    chosen = []
    for entry in wanted:  # CUDA stops at the first entry that names no device
        match = [g for g in gpus if entry in (str(g["index"]), g["uuid"])]
        if not match:
            break
        chosen += match
    return chosen


def _device(device: Any = None) -> tuple[int, _Allocator]:
    index = device if isinstance(device, int) else int(str(device).partition(":")[2] or 0) if device else 0
    devices = _visible()
    if not devices:
        raise RuntimeError("Found no NVIDIA driver on your system.")
    if not 0 <= index < len(devices):
        raise RuntimeError(f"CUDA error: invalid device ordinal (device {index} of {len(devices)})")
    return index, devices[index]


def is_available() -> bool:
    return bool(_visible())


def device_count() -> int:
    return len(_visible())


def init() -> None:
    _device()


def synchronize(device: Any = None) -> None:
    _device(device)


def current_device() -> int:
    return 0


def get_device_properties(device: Any = None) -> _CudaDeviceProperties:
    return _device(device)[1].properties


def set_per_process_memory_fraction(fraction: float, device: Any = None) -> None:
    """As PyTorch's: a float in [0, 1] of the device's ``total_memory``."""
    allocator = _device(device)[1]
    if not isinstance(fraction, float):
        raise TypeError("Invalid type for fraction argument, must be `float`")
    if fraction < 0 or fraction > 1:
        raise ValueError(f"Invalid fraction value: {fraction}. Allowed range: 0~1")
    allocator.fraction = fraction


def get_per_process_memory_fraction(device: Any = None) -> float:
    """The fraction set (1.0 when none was)."""
    return _device(device)[1].fraction


def memory_allocated(device: Any = None) -> int:
    return _device(device)[1].allocated


def max_memory_allocated(device: Any = None) -> int:
    return _device(device)[1].peak


def mem_get_info(device: Any = None) -> tuple[int, int]:
    allocator = _device(device)[1]
    return allocator.properties.total_memory - allocator.allocated, allocator.properties.total_memory


def empty_cache() -> None:
    """Nothing is cached: freed memory goes back at once."""


def allocate(nbytes: int, device: Any) -> int:
    """For the fake's tensors: take ``nbytes`` on ``device``; its index."""
    index, allocator = _device(device)
    allocator.allocate(nbytes, index)
    return index


def release(nbytes: int, index: int) -> None:
    """For the fake's tensors: give ``nbytes`` on device ``index`` back."""
    if _devices is not None:
        _devices[index].free(nbytes)
