"""Test helper (a script, not a test): a parent that is gone before its child ties itself to it.

``python orphaning.py MODE [ARGV ...]`` makes itself a child subreaper (so the orphan is
re-parented to it, not to init, and it can read the orphan's exit status), then forks a
*parent*, which starts one *child* and:

* ``fork``: exits at once; the child (forked, this script) waits until it is re-parented,
  then calls ``die_with_parent(parent=expected_parent())`` and, if that returns, sleeps;
* ``spawn``: the child is ``ARGV`` (spawned with ``parent_env()``, started only once the
  parent has exited: a shell waits for its re-parenting, then ``exec``\\ s ``ARGV``); the
  parent exits at once;
* ``kill``: the child (forked) calls ``die_with_parent(parent=expected_parent())`` at once
  and says so (its pid); then this process SIGKILLs the parent (the normal path).

It prints ``exit N``, ``signal N`` or ``alive`` (still running after 60 s: then killed) for
the child.
"""

from __future__ import annotations

import ctypes
import os
import signal
import subprocess
import sys
import time

from accelflow.runtime import die_with_parent, expected_parent, parent_env

_PR_SET_CHILD_SUBREAPER = 36
_WAIT_S = 60.0


def _forked_child(announce: int | None) -> None:
    parent = expected_parent()
    assert parent is not None
    if announce is None:
        while os.getppid() == parent:  # the parent is gone before the prctl
            time.sleep(0.01)
    die_with_parent(parent=parent)
    if announce is not None:
        os.write(announce, f"{os.getpid()}\n".encode())  # tied
    time.sleep(_WAIT_S * 2)
    os._exit(0)


def _parent(mode: str, argv: list[str], announce: int) -> None:
    if mode == "spawn":
        me = os.getpid()
        wait = f'while [ "$(cut -d" " -f4 /proc/$$/stat)" = "{me}" ]; do sleep 0.01; done; exec "$@"'
        child = subprocess.Popen(["sh", "-c", wait, "sh", *argv], env=dict(os.environ, **parent_env()),
                                 stdin=subprocess.DEVNULL)
        os.write(announce, f"{child.pid}\n".encode())
        os._exit(0)
    child_pid = os.fork()
    if child_pid == 0:
        _forked_child(announce if mode == "kill" else None)
    if mode == "kill":
        time.sleep(_WAIT_S * 2)  # until killed
    os.write(announce, f"{child_pid}\n".encode())
    os._exit(0)


def _reap(child: int) -> str:
    deadline = time.monotonic() + _WAIT_S
    while time.monotonic() < deadline:
        pid, status = os.waitpid(-1, os.WNOHANG)
        if pid == child:
            return f"signal {os.WTERMSIG(status)}" if os.WIFSIGNALED(status) else f"exit {os.WEXITSTATUS(status)}"
        if pid == 0:
            time.sleep(0.02)
    os.kill(child, signal.SIGKILL)
    return "alive"


def main(mode: str, argv: list[str]) -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_CHILD_SUBREAPER, 1)
    read, write = os.pipe()
    parent = os.fork()
    if parent == 0:
        os.close(read)
        _parent(mode, argv, write)
    os.close(write)
    child = int(os.fdopen(read).readline())  # in mode kill: once the child is tied
    if mode == "kill":
        os.kill(parent, signal.SIGKILL)
    print(_reap(child), flush=True)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2:])
