"""Built-in sources: collections, number sequences and NumPy arrays (shared with the subtasks
of one host through shared memory, or through Ray's object store on the Ray target, see
:class:`ArraySource`)."""

from __future__ import annotations

import mmap
import os
import threading
import weakref
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from accelflow._errors import JobError
from accelflow.dataflow._context import RuntimeContext
from accelflow.dataflow._functions import Source
from accelflow.dataflow._chunks import CHUNK_RECORDS, Columns
from accelflow.dataflow._positions import Positions
from accelflow.dataflow._process_memory import read_memory, unreadable_because


def even_ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous, nearly equal ranges."""
    bounds = [total * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


class CollectionSource(Positions, Source[Any]):
    """The records of a list, split into contiguous ranges ``(start, stop)`` of it."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return even_ranges(len(self.items), parallelism)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        return iter(self._records(split))

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        records = self._records(split)
        chunks = (records[start : start + CHUNK_RECORDS] for start in range(0, len(records), CHUNK_RECORDS))
        return self._positioned(split, chunks)

    def _records(self, split: Any) -> list[Any]:
        # a list: the records themselves, as splits were before accelflow kept ranges
        # (a checkpoint taken then still restores)
        return split if isinstance(split, list) else self.items[split[0] : split[1]]

    def first_position(self, split: Any) -> int:
        if isinstance(split, list):
            raise JobError("a collection source restored from a checkpoint that holds its records, "
                           "not their positions, cannot keep their order: run the job without "
                           "ordered=True, or start it afresh")
        return int(split[0])

    def size_hint(self) -> int:
        return len(self.items)

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        if isinstance(split, list):
            return split[records_read:]
        return (split[0] + records_read, split[1])


class SequenceSource(Positions, Source[int]):
    """The integers ``start..end`` inclusive (as Flink's ``fromSequence``)."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [
            (self.start + a, self.start + b)
            for a, b in even_ranges(self.end - self.start + 1, parallelism)
        ]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        return iter(range(*split))

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        first, stop = split
        chunks = (list(range(start, min(start + CHUNK_RECORDS, stop)))
                  for start in range(first, stop, CHUNK_RECORDS))
        return self._positioned(split, chunks)

    def first_position(self, split: Any) -> int:
        return int(split[0] - self.start)

    def size_hint(self) -> int:
        return max(0, self.end - self.start + 1)

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])


@dataclass(frozen=True, slots=True)
class SharedArray:
    """Where the subtasks on this host map one array of an :class:`ArraySource`, read-only.

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


@dataclass(frozen=True, slots=True)
class ProcessArray:
    """An array of an :class:`ArraySource` that stays where it is, in the memory of the
    client (process ``pid``, C-contiguous at ``address``): subtasks on this host read it
    chunk by chunk with ``process_vm_readv`` (see :mod:`._process_memory`), so the job
    neither copies nor waits for the whole array first. Each chunk is a fresh array: a
    record stays its own value. The client keeps the array alive, unmoved, until the job
    ends; like Spark's ``parallelize`` of a local collection, a job sees what the array holds
    when each chunk is read."""

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


#: where this process finds the arrays of :class:`ObjectArray` placeholders (a subtask's
#: TaskExecutor resolved them; see :func:`register_arrays`)
_LOCATIONS: dict[str, SharedArray] = {}


def register_arrays(locations: Mapping[str, SharedArray]) -> None:
    """Tell this process where the arrays of its :class:`ObjectArray` placeholders are mapped
    (a subtask does it before its source reads)."""
    for array_id, location in locations.items():
        if not isinstance(location, SharedArray):
            raise JobError(f"array {array_id} of a NumPy source reached the subtask unresolved "
                           f"({type(location).__name__}): its TaskExecutor must map it first")
    _LOCATIONS.update(locations)


