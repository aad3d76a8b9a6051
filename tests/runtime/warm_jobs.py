"""User code for the warm-device tests (issue 27), in a light module so subtasks and device
hosts import it by reference; it must not import pytest or the test modules.

Every operator appends what it did to a log file (one line per event, with its process id),
so a test counts ``open()`` calls, sees which process ran what, and which records went into
one batch.
"""

from __future__ import annotations

import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import RuntimeContext, Source


def log_line(path: str, *words: Any) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(" ".join(str(w) for w in (os.getpid(), *words)) + "\n")


def lines(path: str | Path, event: str) -> list[list[str]]:
    """The words of every line of ``event`` in the log: ``[pid, event, ...]``."""
    p = Path(path)
    if not p.exists():
        return []
    return [line.split() for line in p.read_text(encoding="utf-8").splitlines() if line.split()[1:2] == [event]]


class Model:
    """A "model": ``open()`` logs ``open <uuid of its device> <share> <subtask>``, each batch
    ``batch <its records>``; it multiplies by ``scale``, taking ``batch_s`` seconds a batch."""

    def __init__(self, log: str, scale: int = 10, open_s: float = 0.0, batch_s: float = 0.0) -> None:
        self.log, self.scale, self.open_s, self.batch_s = log, scale, open_s, batch_s

    def open(self, ctx: RuntimeContext) -> None:
        time.sleep(self.open_s)
        (info, share), = ctx.get_resource_shares("gpu").items()
        log_line(self.log, "open", info.get_property("uuid"), share,
                 f"{ctx.index_of_this_subtask}/{ctx.number_of_parallel_subtasks}")

    def map_batch(self, batch: Any) -> Any:
        log_line(self.log, "batch", ",".join(str(int(x)) for x in np.asarray(batch).ravel()))
        time.sleep(self.batch_s)
        return batch * self.scale

    def map(self, record: Any) -> Any:
        return record * self.scale


class FailFirstAttempt:
    """A map that fails in ``open()`` of attempt 0 (after the operators before it opened)."""

    def __init__(self, log: str) -> None:
        self.log = log

    def open(self, ctx: RuntimeContext) -> None:
        log_line(self.log, "attempt", ctx.attempt_number)
        if ctx.attempt_number == 0:
            raise RuntimeError("attempt 0 fails on purpose")

    def map(self, record: Any) -> Any:
        return record


class WhereAmI:
    """A GPU map: logs ``where <attempt> <parent pid> <CUDA_VISIBLE_DEVICES> <modules>``, with
    ``modules`` which of ``warm_marker``, ``slow_marker`` and cupy were imported before
    ``open()``. Attempt ``n`` < ``failures`` waits until ``n + ahead`` warm processes announced
    themselves in the log named by ``$<marker>`` (``$WARM_MARKER_LOG``: they are ready;
    ``$SLOW_MARKER_LOG``: they began importing ``slow_marker``; None: it fails at once), then
    fails (so that attempt ``n + 1`` finds the last one; ``ahead`` 2 where attempt 0 runs in a
    warm process itself)."""

    def __init__(self, log: str, fail_first: bool = True, marker: str | None = "WARM_MARKER_LOG",
                 failures: int = 1, ahead: int = 1) -> None:
        self.log, self.fail_first, self.marker, self.failures = log, fail_first, marker, failures
        self.ahead = ahead

    def open(self, ctx: RuntimeContext) -> None:
        import sys

        loaded = ",".join(m for m in ("warm_marker", "slow_marker", "cupy") if m in sys.modules) or "-"
        log_line(self.log, "where", ctx.attempt_number, os.getppid(), os.environ.get("CUDA_VISIBLE_DEVICES"), loaded)
        if self.fail_first and ctx.attempt_number < self.failures:
            marker = Path(os.environ.get(self.marker, "")) if self.marker else None
            deadline = time.monotonic() + 30
            while marker and self._announced(marker) < ctx.attempt_number + self.ahead and time.monotonic() < deadline:
                time.sleep(0.05)
            if self.marker == "WARM_MARKER_LOG":
                time.sleep(0.3)  # its ready message follows its last import at once
            raise RuntimeError(f"attempt {ctx.attempt_number} fails on purpose")

    @staticmethod
    def _announced(marker: Path) -> int:
        text = marker.read_text() if marker.exists() else ""
        return sum(1 for line in text.splitlines() if not line.endswith((" done", " died")))

    def map(self, record: Any) -> Any:
        return record


