"""Where subtasks read the NumPy arrays of a source that the runtime shares with them instead
of pickling them into each: the handles that stand for the arrays in the subtasks' copy of
the source (:class:`~accelflow.dataflow.SharedRows`), and the shared memory behind them.

- :class:`ProcessArray`: the array stays in the client's memory; subtasks on its host read it
  chunk by chunk (``process_vm_readv``, :mod:`._process_memory`);
- :class:`SharedArray`: a file mapped copy-on-write, the caller's ``np.memmap`` or an
  anonymous shared-memory copy (:func:`copy_to_memfd`);
- :class:`NpyFile`: an ``.npy`` copy, where there is no ``memfd`` (not Linux);
- :class:`ObjectArray`: the array is in the cluster's object store (the Ray target); the
  subtask's TaskExecutor maps it and tells the subtask where (:func:`register_arrays`).

What the JobManager shares, and gives back, per source: :mod:`._array_sharing`.
"""

from __future__ import annotations

import mmap
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from accelflow._errors import JobError
from accelflow.dataflow import SharedRows
from accelflow.runtime._process_memory import read_memory

Reader = Callable[[int, int], np.ndarray[Any, Any]]


@dataclass(frozen=True, slots=True)
class SharedArray(SharedRows):
    """An array mapped read-only by the subtasks on this host.

    ``path`` is the caller's own memory-mapped file (an ``np.memmap`` passed as it is, never
    copied), or the anonymous memory file the client filled once, seen through
    ``/proc/<client pid>/fd/<fd>``: it has no name anywhere, so it goes away with the last
    process that holds it, even when the client is SIGKILLed.
    """

    path: str
    offset: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    def open(self) -> np.ndarray[Any, Any]:
        """The array, mapped copy-on-write: reading shares the pages, and a subtask that
        writes into a record changes its own copy of that page only."""
        mapped = np.memmap(self.path, dtype=self.dtype, mode="c", offset=self.offset, shape=self.shape)
        return mapped.view(np.ndarray)  # slices are plain arrays (the mapping stays alive)

    def reader(self) -> Reader:
        mapped = self.open()  # views of a copy-on-write mapping
        return lambda start, stop: mapped[start:stop]