@dataclass(frozen=True, slots=True)
class ObjectArray:
    """An array of an :class:`ArraySource` that travels through the cluster's object store
    (the Ray target): what the subtasks get instead of the array. Their TaskExecutor fetches
    it on its own node and maps it for them (see :func:`register_arrays`)."""

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


#: ``put(array)`` -> ``(array_id, handle)``: hands an array to the cluster's object store
PutArray = Callable[[np.ndarray[Any, Any]], tuple[str, Any]]


def _close_fds(fds: list[int]) -> None:
    while fds:
        os.close(fds.pop())


class ArraySource(Positions, Source[Any]):
    """Rows of NumPy arrays (one array, or several as columns).

    :meth:`share` (the JobManager, before deploying) hands large arrays to the subtasks without
    pickling them into every subtask and without writing them to disk: a memory-mapped caller
    array (``np.memmap``) by its file, any other array where it is, in this process's memory
    (:class:`ProcessArray`), or, where other processes may not read that, copied once into an
    anonymous shared-memory file (Linux ``memfd``). This process holds them until
    :meth:`release` (the end of the job). On the Ray target (``share(directory, put)``) each
    array goes into the object store once instead, as an :class:`ObjectArray` placeholder;
    :attr:`handles` keeps the store's handles (array id -> Ray ``ObjectRef``) until
    :meth:`release`. Arrays of Python objects and empty ones travel pickled.
    """

    def __init__(self, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
        self.arrays: list[Any] = list(arrays)
        self.length = len(self.arrays[0])
        self.chunk_records = CHUNK_RECORDS
        self._originals: list[Any] | None = None  # the caller's arrays while shared
        self._fds: list[int] = []
        self._held: list[Any] = []  # contiguous arrays that subtasks read (ProcessArray)
        self._finalizer: weakref.finalize[[list[int]], ArraySource] | None = None
        #: array id -> the object store's handle, while shared through one
        self.handles: dict[str, Any] = {}

    def __getstate__(self) -> dict[str, Any]:
        # what subtasks get: the shared arrays' locations, never the originals or the fds
        return {"arrays": self.arrays, "length": self.length, "chunk_records": self.chunk_records,
                "positions": self.positions}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._originals, self._fds, self._held, self._finalizer, self.handles = None, [], [], None, {}

    @property
    def shared(self) -> bool:
        return self._originals is not None

    def share(self, directory: Path, put: PutArray | None = None, *, copy: bool = False) -> None:
        """Make the arrays readable by the subtasks on this host (idempotent): read from
        this process's memory (:class:`ProcessArray`) unless ``copy`` or the system forbids
        it, else copied into shared memory; without ``memfd`` (not Linux), written as
        ``.npy`` files in ``directory``. With ``put`` (the Ray target: subtasks on other
        machines), each array goes to the object store instead, as an :class:`ObjectArray`.

        Raises:
            OSError, MemoryError...: as sharing one array raised them; nothing stays shared
            (the JobManager names the source, see ``JobManager.prepare_sources``).
        """
        if self._originals is not None:
            return
        if self._finalizer is None:
            self._finalizer = weakref.finalize(self, _close_fds, self._fds)
        copy = copy or (put is None and unreadable_because() is not None)
        try:
            shared = [self._put_one(a, put) if put is not None else self._share_one(a, i, directory, copy)
                      for i, a in enumerate(self.arrays)]
        except BaseException:  # nothing stays shared: the caller's arrays, as before
            self._held.clear()
            _close_fds(self._fds)
            self.handles = {}
            raise
        self._originals, self.arrays = list(self.arrays), shared

    def release(self, wait: bool = True) -> None:
        """Give the shared memory back and hold the caller's arrays again (idempotent).
        With ``wait=False`` the memory is freed on a thread of its own (the kernel takes
        ~50 ms for 300 MB, which a job's end need not wait for)."""
        if self._originals is None:
            return
        self.arrays, self._originals = self._originals, None
        self._held.clear()
        fds = self._fds[:]
        self._fds.clear()  # the list the finalizer holds
        if wait or not fds:
            _close_fds(fds)
        else:
            threading.Thread(target=_close_fds, args=(fds,), name="accelflow-free-array", daemon=True).start()
        self.handles = {}  # the object store frees what nothing refers to any more

    def _put_one(self, array: Any, put: PutArray) -> Any:
        if not isinstance(array, np.ndarray) or array.dtype.hasobject or array.nbytes == 0:
            return array
        contiguous = np.ascontiguousarray(array)  # a plain array, even of an np.memmap
        array_id, handle = put(contiguous)
        self.handles[array_id] = handle
        return ObjectArray(array_id, contiguous.dtype, contiguous.shape)

    def _share_one(self, array: Any, i: int, directory: Path, copy: bool) -> Any:
        if not isinstance(array, np.ndarray) or array.dtype.hasobject or array.nbytes == 0:
            return array  # a path or a ref already, Python objects, or nothing to share
        mapped = _mapped_file(array)
        if mapped is not None:
            return mapped
        if not copy:
            contiguous = np.ascontiguousarray(array)  # held (with the originals) until release
            self._held.append(contiguous)
            return ProcessArray(os.getpid(), contiguous.ctypes.data, contiguous.dtype, contiguous.shape)
        if not hasattr(os, "memfd_create"):
            path = directory / f"array-{id(self)}-{i}.npy"
            np.save(path, np.ascontiguousarray(array))
            return str(path)
        shared, fd = copy_to_memfd(array, f"accelflow-array-{i}")
        self._fds.append(fd)
        return shared

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return even_ranges(self.length, parallelism)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for chunk in self._chunks(split):
            yield from chunk if not isinstance(chunk, Columns) else chunk.rows()

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        return self._positioned(split, self._chunks(split))

    def _chunks(self, split: Any) -> Iterator[Any]:
        readers = [_rows_reader(a) for a in self.arrays]
        first, stop = split
        for start in range(first, stop, self.chunk_records):
            end = min(start + self.chunk_records, stop)
            parts = [read(start, end) for read in readers]
            yield parts[0] if len(parts) == 1 else Columns(parts)

    def first_position(self, split: Any) -> int:
        return int(split[0])

    def size_hint(self) -> int:
        return self.length

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])


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


