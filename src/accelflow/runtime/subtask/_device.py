"""The device stage of ``map_batches(device=...)``: batches go to the GPU through pinned
host buffers and a copy stream, overlapped with the compute of the batch before.

Per batch: the chunks of each numeric column are gathered straight into one of ``prefetch``
pinned host buffers (a ring; no batch is assembled on the host first), copied to the device
asynchronously on the copy stream, and an event is recorded. A batch is computed (on the
compute stream, after waiting for its event) once ``prefetch`` batches are in flight, so batch
``i + 1`` is being copied while batch ``i`` computes. Its outputs are copied back into pinned
host memory on the compute stream without waiting; the host waits for them only after it has
started the next batch's compute, so the GPU computes batch ``i + 1`` while the host reads and
copies the batches after it. :meth:`DeviceStage.drain` computes and returns every batch still
in flight (the operator calls it at a checkpoint barrier, at the end of the input and when
the pipeline has stood still for :data:`DRAIN_AFTER_S`). Outputs keep the batches' order and
come back as NumPy arrays (in pinned memory, which the library's pinned pool reuses once the
arrays are gone).

Backends (one class each, behind :class:`DeviceBackend`): CuPy, then PyTorch. Without one,
``device="auto"`` falls back to :class:`PlainStage` (plain calls on NumPy batches) and says
why in the log; ``device="cuda"`` fails with a :class:`~accelflow.ConfigError`.
"""

from __future__ import annotations

import logging
import time
from abc import ABC, abstractmethod
from collections import deque
from collections.abc import Callable
from typing import Any, ContextManager

import numpy as np

from accelflow._errors import ConfigError
from accelflow.dataflow import Columns, MapBatchesSpec, to_batch

_log = logging.getLogger("accelflow.runtime")

DEVICES = (None, "auto", "cuda")
DEVICE_BACKENDS = (None, "cupy", "torch")
DEFAULT_PREFETCH = 2
MAX_PREFETCH = 64
#: in-flight batches are drained when no batch came for this long (bounds the latency the
#: pipeline adds to an input that pauses; a source that keeps the operator busy never waits)
DRAIN_AFTER_S = 0.002
_NUMERIC = "biufc"  # NumPy dtype kinds that move to the device (bool, ints, floats, complex)


class DeviceBackend(ABC):
    """An array library's pinned memory, streams and events, on the current CUDA device
    (device 0 under ``CUDA_VISIBLE_DEVICES`` isolation: the subtask's assigned GPU)."""

    name: str

    @abstractmethod
    def device_count(self) -> int:
        """Visible CUDA devices, e.g. ``1`` with ``CUDA_VISIBLE_DEVICES=3``."""

    @abstractmethod
    def pinned(self, nbytes: int) -> np.ndarray[Any, Any]:
        """A page-locked host buffer of ``nbytes`` bytes, as a uint8 NumPy array."""

    @abstractmethod
    def stream(self) -> Any:
        """A new non-default stream."""

    @abstractmethod
    def upload(self, host: np.ndarray[Any, Any], copy: Any, compute: Any) -> Any:
        """Start copying the pinned ``host`` array to the device on stream ``copy``; the
        device array is used on stream ``compute``."""

    @abstractmethod
    def record(self, stream: Any) -> Any:
        """An event recorded on ``stream`` now."""

    @abstractmethod
    def wait(self, stream: Any, event: Any) -> None:
        """Make ``stream``'s later work wait for ``event`` (without blocking the host)."""

    @abstractmethod
    def synchronize(self, event: Any) -> None:
        """Block the host until ``event`` has happened."""

    @abstractmethod
    def computing(self, stream: Any) -> ContextManager[Any]:
        """Make ``stream`` the current one for the block."""

    @abstractmethod
    def download(self, value: Any, stream: Any) -> Any:
        """Start copying a device array to pinned host memory on ``stream`` (without waiting);
        anything else unchanged. :meth:`host` turns the result into NumPy once an event
        recorded on ``stream`` afterwards has happened."""

    def host(self, value: Any) -> Any:
        """What :meth:`download` returned, as NumPy where it was a device array."""
        return value


