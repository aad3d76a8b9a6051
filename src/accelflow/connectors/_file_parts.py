"""The files of ``sink_to_file`` (:class:`~._single_file.SingleFileSink`) next to its target:
each subtask's part, the lock a run holds on the target, and joining the parts into the
target atomically.

The directory of a sink's target may be shared with other users (``/tmp``), so nothing here
trusts a name in it:

- every file accelflow writes next to a target is created the way ``mkstemp`` does
  (``O_CREAT | O_EXCL | O_NOFOLLOW``, a random name, mode 0600): a symlink planted at a name
  cannot make a job write into someone else's file. Part files are
  ``.<base>.part-<index>.attempt-<attempt>.<random>.tmp`` while a subtask writes them; at a
  checkpoint's barrier a part is closed and renamed to
  ``.<base>.sealed-<index>.attempt-<attempt>.<random>.tmp`` (:func:`seal_part`): the checkpoint
  names it, so it outlives the run for a job restored from that checkpoint or savepoint. The
  joined file is ``.<base>.part-all.<random>.tmp`` until it is renamed onto the target
  (``os.replace`` replaces a symlink at the target, it never writes through it);
- a run holds the target's lock file ``.<base>.accelflow-lock`` (``flock``, non-blocking; it
  holds the holder's pid and a random token) from before its subtasks write parts until it has
  committed or cleaned up (:func:`holding`): a second job on the same target fails at once with a
  :class:`JobError` naming the target, and the part files found when the lock is taken belong to
  runs that are gone (e.g. a SIGKILLed client), so they are removed; sealed parts stay (a
  retained checkpoint or a savepoint may name them) until a run on the target succeeds. Only
  regular files of this user whose names match the patterns above are ever removed.
"""

from __future__ import annotations

import errno
import fcntl
import os
import re
import secrets
import stat
import tempfile
import threading
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from typing import BinaryIO, NamedTuple

from accelflow._errors import JobError

_LOCK_SUFFIX = ".accelflow-lock"
_BLOCK = 1 << 20


def part_prefix(target: str, index: int, attempt: int) -> str:
    """The name prefix of subtask ``index``'s part file for ``target`` in attempt ``attempt``."""
    return f".{os.path.basename(target)}.part-{index}.attempt-{attempt}."


def create_part(target: str, index: int, attempt: int) -> tuple[int, str]:
    """Create a new part file next to ``target`` (``mkstemp``: exclusive, no symlink, 0600).

    Returns:
        The open descriptor (read/write) and the part's absolute path.
    """
    directory = os.path.dirname(target) or "."
    return tempfile.mkstemp(dir=directory, prefix=part_prefix(target, index, attempt), suffix=".tmp")


def seal_part(part: str) -> str:
    """Rename the closed ``part`` to its sealed name (see the module) and make the rename
    durable; returns the sealed path: ``/out/.result.txt.part-0.attempt-1.k3v9x2_a.tmp``
    becomes ``/out/.result.txt.sealed-0.attempt-1.k3v9x2_a.tmp``."""
    directory, name = os.path.split(part)
    head, sep, tail = name.rpartition(".part-")
    assert sep, f"not a part file: {part!r}"
    sealed = os.path.join(directory, f"{head}.sealed-{tail}")
    os.rename(part, sealed)  # the random name comes from mkstemp: nothing else has it
    _fsync_directory(directory or ".")
    return sealed


def _part_pattern(base: str, kinds: str = "part") -> re.Pattern[str]:
    return re.compile(rf"\.{re.escape(base)}\.(?:{kinds})-(?:\d+\.attempt-\d+|all)\.[A-Za-z0-9_]{{6,}}\.tmp")


class TargetPart(NamedTuple):
    """A committable of :class:`~._single_file.SingleFileSink`: one subtask's part file, its
    size in bytes, and, from a machine whose files the JobManager cannot see, its bytes
    themselves (``data``)."""

    path: str
    size: int
    data: bytes | None = None