class SmallChunks(Source[int]):
    """``0..n-1`` in chunks of ``chunk`` records, one every ``delay`` s: subtask ``i`` of ``p``
    reads the records ``r`` with ``r % p == i``."""

    def __init__(self, n: int, chunk: int, delay: float) -> None:
        self.n, self.chunk, self.delay = n, chunk, delay

    def create_splits(self, parallelism: int) -> list[Any]:
        return [(i, parallelism) for i in range(parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Any:
        raise NotImplementedError

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Any:
        index, parallelism = split
        mine = list(range(index, self.n, parallelism))
        for start in range(0, len(mine), self.chunk):
            time.sleep(self.delay)
            yield np.array(mine[start:start + self.chunk], dtype=np.int64)


class UntilFile(Source[int]):
    """Chunks of ``chunk`` records, one every ``delay`` s, until the file ``stop`` exists."""

    def __init__(self, stop: str, chunk: int = 4, delay: float = 0.01) -> None:
        self.stop, self.chunk, self.delay = stop, chunk, delay

    def create_splits(self, parallelism: int) -> list[Any]:
        return list(range(parallelism))

    def read(self, split: Any, ctx: RuntimeContext) -> Any:
        raise NotImplementedError

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Any:
        start = 0
        while not os.path.exists(self.stop):
            time.sleep(self.delay)
            yield np.arange(start, start + self.chunk, dtype=np.int64)
            start += self.chunk


class Spiky:
    """A GPU map_batches on (fake) CuPy that needs ``spike_mib`` of device memory for a moment
    in every batch (and logs ``spike``)."""

    def __init__(self, log: str, spike_mib: int) -> None:
        self.log, self.spike_mib = log, spike_mib

    def open(self, ctx: RuntimeContext) -> None:
        import cupy

        self.cupy = cupy

    def map_batch(self, batch: Any) -> Any:
        scratch = self.cupy.empty((self.spike_mib << 20,), dtype=np.uint8)
        del scratch
        log_line(self.log, "spike")
        return batch


class Leaky:
    """A GPU map_batches on (fake) CuPy that keeps ``leak_mib`` of device memory per batch."""

    def __init__(self, leak_mib: int = 4, keep_mib: int = 0) -> None:
        self.leak_mib, self.keep_mib = leak_mib, keep_mib
        self.kept: list[Any] = []

    def open(self, ctx: RuntimeContext) -> None:
        import cupy

        self.cupy = cupy
        if self.keep_mib:
            self.kept.append(cupy.empty((self.keep_mib << 20,), dtype=np.uint8))

    def map_batch(self, batch: Any) -> Any:
        if self.leak_mib:
            self.kept.append(self.cupy.empty((self.leak_mib << 20,), dtype=np.uint8))
        time.sleep(0.01)
        return batch


# A fake CuPy whose device memory is honest: a pool per process that enforces its limit
# (``set_limit``), and one device shared by every process that imports it (what each holds is
# in a file per process under $FAKE_CUPY_DEVICE, counted while that process lives), so a
# process that takes more than the device has left gets OutOfMemoryError, whoever it is.
FAKE_CUPY = r'''
import os

import numpy

TOTAL = int(os.environ.get("FAKE_CUPY_MEMORY", str(81920 << 20)))  # a fake GPU's, by default
_DEVICE = os.environ.get("FAKE_CUPY_DEVICE", "")


def _log(line):
    path = os.environ.get("FAKE_CUPY_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


def _alive(pid):
    try:
        os.kill(pid, 0)
    except OSError:
        return False
    with open(f"/proc/{pid}/stat") as f:
        return f.read().rsplit(")", 1)[1].split()[0] != "Z"


def _device_used():
    if not _DEVICE:
        return _pool._used
    used = 0
    for name in os.listdir(_DEVICE):
        pid = int(name)
        if pid == os.getpid():
            used += _pool._used
        elif _alive(pid):
            with open(os.path.join(_DEVICE, name)) as f:
                used += int(f.read() or 0)
    return used


class cuda:
    class memory:
        class OutOfMemoryError(MemoryError):
            pass

    class runtime:
        @staticmethod
        def getDeviceCount():
            return 1

    class Device:
        def __init__(self, i=0):
            self.id = i

        def use(self):
            _log("Device.use")

        @property
        def mem_info(self):
            return TOTAL - _device_used(), TOTAL


class MemoryPool:
    def __init__(self):
        self._used, self._limit = 0, TOTAL

    def set_limit(self, size=None, fraction=None):
        self._limit = int(fraction * TOTAL) if fraction is not None else int(size)
        _log(f"set_limit {self._limit}")

    def get_limit(self):
        return self._limit

    def used_bytes(self):
        return self._used

    def _take(self, n):
        if self._used + n > self._limit:
            raise cuda.memory.OutOfMemoryError(f"Out of memory allocating {n:,} bytes (allocated so far: {self._used:,} bytes, limit set to: {self._limit:,} bytes).")
        if _device_used() + n > TOTAL:
            raise cuda.memory.OutOfMemoryError(f"Out of memory allocating {n:,} bytes (the device is full: {TOTAL:,} bytes).")
        self._used += n
        self._publish()

    def _give(self, n):
        self._used -= n
        self._publish()

    def _publish(self):
        if _DEVICE:
            with open(os.path.join(_DEVICE, str(os.getpid())), "w") as f:
                f.write(str(self._used))


_pool = MemoryPool()


def get_default_memory_pool():
    return _pool


class ndarray:
    def __init__(self, shape, dtype):
        self.shape, self.dtype = tuple(shape), numpy.dtype(dtype)
        self.nbytes = int(numpy.prod(self.shape)) * self.dtype.itemsize
        _pool._take(self.nbytes)
        self._owned = self.nbytes

    def __del__(self):
        _pool._give(getattr(self, "_owned", 0))


def empty(shape, dtype=numpy.float64):
    return ndarray(shape if isinstance(shape, tuple) else (shape,), dtype)


def zeros(shape, dtype=numpy.float64):
    _log("zeros")
    return empty(shape, dtype)
'''


def install_fake_cupy(directory: Path) -> Path:
    """The fake CuPy as a package under ``directory`` (put it on ``PYTHONPATH``)."""
    (directory / "cupy").mkdir(parents=True, exist_ok=True)
    (directory / "cupy" / "__init__.py").write_text(FAKE_CUPY, encoding="utf-8")
    return directory


def use_fake_gpus_with_cupy(monkeypatch: Any, tmp: Path, gpus: Any) -> dict[str, Any]:
    """Fake GPUs (``gpus``: a count or ``FakeGPU``s) and the fake CuPy for every process of a
    test's cluster, with this folder's modules importable (``monkeypatch``: pytest's). Returns
    the configuration of a TaskExecutor holding them all (``gpu`` resource, coordination file
    in ``tmp``)."""
    from accelflow.testing import use_fake_nvidia_smi

    use_fake_nvidia_smi(monkeypatch, tmp / "bin", gpus)
    site = install_fake_cupy(tmp / "site")
    monkeypatch.setenv("PYTHONPATH", f"{site}:{Path(__file__).parent}")
    monkeypatch.syspath_prepend(str(site))  # TaskExecutors get the client's import path
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    return {
        "external-resources": "gpu",
        "external-resource.gpu.amount": gpus if isinstance(gpus, int) else len(gpus),
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp / "coordination.json"),
    }
