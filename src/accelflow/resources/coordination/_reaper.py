"""Killing a discovery script that ran too long, and everything it started that can be found.

The script runs in a session of its own, so ``killpg`` reaches its process group. A helper can
leave both: ``setsid`` puts it in a new session, and a double fork orphans it (its parent is
then ``init``, so it is no descendant either). What is killed, each checked against PID reuse
(psutil identities):

* the script's process group (``killpg``);
* every descendant of the script, found before anything is killed;
* every process still in the script's session or process group;
* every process (that this user may inspect) holding the *write* end of the script's stdout or
  stderr: that is what kept the pipes open, and it finds a ``setsid`` helper even after a
  double fork.

A helper that left the session, closed the pipes and was orphaned (a proper daemon) cannot be
told from any other process, so it is not touched; the message lists exactly what was killed.
"""

from __future__ import annotations

import os
import signal
import subprocess
import time

import psutil

_PROC = "/proc"
_GRACE_S = 2.0
_O_ACCMODE = 0o3


def kill_script_tree(process: subprocess.Popen[bytes]) -> str:
    """SIGKILL the script and every process of its tree that can be found; close its pipes.

    Returns:
        For the error message, e.g. ``"killed it (pid 41) and 2 processes it started (pids 42,
        57)"``, plus the pids that survived, if any.
    """
    pid = process.pid
    pipes = [p for p in (process.stdout, process.stderr) if p is not None and not p.closed]
    inodes = {os.fstat(p.fileno()).st_ino for p in pipes}
    targets = _descendants(pid)
    try:
        os.killpg(pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    for _round in range(2):  # again: a helper may have forked while we were killing
        targets |= _stragglers(pid, inodes)
        for target in targets:
            _kill(target)
    for pipe in pipes:
        pipe.close()
    try:
        process.wait(timeout=_GRACE_S)
    except subprocess.TimeoutExpired:
        pass
    survivors = _survivors(targets)
    others = sorted(p.pid for p in targets if p.pid != pid)
    text = f"killed it (pid {pid})"
    if others:
        text += f" and {len(others)} process(es) it started ({_pids(others)})"
    if survivors:
        text += (
            f"; still running after SIGKILL: {_pids(survivors)} (another user's, or stuck in "
            "the kernel): stop them by hand"
        )
    return text


def _pids(pids: list[int]) -> str:
    return "pid " + ", ".join(str(p) for p in pids[:20]) + (" ..." if len(pids) > 20 else "")


def _descendants(pid: int) -> set[psutil.Process]:
    try:
        return set(psutil.Process(pid).children(recursive=True))
    except psutil.Error:
        return set()


def _stragglers(pid: int, inodes: set[int]) -> set[psutil.Process]:
    """Processes in the script's session or group, or holding the write end of its pipes."""
    found: set[psutil.Process] = set()
    try:
        names = os.listdir(_PROC)
    except OSError:
        return found
    me = os.getpid()
    for name in names:
        if not name.isdecimal() or int(name) in (me, pid):
            continue
        other = int(name)
        if _in_session(other, pid) or (inodes and _holds_write_end(other, inodes)):
            try:
                found.add(psutil.Process(other))
            except psutil.Error:
                pass
    return found


def _in_session(pid: int, session: int) -> bool:
    try:
        with open(f"{_PROC}/{pid}/stat", "rb") as f:
            text = f.read().decode(errors="replace")
    except OSError:
        return False
    fields = text[text.rfind(")") + 2 :].split()  # state ppid pgrp session ...
    return len(fields) > 3 and str(session) in (fields[2], fields[3])


def _holds_write_end(pid: int, inodes: set[int]) -> bool:
    wanted = {f"pipe:[{i}]" for i in inodes}
    try:
        fds = os.listdir(f"{_PROC}/{pid}/fd")
    except OSError:
        return False
    for fd in fds:
        try:
            if os.readlink(f"{_PROC}/{pid}/fd/{fd}") not in wanted:
                continue
            with open(f"{_PROC}/{pid}/fdinfo/{fd}", encoding="ascii") as f:
                flags = next((line.split()[1] for line in f if line.startswith("flags:")), "0")
        except (OSError, IndexError):
            continue
        if int(flags, 8) & _O_ACCMODE == os.O_WRONLY:
            return True
    return False


def _kill(process: psutil.Process) -> None:
    try:
        process.kill()  # psutil refuses if the pid now belongs to another process
    except psutil.Error:
        pass


def _survivors(targets: set[psutil.Process]) -> list[int]:
    deadline = time.monotonic() + _GRACE_S
    alive = set(targets)
    while alive and time.monotonic() < deadline:
        alive = {p for p in alive if _running(p)}
        if alive:
            time.sleep(0.02)
    return sorted(p.pid for p in alive)


def _running(process: psutil.Process) -> bool:
    try:
        return process.is_running() and process.status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False