# -- committing ----------------------------------------------------------------------------------
def join_parts(parts: Sequence[TargetPart], target: str) -> None:
    """Write ``parts``, in order, into ``target`` at once (a new file renamed onto it).

    Raises:
        JobError: a part is gone, or is not a regular file of this user.
    """
    directory, base = os.path.split(target)
    fd, tmp = tempfile.mkstemp(dir=directory or ".", prefix=f".{base}.part-all.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as out:
            os.fchmod(out.fileno(), _creation_mode())  # what open(target, "w") would have given
            for part in parts:
                _copy_part(part, out)
            out.flush()
            os.fsync(out.fileno())
        os.replace(tmp, target)
    except BaseException:
        try:
            os.unlink(tmp)
        except FileNotFoundError:
            pass
        raise
    _fsync_directory(directory or ".")


def _copy_part(part: TargetPart, out: BinaryIO) -> None:
    if part.data is not None:  # it was written on another machine
        out.write(part.data)
        return
    copied = 0
    with os.fdopen(_open_part(part.path), "rb") as f:
        while block := f.read(_BLOCK):
            out.write(block)
            copied += len(block)
    if copied != part.size:
        raise JobError(f"the part file {part.path!r} of a file sink holds {copied} bytes, not the {part.size} "
                       "its subtask wrote: something changed it while the job ran. Write the sink to a "
                       "directory only you can write to")


def _open_part(part: str) -> int:
    """Open a part for reading without following a symlink; it must be this user's file."""
    try:
        fd = os.open(part, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError as exc:
        raise JobError(f"cannot read the part file {part!r} of a file sink: {exc.strerror}. "
                       "Something else removed or replaced it while the job ran") from None
    st = os.fstat(fd)
    if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
        os.close(fd)
        raise JobError(f"the part file {part!r} of a file sink is not a regular file of this user; "
                       "something replaced it while the job ran. Write the sink to a directory "
                       "only you can write to")
    return fd


def _creation_mode() -> int:
    """``0o666`` less this process's umask (read without changing it: threads are running)."""
    try:
        with open("/proc/self/status", encoding="ascii", errors="replace") as f:
            for line in f:
                if line.startswith("Umask:"):
                    return 0o666 & ~int(line.split()[1], 8)
    except (OSError, ValueError, IndexError):
        pass
    return 0o644


def _fsync_directory(directory: str) -> None:
    try:
        fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


# -- cleaning up ---------------------------------------------------------------------------------
def remove_stale_parts(target: str) -> None:
    """Remove the part files that runs which are over left next to ``target``.

    A target that another running job holds is left alone (its parts are alive). Never raises
    for a busy or unusable lock file: this runs while cleaning up after a failure.
    """
    try:
        with holding(target, clean=False):
            remove_parts(target)
    except (JobError, OSError):
        pass


def remove_parts(target: str, *, sealed: bool = False) -> None:
    """Remove every part file next to ``target`` (regular files of this user only; the
    caller holds the target's lock); with ``sealed``, the sealed parts too."""
    directory, base = os.path.split(target)
    pattern, me = _part_pattern(base, "part|sealed" if sealed else "part"), os.geteuid()
    try:
        entries = list(os.scandir(directory or "."))
    except OSError:
        return
    for entry in entries:
        if not pattern.fullmatch(entry.name):
            continue
        try:
            st = entry.stat(follow_symlinks=False)
            if stat.S_ISREG(st.st_mode) and st.st_uid == me:
                os.unlink(entry.path)  # never follows a symlink
        except OSError:
            continue


# -- the lock on a target ------------------------------------------------------------------------
@dataclass
class _Held:
    fd: int
    path: str
    thread: int


_held: dict[str, _Held] = {}
_held_guard = threading.Lock()


@contextmanager
def holding(target: str, *, clean: bool = True) -> Iterator[None]:
    """Hold the lock of ``target`` for the ``with`` block.

    Re-entrant within one thread. With ``clean``, the part files of runs that are over are
    removed when the lock is taken, and this run's own parts when the block raises.

    Raises:
        JobError: another running job (this process or another) writes the target, or its
            lock file is not a regular file of this user (e.g. a planted symlink).
    """
    me = threading.get_ident()
    with _held_guard:
        held = _held.get(target)
    if held is not None and held.thread == me:  # an outer block of this thread holds it
        yield
        return
    fd, path = _lock(target)
    with _held_guard:
        _held[target] = _Held(fd, path, me)
    try:
        if clean:
            remove_parts(target)  # left by runs that are over: we hold the lock
        yield
    except BaseException:
        if clean:
            remove_parts(target)  # this run's own parts
        raise
    finally:
        with _held_guard:
            del _held[target]
        _unlock(fd, path)


def _lock_path(target: str) -> str:
    directory, base = os.path.split(target)
    return os.path.join(directory, f".{base}{_LOCK_SUFFIX}")


def _lock(target: str) -> tuple[int, str]:
    """Take the lock file of ``target`` (exclusive, non-blocking); returns (fd, lock path)."""
    path = _lock_path(target)
    while True:
        try:
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            reason = "it is a symlink" if exc.errno == errno.ELOOP else exc.strerror
            raise JobError(f"file sink {target!r}: cannot open its lock file {path!r}: {reason}. "
                           "Remove it if no accelflow job writes that file, or write the sink to a "
                           "directory only you can write to") from None
        try:
            st = os.fstat(fd)
            if not stat.S_ISREG(st.st_mode) or st.st_uid != os.geteuid():
                raise JobError(f"file sink {target!r}: its lock file {path!r} is not a regular file "
                               "of this user. Remove it, or write the sink to a directory only you "
                               "can write to")
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                raise JobError(f"file sink {target!r} is being written by another running job"
                               f"{_holder(fd)} (it holds {path!r}). Wait for that job to end, or "
                               "write this job's sink to another path") from None
            try:
                current = os.stat(path, follow_symlinks=False)
            except FileNotFoundError:
                current = None
            if current is None or (current.st_dev, current.st_ino) != (st.st_dev, st.st_ino):
                os.close(fd)  # its holder removed it as we took it: take the new one
                continue
            os.ftruncate(fd, 0)
            os.write(fd, f"{os.getpid()} {secrets.token_hex(8)}\n".encode())
            return fd, path
        except BaseException:
            try:
                os.close(fd)
            except OSError:
                pass
            raise


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 64, 0).decode("ascii").split()
    except (OSError, UnicodeDecodeError):
        return ""
    return f" (process {text[0]})" if text and text[0].isdigit() else ""


def lock_token(target: str) -> str | None:
    """What the lock file of ``target`` holds (its holder's pid and a random token), as seen
    from here, or None where there is none: a process that reads what the JobManager wrote
    sees the JobManager's files (the same machine, or a shared filesystem)."""
    try:
        fd = os.open(_lock_path(target), os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return None
    try:
        return os.pread(fd, 64, 0).decode("ascii", errors="replace").strip() or None
    except OSError:
        return None
    finally:
        os.close(fd)


def _unlock(fd: int, path: str) -> None:
    try:
        os.unlink(path)  # while still holding it: a waiter that opened it retries (see _lock)
    except OSError:
        pass
    os.close(fd)