class CupyBackend(DeviceBackend):
    name = "cupy"

    def __init__(self) -> None:
        import cupy

        self.cupy = cupy

    def device_count(self) -> int:
        return int(self.cupy.cuda.runtime.getDeviceCount())

    def pinned(self, nbytes: int) -> np.ndarray[Any, Any]:
        memory = self.cupy.cuda.alloc_pinned_memory(nbytes)
        return np.frombuffer(memory, dtype=np.uint8, count=nbytes)  # keeps ``memory`` alive

    def stream(self) -> Any:
        return self.cupy.cuda.Stream(non_blocking=True)

    def upload(self, host: np.ndarray[Any, Any], copy: Any, compute: Any) -> Any:
        with compute:  # CuPy's pool is per stream: the array is freed where it is used
            array = self.cupy.empty(host.shape, dtype=host.dtype)
        array.set(host, stream=copy)
        return array

    def record(self, stream: Any) -> Any:
        return stream.record()

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    def computing(self, stream: Any) -> ContextManager[Any]:
        return stream  # type: ignore[no-any-return]

    def download(self, value: Any, stream: Any) -> Any:
        if not isinstance(value, self.cupy.ndarray):
            return value
        value = self.cupy.ascontiguousarray(value)
        host = self.pinned(max(value.nbytes, 1))[:value.nbytes].view(value.dtype).reshape(value.shape)
        value.get(stream=stream, out=host, blocking=False)
        return host


class TorchBackend(DeviceBackend):
    name = "torch"

    def __init__(self) -> None:
        import torch

        self.torch = torch
        self.device: Any = None

    def device_count(self) -> int:
        cuda = self.torch.cuda
        if not cuda.is_available():
            return 0
        self.device = self.torch.device("cuda", cuda.current_device())
        return int(cuda.device_count())

    def pinned(self, nbytes: int) -> np.ndarray[Any, Any]:
        tensor = self.torch.empty(nbytes, dtype=self.torch.uint8, pin_memory=True)
        return tensor.numpy()  # type: ignore[no-any-return]  # shares (and keeps) the memory

    def stream(self) -> Any:
        return self.torch.cuda.Stream()

    def upload(self, host: np.ndarray[Any, Any], copy: Any, compute: Any) -> Any:
        with self.torch.cuda.stream(copy):
            tensor = self.torch.from_numpy(host).to(self.device, non_blocking=True)
        tensor.record_stream(compute)  # allocated on ``copy``, used on ``compute``
        return tensor

    def record(self, stream: Any) -> Any:
        event = self.torch.cuda.Event()
        event.record(stream)
        return event

    def wait(self, stream: Any, event: Any) -> None:
        stream.wait_event(event)

    def synchronize(self, event: Any) -> None:
        event.synchronize()

    def computing(self, stream: Any) -> ContextManager[Any]:
        return self.torch.cuda.stream(stream)  # type: ignore[no-any-return]

    def download(self, value: Any, stream: Any) -> Any:
        if not isinstance(value, self.torch.Tensor) or not value.is_cuda:
            return value
        host = self.torch.empty(value.shape, dtype=value.dtype, pin_memory=True)
        with self.torch.cuda.stream(stream):
            host.copy_(value.detach(), non_blocking=True)
        return host

    def host(self, value: Any) -> Any:
        return value.detach().numpy() if isinstance(value, self.torch.Tensor) else value


BACKENDS: dict[str, type[DeviceBackend]] = {"cupy": CupyBackend, "torch": TorchBackend}


class PlainStage:
    """The NumPy fallback: ``fn`` is called on the host batch at once (as without a device)."""

    backend = "numpy"

    def __init__(self, fn: Callable[[Any], Any]) -> None:
        self.fn = fn

    def submit(self, chunks: list[Any]) -> list[Any]:
        return [self.fn(to_batch(chunks))]

    def drain(self) -> list[Any]:
        return []

    def deadline(self) -> float | None:
        return None


class _Slot:
    """One pinned buffer per column, grown as needed, and the event of its last copy."""

    def __init__(self) -> None:
        self.buffers: list[np.ndarray[Any, Any]] = []
        self.copied: Any = None