def _rows_reader(array: Any) -> Callable[[int, int], Any]:
    """``read(start, stop)``: rows of one array of a source as a subtask reads them."""
    if isinstance(array, ProcessArray):
        return array.rows  # fresh arrays, read from the client
    if isinstance(array, np.ndarray):  # pickled to this process: copies, a record its own value
        return lambda start, stop: np.array(array[start:stop])
    if isinstance(array, SharedArray | ObjectArray):
        mapped = array.open()  # views of a copy-on-write mapping (see SharedArray.open)
    elif isinstance(array, str):
        mapped = np.load(array, mmap_mode="c")  # an .npy file, where there is no memfd
    else:
        mapped = array  # anything else that slices
    return lambda start, stop: mapped[start:stop]


def _mapped_file(array: np.ndarray[Any, Any]) -> SharedArray | None:
    """The file and offset of a C-contiguous array that is a view of an ``np.memmap``'s
    mapping (slices included, also through a ``memoryview``), or None."""
    base = _memmap_below(array)
    if base is None or not array.flags.c_contiguous or getattr(base, "filename", None) is None:
        return None
    region = getattr(base, "_mmap", None)
    if region is None:
        return None
    # numpy maps from the allocation boundary at or below the memmap's offset
    start = base.offset - base.offset % mmap.ALLOCATIONGRANULARITY
    region_address = np.frombuffer(region, dtype=np.uint8, count=1).ctypes.data
    offset = start + array.ctypes.data - region_address
    return SharedArray(str(base.filename), offset, array.dtype, array.shape)


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
