"""Reading another process's memory on this host (Linux ``process_vm_readv``): how subtasks
read a NumPy source array straight out of the client that holds it, chunk by chunk, with no
copy of the whole array first (see :class:`._arrays.ProcessArray`).

The kernel allows it where the reading process may trace the owner: the same user, and no
Yama restriction (``kernel.yama.ptrace_scope`` 0 or absent). :func:`unreadable_because` says
beforehand when it cannot work, so the client copies the array into shared memory instead.
"""

from __future__ import annotations

import ctypes
import errno
import functools
import os
import sys
from typing import Any

from accelflow._errors import JobError

_YAMA = "/proc/sys/kernel/yama/ptrace_scope"


class _IOVec(ctypes.Structure):
    _fields_ = [("iov_base", ctypes.c_void_p), ("iov_len", ctypes.c_size_t)]


@functools.cache
def _process_vm_readv() -> Any:
    function = ctypes.CDLL(None, use_errno=True).process_vm_readv
    function.restype = ctypes.c_ssize_t
    function.argtypes = [ctypes.c_int, ctypes.POINTER(_IOVec), ctypes.c_ulong,
                         ctypes.POINTER(_IOVec), ctypes.c_ulong, ctypes.c_ulong]
    return function


def unreadable_because() -> str | None:
    """Why other processes of this user cannot read this process's memory, or None when
    they can (as far as can be told without trying)."""
    if not sys.platform.startswith("linux"):
        return f"process_vm_readv is Linux only (this is {sys.platform})"
    try:
        _process_vm_readv()
    except (OSError, AttributeError):
        return "the C library has no process_vm_readv"
    try:
        with open(_YAMA) as f:
            scope = f.read().strip()
    except OSError:
        return None  # no Yama: the same user may read
    if scope != "0":
        return f"kernel.yama.ptrace_scope is {scope} ({_YAMA}): a process may not read another's memory"
    return None


def read_memory(pid: int, address: int, out: Any) -> None:
    """Fill the writable C-contiguous buffer ``out`` (a NumPy array) with the bytes at
    ``address`` in process ``pid``.

    Raises:
        JobError: the kernel refused, or the process or its memory is gone; says which.
    """
    readv = _process_vm_readv()
    base, size, done = out.ctypes.data, out.nbytes, 0
    while done < size:  # a read may stop short at a page boundary
        local = _IOVec(base + done, size - done)
        remote = _IOVec(address + done, size - done)
        n = readv(pid, ctypes.byref(local), 1, ctypes.byref(remote), 1, 0)
        if n <= 0:
            code = ctypes.get_errno() if n < 0 else errno.EFAULT
            raise JobError(
                f"cannot read {size} bytes of a NumPy source array from process {pid} at "
                f"{address + done:#x} (process_vm_readv: {os.strerror(code)}): the client holding "
                "the array is gone, or this system does not let one process read another's "
                "memory; set pipeline.array-sharing: copy to share a copy instead")
        done += n