class DeviceStage:
    """At most ``prefetch`` batches copied to the device ahead of their compute, and one
    computed batch whose outputs are still on their way back."""

    def __init__(self, backend: DeviceBackend, fn: Callable[[Any], Any], prefetch: int) -> None:
        self.backend, self.fn, self.prefetch = backend, fn, prefetch
        self.ring = [_Slot() for _ in range(prefetch)]
        self.next_slot = 0
        self.copy_stream, self.compute_stream = backend.stream(), backend.stream()
        self.in_flight: deque[tuple[Any, Any]] = deque()  # (device batch, its copy event)
        self.computing: deque[tuple[Any, Any]] = deque()  # (outputs on their way, their event)
        self.last_activity = 0.0

    def submit(self, chunks: list[Any]) -> list[Any]:
        """Start moving the batch of ``chunks`` to the device; the outputs of batches done
        meanwhile."""
        slot = self.ring[self.next_slot]
        self.next_slot = (self.next_slot + 1) % len(self.ring)
        if slot.copied is not None:  # the buffer's last copy must be over before it is reused
            self.backend.synchronize(slot.copied)
        moved = self._upload(chunks, slot)
        slot.copied = self.backend.record(self.copy_stream)
        self.in_flight.append((moved, slot.copied))
        if len(self.in_flight) >= self.prefetch:
            self._compute()
        outputs = [self._finish() for _ in range(len(self.computing) - 1)]  # all but the newest
        self.last_activity = time.monotonic()
        return outputs

    def drain(self) -> list[Any]:
        """Compute every batch in flight; the outputs of all, oldest first."""
        while self.in_flight:
            self._compute()
        return [self._finish() for _ in range(len(self.computing))]

    def deadline(self) -> float | None:
        return self.last_activity + DRAIN_AFTER_S if self.in_flight or self.computing else None

    def _upload(self, chunks: list[Any], slot: _Slot) -> Any:
        if all(isinstance(c, np.ndarray) for c in chunks):
            return self._column(chunks, slot, 0)
        if all(isinstance(c, Columns) for c in chunks):
            columns = zip(*(c.columns() for c in chunks))
            return tuple(self._column(list(parts), slot, i) for i, parts in enumerate(columns))
        batch = to_batch(chunks)  # records: lists of numbers or of tuples
        if isinstance(batch, np.ndarray):
            return self._column([batch], slot, 0)
        if isinstance(batch, tuple):
            return tuple(self._column([c], slot, i) if isinstance(c, np.ndarray) else c
                         for i, c in enumerate(batch))
        return batch  # a list of records: nothing numeric to move

    def _column(self, parts: list[np.ndarray[Any, Any]], slot: _Slot, i: int) -> Any:
        """One column of the batch, gathered from its ``parts`` into pinned buffer ``i`` of
        ``slot`` and on its way to the device; non-numeric columns stay on the host."""
        dtype = np.result_type(*parts)
        if dtype.kind not in _NUMERIC:
            return parts[0] if len(parts) == 1 else np.concatenate(parts)  # strings, objects
        shape = (sum(len(p) for p in parts), *parts[0].shape[1:])
        nbytes = int(np.prod(shape)) * dtype.itemsize
        while len(slot.buffers) <= i:
            slot.buffers.append(np.empty(0, dtype=np.uint8))
        if len(slot.buffers[i]) < nbytes:
            slot.buffers[i] = self.backend.pinned(max(nbytes, 1))
        host = slot.buffers[i][:nbytes].view(dtype).reshape(shape)
        if len(parts) == 1:
            np.copyto(host, parts[0])
        else:
            np.concatenate(parts, out=host)
        return self.backend.upload(host, self.copy_stream, self.compute_stream)

    def _compute(self) -> None:
        """Compute the oldest batch in flight and start copying its outputs back."""
        moved, copied = self.in_flight.popleft()
        backend, stream = self.backend, self.compute_stream
        backend.wait(stream, copied)
        with backend.computing(stream):
            result = self.fn(moved)
            if isinstance(result, tuple):
                result = tuple(backend.download(c, stream) for c in result)
            else:
                result = backend.download(result, stream)
        self.computing.append((result, backend.record(stream)))

    def _finish(self) -> Any:
        """The outputs of the oldest computed batch, once they are on the host."""
        result, done = self.computing.popleft()
        self.backend.synchronize(done)
        if isinstance(result, tuple):
            return tuple(self.backend.host(c) for c in result)
        return self.backend.host(result)


def open_stage(fn: Callable[[Any], Any], spec: MapBatchesSpec, operator: str) -> DeviceStage | PlainStage:
    """The stage for a ``map_batches`` operator whose ``spec.device`` is set."""
    device, wanted = spec.device, spec.device_backend
    problems = []
    for name in [wanted] if wanted else list(BACKENDS):
        try:
            backend = BACKENDS[name]()
            count = backend.device_count()
        except ImportError:
            problems.append(f"{name}: not installed")
            continue
        except Exception as exc:  # no CUDA driver or runtime, a broken install: reported below
            problems.append(f"{name}: {type(exc).__name__}: {exc}".splitlines()[0])
            continue
        if count > 0:
            _log.info("operator %r: batches on CUDA device 0 with %s, prefetch %d",
                      operator, name, spec.prefetch)
            return DeviceStage(backend, fn, spec.prefetch)
        problems.append(f"{name}: no visible CUDA device")
    why = "; ".join(problems)
    if device == "cuda":
        raise ConfigError(
            f"device='cuda' needs CuPy or PyTorch with a visible CUDA GPU ({why}); "
            "pip install 'accelflow[cuda]' (CuPy) or 'accelflow[torch]' (PyTorch with CUDA), "
            "or use device='auto' to fall back to NumPy on the CPU", key=f"operator {operator!r}")
    _log.warning("operator %r: device='auto' calls it on NumPy batches on the CPU (%s)", operator, why)
    return PlainStage(fn)
