"""Sharing the arrays of a job's :class:`~accelflow.connectors.ArraySource`\\ s with its
subtasks, in the process that runs the JobManager (the client, or the session cluster).

:func:`share_arrays` (before deploying) hands large arrays to the subtasks without pickling
them into every subtask and without writing them to disk: a memory-mapped caller array
(``np.memmap``) by its file, any other array where it is, in this process's memory
(:class:`~._arrays.ProcessArray`), or, where other processes may not read that, copied once
into an anonymous shared-memory file (Linux ``memfd``). On the Ray target (``put``) each array
goes into the object store once instead (:class:`~._arrays.ObjectArray`). Arrays of Python
objects and empty ones travel pickled.

The user's source is left as it is: the sharing of each source (the subtasks' copy of it,
the memory and store handles this process holds) is kept here, beside it, until
:func:`release_arrays` (the end of the job), or until the source itself is gone.

Example (``directory`` is only used where there is no ``memfd``)::

    from pathlib import Path
    import numpy as np
    from accelflow.connectors import ArraySource

    source = ArraySource([np.arange(1_000_000)])
    view = share_arrays(source, Path("."))  # the source the subtasks are sent
    assert shared_view(source) is view and view.arrays[0] is not source.arrays[0]
    release_arrays(source)
    assert shared_view(source) is source
"""

from __future__ import annotations

import os
import threading
import weakref
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from accelflow.connectors import ArraySource
from accelflow.dataflow import Source
from accelflow.runtime._arrays import NpyFile, ObjectArray, ProcessArray, copy_to_memfd, mapped_file
from accelflow.runtime._process_memory import unreadable_because

#: ``put(array)`` -> ``(array_id, handle)``: hands an array to the cluster's object store
PutArray = Callable[[np.ndarray[Any, Any]], tuple[str, Any]]


class _Shared:
    """One source's arrays as shared: the subtasks' copy of the source, and what this process
    holds for it (memfds, contiguous copies read in place, the object store's handles)."""

    def __init__(self) -> None:
        self.view: ArraySource | None = None
        self.fds: list[int] = []
        self.held: list[Any] = []  # contiguous arrays that subtasks read (ProcessArray)
        #: array id -> the object store's handle (a Ray ``ObjectRef``)
        self.handles: dict[str, Any] = {}
        weakref.finalize(self, _close_fds, self.fds)  # a source dropped while shared

    def share(self, source: ArraySource, directory: Path, put: PutArray | None, copy: bool) -> ArraySource:
        try:
            arrays = [self._put(a, put) if put is not None else self._share(a, i, directory, copy)
                      for i, a in enumerate(source.arrays)]
        except BaseException:  # nothing stays shared
            self.release(wait=True)
            raise
        self.view = source.with_arrays(arrays)
        return self.view

    def release(self, wait: bool) -> None:
        self.held.clear()
        self.handles = {}  # the object store frees what nothing refers to any more
        fds = self.fds[:]
        self.fds.clear()  # the list the finalizer holds
        if wait or not fds:
            _close_fds(fds)
        else:
            threading.Thread(target=_close_fds, args=(fds,), name="accelflow-free-array", daemon=True).start()

    def _put(self, array: Any, put: PutArray) -> Any:
        if not isinstance(array, np.ndarray) or array.dtype.hasobject or array.nbytes == 0:
            return array
        contiguous = np.ascontiguousarray(array)  # a plain array, even of an np.memmap
        array_id, handle = put(contiguous)
        self.handles[array_id] = handle
        return ObjectArray(array_id, contiguous.dtype, contiguous.shape)

    def _share(self, array: Any, i: int, directory: Path, copy: bool) -> Any:
        if not isinstance(array, np.ndarray) or array.dtype.hasobject or array.nbytes == 0:
            return array  # Python objects, or nothing to share: pickled
        mapped = mapped_file(array)
        if mapped is not None:
            return mapped
        if not copy:
            contiguous = np.ascontiguousarray(array)  # held until released
            self.held.append(contiguous)
            return ProcessArray(os.getpid(), contiguous.ctypes.data, contiguous.dtype, contiguous.shape)
        if not hasattr(os, "memfd_create"):
            path = directory / f"array-{id(self)}-{i}.npy"
            np.save(path, np.ascontiguousarray(array))
            return NpyFile(str(path))
        shared, fd = copy_to_memfd(array, f"accelflow-array-{i}")
        self.fds.append(fd)
        return shared


#: the sharing of each source shared now, dropped with the source
_shares: weakref.WeakKeyDictionary[ArraySource, _Shared] = weakref.WeakKeyDictionary()
_lock = threading.Lock()


def share_arrays(source: Source[Any] | None, directory: Path, put: PutArray | None = None, *,
                 copy: bool = False) -> Source[Any] | None:
    """Make the arrays of ``source`` readable by the subtasks (idempotent) and return the copy
    of it that they are sent (``source`` itself when it holds no arrays): read from this process's memory unless ``copy`` or the system
    forbids it, else copied into shared memory; without ``memfd`` (not Linux), written as
    ``.npy`` files in ``directory``. With ``put`` (the Ray target: subtasks on other
    machines), each array goes to the object store instead.

    Raises:
        OSError, MemoryError...: as sharing one array raised them; nothing stays shared (the
            JobManager names the source, see ``JobManager.prepare_sources``).
    """
    if not isinstance(source, ArraySource):
        return source
    with _lock:
        shared = _shares.get(source)
        if shared is not None and shared.view is not None:
            return shared.view
        shared = _Shared()
        view = shared.share(source, directory, put, copy or (put is None and unreadable_because() is not None))
        _shares[source] = shared
        return view


def shared_view(source: Source[Any]) -> Source[Any]:
    """The copy of ``source`` its subtasks read while its arrays are shared, else ``source``."""
    with _lock:
        shared = _shares.get(source) if isinstance(source, ArraySource) else None
        return source if shared is None or shared.view is None else shared.view


def object_handles(source: Source[Any]) -> dict[str, Any]:
    """Array id -> the object store's handle, for each array of ``source`` shared through one."""
    with _lock:
        shared = _shares.get(source) if isinstance(source, ArraySource) else None
        return {} if shared is None else dict(shared.handles)


def release_arrays(source: Source[Any] | None, wait: bool = True) -> None:
    """Give back what sharing ``source``'s arrays holds (idempotent). With ``wait=False`` the
    memory is freed on a thread of its own (the kernel takes ~50 ms for 300 MB, which a job's
    end need not wait for)."""
    with _lock:
        shared = _shares.pop(source, None) if isinstance(source, ArraySource) else None
    if shared is not None:
        shared.release(wait)


def _close_fds(fds: list[int]) -> None:
    while fds:
        os.close(fds.pop())