@dataclass(frozen=True, slots=True)
class ProcessArray(SharedRows):
    """An array that stays where it is, in the memory of the client (process ``pid``,
    C-contiguous at ``address``): subtasks on this host read it chunk by chunk with
    ``process_vm_readv``, so the job neither copies nor waits for the whole array first. Each
    chunk is a fresh array: a record stays its own value. The client keeps the array alive,
    unmoved, until the job ends; like Spark's ``parallelize`` of a local collection, a job sees
    what the array holds when each chunk is read."""

    pid: int
    address: int
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    def rows(self, start: int, stop: int) -> np.ndarray[Any, Any]:
        """Rows ``start:stop``, read from the client."""
        out: np.ndarray[Any, Any] = np.empty((stop - start, *self.shape[1:]), self.dtype)
        if out.nbytes:
            read_memory(self.pid, self.address + start * (out.nbytes // len(out)), out)
        return out

    def reader(self) -> Reader:
        return self.rows


@dataclass(frozen=True, slots=True)
class NpyFile(SharedRows):
    """An ``.npy`` copy of an array (where there is no ``memfd``), mapped copy-on-write."""

    path: str

    def reader(self) -> Reader:
        mapped = np.load(self.path, mmap_mode="c")
        return lambda start, stop: mapped[start:stop]


#: where this process finds the arrays of :class:`ObjectArray` handles (a subtask's
#: TaskExecutor mapped them; see :func:`register_arrays`)
_LOCATIONS: dict[str, SharedArray] = {}


def register_arrays(locations: Mapping[str, Any]) -> None:
    """Tell this process where the arrays of its :class:`ObjectArray` handles are mapped (a
    subtask does it before its source reads).

    Raises:
        JobError: a location is not a :class:`SharedArray` (its TaskExecutor did not map it).
    """
    for array_id, location in locations.items():
        if not isinstance(location, SharedArray):
            raise JobError(f"array {array_id} of a NumPy source reached the subtask unresolved "
                           f"({type(location).__name__}): its TaskExecutor must map it first")
    _LOCATIONS.update(locations)


@dataclass(frozen=True, slots=True)
class ObjectArray(SharedRows):
    """An array that travels through the cluster's object store (the Ray target): what the
    subtasks get instead of the array. Their TaskExecutor fetches it on its own node and maps
    it for them (see :func:`register_arrays`)."""

    array_id: str
    dtype: np.dtype[Any]
    shape: tuple[int, ...]

    def open(self) -> np.ndarray[Any, Any]:
        location = _LOCATIONS.get(self.array_id)
        if location is None:
            raise JobError(
                f"array {self.array_id} (dtype {self.dtype}, shape {self.shape}) of a NumPy source "
                "lives in Ray's object store and was not mapped for this process: such a source "
                "runs on the Ray target only (execution.target: ray), deployed by its JobManager")
        return location.open()

    def reader(self) -> Reader:
        mapped = self.open()
        return lambda start, stop: mapped[start:stop]


_WRITE_BLOCK = 64 << 20


def copy_to_memfd(array: np.ndarray[Any, Any], name: str) -> tuple[SharedArray, int]:
    """Copy ``array`` once into an anonymous shared-memory file of this process (Linux
    ``memfd``): where other processes of this host map it (``/proc/<pid>/fd/<fd>``, while this
    process holds the fd, which the caller closes), and the fd."""
    fd = os.memfd_create(name, os.MFD_CLOEXEC)
    try:
        # written, not copied through a mapping: the kernel allocates the pages in bulk
        # instead of one page fault per 4 KiB (twice as fast for a few hundred MB)
        data = np.ascontiguousarray(array).reshape(-1).view(np.uint8).data  # any dtype, as bytes
        written = 0
        while written < len(data):
            written += os.write(fd, data[written:written + _WRITE_BLOCK])
    except BaseException:
        os.close(fd)
        raise
    return SharedArray(f"/proc/{os.getpid()}/fd/{fd}", 0, array.dtype, array.shape), fd


def mapped_file(array: np.ndarray[Any, Any]) -> SharedArray | None:
    """The file and offset of a C-contiguous array that is a view of an ``np.memmap``'s
    mapping (slices included, also through a ``memoryview``), or None. Not of a copy-on-write
    mapping (``mode="c"``, ``np.load(mmap_mode="c")``): what the caller wrote into it is not
    in the file."""
    base = _memmap_below(array)
    if base is None or not array.flags.c_contiguous or getattr(base, "filename", None) is None \
            or getattr(base, "mode", None) == "c":
        return None
    region = getattr(base, "_mmap", None)
    if region is None:
        return None
    # numpy maps from the allocation boundary at or below the memmap's offset
    start = base.offset - base.offset % mmap.ALLOCATIONGRANULARITY
    region_address = np.frombuffer(region, dtype=np.uint8, count=1).ctypes.data
    offset = start + array.ctypes.data - region_address
    return SharedArray(str(base.filename), offset, array.dtype, array.shape)


def open_mapped(path: str, offset: int, dtype: np.dtype[Any], shape: tuple[int, ...]) -> np.ndarray[Any, Any]:
    """An array mapped read-only from ``path``: what a memory-mapped array that a client sent
    by its file (:class:`ByFile`) is in the process that loads it."""
    return np.memmap(path, dtype=dtype, mode="r", offset=offset, shape=shape)


class ByFile:
    """A pickler's ``reducer_override`` for processes on one machine: an array mapped from a
    file (:func:`mapped_file`) travels as the file's name, offset, type and shape, and the
    loading process maps the file itself (:func:`open_mapped`), instead of every byte going
    through the pickle (a job of 784 MB of images took 4 s to reach a session cluster)."""

    def reducer_override(self, obj: Any) -> Any:
        if isinstance(obj, np.ndarray) and (ref := mapped_file(obj)) is not None:
            return open_mapped, (ref.path, ref.offset, ref.dtype, ref.shape)
        return super().reducer_override(obj)  # type: ignore[misc]


def _memmap_below(array: np.ndarray[Any, Any]) -> np.memmap[Any, Any] | None:
    """The ``np.memmap`` whose memory ``array`` views, or None: walks the owners of the
    memory, an array's ``base`` and a ``memoryview``'s ``obj`` (an array unpickled with
    protocol 5, or made with ``np.frombuffer(memoryview(...))``, ends in one), and stops at
    anything else (``bytes``, ``bytearray``, an ``mmap.mmap`` with no file name, a ctypes
    buffer...).

    Example:
        >>> _memmap_below(np.frombuffer(memoryview(b"12345678"))) is None
        True
    """
    owner: Any = array
    for _ in range(_MAX_OWNERS):
        if isinstance(owner, np.memmap):
            return owner
        if isinstance(owner, np.ndarray):
            owner = owner.base
        elif isinstance(owner, memoryview):
            owner = owner.obj
        else:
            return None
    return None


#: how many owners :func:`_memmap_below` walks at most (a chain of views is a few long)
_MAX_OWNERS = 64
