"""An honest fake of PyTorch's device memory, for tests on machines without a GPU: what
accelflow's per-subtask memory limit (``runtime/subtask/_memory_limit.py``) and warm processes
call, over the GPUs of the fake ``nvidia-smi`` (see :mod:`.cuda`), enforcing
``torch.cuda.set_per_process_memory_fraction`` as PyTorch's allocator does.

Tensors are sizes only (a device tensor holds no data here): ``torch.empty(n, dtype=torch.uint8,
device="cuda")`` takes ``n`` bytes of the device's memory until it is garbage collected.
:func:`accelflow.testing.use_fake_torch` makes it the ``torch`` of a test and its subtasks.

Example (a fake 8 GiB GPU, limited to 1/8 of it):
    >>> from accelflow.testing import FakeGPU, use_fake_nvidia_smi, use_fake_torch
    >>> _ = use_fake_nvidia_smi(monkeypatch, tmp_path, [FakeGPU(index=0, memory_total=8192)])
    >>> _ = use_fake_torch(monkeypatch, tmp_path)
    >>> import torch
    >>> torch.cuda.set_per_process_memory_fraction(1 / 8, 0)
    >>> kept = [torch.empty(2**29, dtype=torch.uint8, device="cuda") for _ in range(2)]
    >>> torch.cuda.memory_allocated()
    1073741824
    >>> torch.empty(1, dtype=torch.uint8, device="cuda")
    Traceback (most recent call last):
    torch.OutOfMemoryError: CUDA out of memory. Tried to allocate 1 bytes. GPU 0 has a total capacity of 8.00 GiB ...
"""

from __future__ import annotations

import math
import weakref
from dataclasses import dataclass
from typing import Any

from accelflow.testing.fake_torch import cuda
from accelflow.testing.fake_torch.cuda import OutOfMemoryError

__version__ = "0.0.0+accelflow.fake"
__all__ = ["OutOfMemoryError", "Tensor", "cuda", "empty", "float32", "uint8", "zeros"]


@dataclass(frozen=True, slots=True)
class dtype:  # noqa: N801 - torch's name
    name: str
    itemsize: int

    def __repr__(self) -> str:
        return f"torch.{self.name}"


uint8 = dtype("uint8", 1)
float32 = dtype("float32", 4)


class Tensor:
    """A tensor's size and device; on a CUDA device it holds its bytes of the device's memory
    until it is collected."""

    def __init__(self, shape: tuple[int, ...], dtype: dtype, device: str) -> None:
        self.shape, self.dtype, self.device = shape, dtype, device
        self.nbytes = math.prod(shape) * dtype.itemsize
        if device.startswith("cuda"):
            index = cuda.allocate(self.nbytes, device)
            weakref.finalize(self, cuda.release, self.nbytes, index)

    def numel(self) -> int:
        return math.prod(self.shape)

    def element_size(self) -> int:
        return self.dtype.itemsize

    def __repr__(self) -> str:
        return f"tensor(shape={self.shape}, dtype={self.dtype!r}, device={self.device!r})"


def empty(*size: Any, dtype: dtype = float32, device: Any = "cpu") -> Tensor:
    shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], tuple | list) else tuple(size)
    return Tensor(tuple(int(n) for n in shape), dtype, str(device))


def zeros(*size: Any, dtype: dtype = float32, device: Any = "cpu") -> Tensor:
    return empty(*size, dtype=dtype, device=device)
