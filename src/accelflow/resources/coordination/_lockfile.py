"""The coordination lock: ``flock`` with a bounded wait and a message that names the holder.

A holder needs milliseconds. One that keeps the lock for seconds is stopped (``SIGSTOP``, a
debugger), hung, or not an allocator at all (another local user who could open the file).
Waiting for it for ever would hang discovery without a word, so :func:`hold_lock` polls with
``LOCK_NB`` until a deadline and then raises a :class:`CoordinationError` naming the lock file
and, from ``/proc/locks``, the holding process.

Who can pin the lock: anyone who can *open* the file, since ``flock`` needs no write access.
So the lock file is created with no permission for "others" (the mode passed in), and an
existing one of this user that others could open is tightened (``chmod o-rwx``); a file of
another user that others can open is only warned about (we may not change it).
"""

from __future__ import annotations

import errno
import fcntl
import logging
import os
import stat
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import psutil

from accelflow._errors import CoordinationError

log = logging.getLogger("accelflow.resources.coordination")

DEFAULT_LOCK_TIMEOUT_S = 5.0
"""How long to wait for the lock: far above a normal hold (milliseconds), below the 8 s a
TaskExecutor has to register, so the job fails with this error and not a vaguer one."""
_OTHERS = 0o007
_POLL_FIRST_S, _POLL_MAX_S = 0.001, 0.02
_LOCKS_PATH = "/proc/locks"


@contextmanager
def hold_lock(path: Path, *, mode: int, timeout: float) -> Iterator[None]:
    """Hold ``flock(LOCK_EX)`` on ``path`` (created with ``mode`` if missing) for the block.

    Raises:
        CoordinationError: the file cannot be opened, is not a regular file, or stays locked
            by another process for ``timeout`` seconds.
    """
    flags = os.O_RDONLY | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC
    try:
        fd = os.open(path, flags, mode)
    except OSError as exc:
        raise CoordinationError(
            f"cannot open the lock file: {reason(exc)}", path=str(path)
        ) from exc
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise CoordinationError("the lock file is not a regular file; remove it", path=str(path))
        _tighten(path, fd, info)
        _wait(path, fd, timeout)
        yield
    finally:
        os.close(fd)  # closing the descriptor drops the lock


def _tighten(path: Path, fd: int, info: os.stat_result) -> None:
    if not info.st_mode & _OTHERS:
        return
    if info.st_uid == os.getuid():
        os.fchmod(fd, stat.S_IMODE(info.st_mode) & ~_OTHERS)
        return
    log.warning(
        "%s (uid %d, mode %s) can be opened, and so locked, by every local user; "
        "its owner should run: chmod o-rwx %s",
        path,
        info.st_uid,
        stat.filemode(info.st_mode),
        path,
    )


def _wait(path: Path, fd: int, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    pause = _POLL_FIRST_S
    while True:
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            return
        except BlockingIOError:
            pass
        except OSError as exc:
            raise CoordinationError(f"cannot lock: {reason(exc)}", path=str(path)) from exc
        left = deadline - time.monotonic()
        if left <= 0:
            raise CoordinationError(_timeout_message(fd, timeout), path=str(path))
        time.sleep(min(pause, left))
        pause = min(pause * 2, _POLL_MAX_S)


def _timeout_message(fd: int, timeout: float) -> str:
    holders = lock_holders(fd)
    who = ", ".join(_describe_pid(p) for p in holders) or "a process /proc/locks does not name"
    return (
        f"the lock file is still locked after {timeout:g} s, by {who}. A holder needs "
        "milliseconds: it is stopped (SIGSTOP, a debugger), hung, or not an allocator. Resume "
        "or stop it (kill -CONT <pid> / kill <pid>); if it belongs to another user, make the "
        "lock file unreadable to them (chmod o-rwx) or use another coordination file"
    )


def lock_holders(fd: int) -> list[int]:
    """The pids holding a ``flock`` on the file open as ``fd``, from ``/proc/locks`` (``[]``
    where it is unreadable). A lock inherited through ``fork`` lists the process that took it."""
    info = os.fstat(fd)
    inode = f"{os.major(info.st_dev):02x}:{os.minor(info.st_dev):02x}:{info.st_ino}"
    try:
        with open(_LOCKS_PATH, encoding="ascii", errors="replace") as f:
            lines = f.read(1 << 22).splitlines()
    except OSError:
        return []
    holders: list[int] = []
    for line in lines:
        fields = line.split()
        # "1: FLOCK  ADVISORY  WRITE 4242 08:01:1234 0 EOF"; a waiter has "->" after "1:"
        if len(fields) >= 6 and fields[1] != "->" and fields[5] == inode:
            if fields[4].isdecimal() and int(fields[4]) not in holders:
                holders.append(int(fields[4]))
    return holders


def _describe_pid(pid: int) -> str:
    try:
        process = psutil.Process(pid)
        with process.oneshot():
            return f"pid {pid} ({process.name()}, user {process.username()}, {process.status()})"
    except (psutil.Error, KeyError):  # KeyError: a uid with no user name
        return f"pid {pid}"


def reason(exc: OSError) -> str:
    """Why an ``open``/``flock`` failed, for messages (a refused symlink says so)."""
    if exc.errno == errno.ELOOP:
        return "it is a symbolic link (refused, to avoid symlink attacks); remove it"
    return exc.strerror or str(exc)
