"""Which array library runs an example's maths: CuPy or PyTorch on the assigned GPU, else
NumPy on the CPU; shared by the Fashion-MNIST and MatrixVectorMul examples."""

from __future__ import annotations

import os
from typing import Any

import numpy as np


def pick_backend(device: Any, resource: str | None) -> tuple[Any, str]:
    """Pick CuPy, then PyTorch, then NumPy, and say why."""
    if device is None:
        why = "no GPU resource configured" if resource is None else \
            f"no '{resource}' device info (discovery found none or degraded)"
        return np, f"NumPy on the CPU: {why}"
    index = int(device.get_property("index") or 0)
    # With device isolation the subtask sees only its GPU(s), renumbered from 0.
    visible = os.environ.get("CUDA_VISIBLE_DEVICES")
    local = 0 if visible is not None else index
    name = f"{resource} {device.address}" + (f" ({device.get_property('name')})" if device.get_property("name") else "")
    problems = []
    try:
        import cupy

        cupy.cuda.Device(local).use()
        return cupy, f"CuPy on {name}, CUDA device {local} in this process"
    except Exception as exc:  # ImportError, or no CUDA runtime: try the next backend
        problems.append(f"CuPy: {type(exc).__name__}: {exc}".splitlines()[0])
    try:
        import torch

        if not torch.cuda.is_available():
            raise RuntimeError("torch.cuda.is_available() is False")
        return TorchXP(torch, torch.device(f"cuda:{local}")), f"PyTorch on {name}, cuda:{local}"
    except Exception as exc:
        problems.append(f"PyTorch: {type(exc).__name__}: {exc}".splitlines()[0])
    return np, (f"NumPy on the CPU although {name} was assigned: " + "; ".join(problems)
                + " (pip install 'accelflow[cuda]' for CuPy)")


class TorchXP:
    """The few array functions the model needs, on a torch device."""

    def __init__(self, torch: Any, device: Any) -> None:
        self.torch, self.device = torch, device

    def asarray(self, x: Any) -> Any:
        if isinstance(x, self.torch.Tensor):  # e.g. a map_batches(device=...) batch
            return x.to(self.device)
        return self.torch.as_tensor(np.asarray(x), device=self.device)

    def argmax(self, x: Any, axis: int) -> Any:
        return self.torch.argmax(x, dim=axis)


def array_module(array: Any, fallback: Any) -> Any:
    """The array library of a ``map_batches(device=...)`` batch array: CuPy, torch (on the
    tensor's device) or, for a NumPy array (the CPU fallback), ``fallback``."""
    library = type(array).__module__.split(".")[0]
    if library == "cupy":
        import cupy

        return cupy
    if library == "torch":
        import torch

        return TorchXP(torch, array.device)
    return fallback


def to_numpy(array: Any) -> np.ndarray[Any, Any]:
    if hasattr(array, "get"):  # CuPy
        return np.asarray(array.get())
    if hasattr(array, "cpu"):  # torch
        return np.asarray(array.cpu().numpy())
    return np.asarray(array)
