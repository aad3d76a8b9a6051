"""A warm subtask process: started ahead by a TaskExecutor for one device (never a fork of a
process that made a CUDA context: CUDA cannot survive a fork), with that device's isolation
environment (``CUDA_VISIBLE_DEVICES``).

It imports the device framework and creates its CUDA context, the subtask runtime and NumPy
(imported with this module) and the configured modules (``warm.preload``), says
:class:`~accelflow.runtime.WarmReady` on the socket it was started with and waits. The
TaskExecutor takes it for one subtask that holds that device: it sends
:class:`~accelflow.runtime.StartSubtask` and the same socket becomes the subtask's status pipe,
on which it runs :func:`run_subtask` exactly as a forked subtask does. It is never used for a
second subtask: it exits with its subtask.

Warm processes are forked by the TaskExecutor's *warm zygote* (:func:`zygote`): one process
per device framework and ``warm.preload`` that has imported them (torch's import alone is 2-5
s) without initialising CUDA, and forks a warm process on request; the child makes its own
CUDA context (0.1-0.4 s), so a pool emptied by one job is full again before the next job of a
session cluster comes. A zygote whose imports failed, or initialised CUDA (a ``warm.preload``
module that touches the device at import), says so, and its TaskExecutor spawns each warm
process as a fresh interpreter instead (``python -m accelflow.runtime.subtask FD ...``).

Zygote protocol (``SOCK_SEQPACKET``, one pickled tuple per packet): TaskExecutor to zygote
``("fork", seq, env)`` with the warm process's socket attached (``SCM_RIGHTS``); zygote to
TaskExecutor ``("ready", why_not)`` once (``why_not`` None: it forks), ``("forked", seq,
pid)``, ``("exited", pid, returncode)``.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import sys
from multiprocessing.connection import Connection
from typing import Any, NoReturn

from accelflow.runtime import (
    WORK_DIR_ENV_VAR, StartSubtask, WarmReady, die_with_parent, expected_parent, keep_tempdir_in, whole_lines,
)
from accelflow.runtime import preload, resolve_framework, warm_device
from accelflow.runtime.subtask._runner import run_subtask

#: larger than any request (an environment); SOCK_SEQPACKET keeps packets whole
MAX_PACKET = 1 << 20


def main(argv: list[str] | None = None) -> None:
    """``FD FRAMEWORK PRELOAD_KEY [MODULE ...]``: the socket to the TaskExecutor, what to
    initialise (``warm.framework``), the key that named the modules, the modules; or
    ``zygote FD FRAMEWORK PRELOAD_KEY [MODULE ...]``: a warm zygote (:func:`zygote`)."""
    args = argv if argv is not None else sys.argv[1:]
    if args[0] == "zygote":
        zygote(int(args[1]), args[2], args[3], args[4:])
        return
    fd, framework, key, *modules = args
    _begin()
    _serve(Connection(int(fd)), framework, key, modules)


def _begin() -> None:
    # its TaskExecutor's spawning thread, which lives as long as it (killed now if already gone)
    die_with_parent(parent=expected_parent())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
    whole_lines()
    keep_tempdir_in(os.environ.get(WORK_DIR_ENV_VAR))  # its TaskExecutor's: the cluster's work directory


def _serve(conn: Connection, framework: str, key: str, modules: list[str]) -> NoReturn:
    used, note = warm_device(framework)
    preload(modules, key)
    try:
        conn.send(WarmReady(os.getpid(), used, note))
        start = conn.recv()
    except (EOFError, OSError):  # the TaskExecutor closed its pool: never used
        os._exit(0)
    assert isinstance(start, StartSubtask), start
    run_subtask(start.descriptor, conn, start.env, start.watch)
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)


def zygote(fd: int, framework: str, key: str, modules: list[str]) -> None:
    """Import ``framework`` (without a CUDA context) and ``modules``, then fork a warm
    process per request until the TaskExecutor closes the socket ``fd``."""
    _begin()
    sock = socket.socket(fileno=fd)
    used, why_not = resolve_framework(framework), None
    try:
        if used != "none":
            importlib.import_module(used)
    except Exception as exc:  # the warm processes it would fork could not use it either
        why_not = f"cannot import {used}: {type(exc).__name__}: {exc}".splitlines()[0]
    preload(modules, key)
    if why_not is None and _cuda_initialised():
        why_not = (f"CUDA was initialised while importing {used} and {key}'s modules "
                   f"({', '.join(modules) or 'none'}): a forked process cannot use it")
    _send(sock, ("ready", why_not))
    if why_not is not None:
        return
    wake_r, wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd fires
    signal.set_wakeup_fd(wake_w)
    living: set[int] = set()
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock, living)
        if sock.fileno() not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 1)
        except OSError:
            data, fds = b"", []
        if not data:
            return  # the TaskExecutor is gone or closed its pool: the warm processes follow
        _, seq, env = pickle.loads(data)
        pid = os.fork()
        if pid == 0:
            _become_warm(fds[0], [sock.fileno(), wake_r, wake_w], env, framework, key, modules)
        for f in fds:
            os.close(f)
        living.add(pid)
        _send(sock, ("forked", seq, pid))


def _cuda_initialised() -> bool:
    torch: Any = sys.modules.get("torch")
    try:
        return bool(torch is not None and torch.cuda.is_initialized())
    except Exception:
        return True  # cannot tell: spawn, as before the zygote


def _become_warm(fd: int, unused: list[int], env: dict[str, str], framework: str, key: str,
                 modules: list[str]) -> NoReturn:
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        for f in unused:
            os.close(f)
        os.environ.clear()
        os.environ.update(env)  # the device's isolation (CUDA_VISIBLE_DEVICES) before CUDA starts
        die_with_parent(parent=expected_parent())  # the zygote
        _serve(Connection(fd), framework, key, modules)
    finally:
        os._exit(1)


def _send(sock: socket.socket, report: tuple[Any, ...]) -> None:
    try:
        sock.send(pickle.dumps(report))
    except OSError:
        pass  # the TaskExecutor is gone: the next recv ends this process


def _reap(sock: socket.socket, living: set[int]) -> None:
    while living:
        try:
            pid, status = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return
        living.discard(pid)
        _send(sock, ("exited", pid, os.waitstatus_to_exitcode(status)))
