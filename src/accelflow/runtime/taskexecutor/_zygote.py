"""The zygote: one process per client that has imported what a TaskExecutor and its subtasks
run (accelflow's runtime, NumPy, cloudpickle) and forks each TaskExecutor of the embedded
local cluster from there. A spawned TaskExecutor spends 0.2-0.4 s starting an interpreter and
importing the same modules before its first subtask; a forked one starts in milliseconds.

Run by the client (``accelflow.runtime.launchers._zygote``) as ``python -P -c "import <this
module> as z; z.serve(FD)"`` with SIGINT ignored from the start (Ctrl-C in the terminal reaches
the zygote too, while it still imports), ``FD`` a ``SOCK_SEQPACKET`` socket to it, with
the client's environment and ``PYTHONHASHSEED=0`` (what a spawned TaskExecutor gets). One
pickled tuple per packet:

* client to zygote: ``("fork", seq, argv, env, cwd)`` with the client's stdout and stderr
  attached (``SCM_RIGHTS``); ``("signal", pid, signum)`` for a TaskExecutor it forked;
* zygote to client: ``("forked", seq, pid)``, ``("exited", pid, returncode)``.

A forked TaskExecutor gets what a spawned one would get at that moment: the environment
``env``, the working directory ``cwd``, the import path of ``$PYTHONPATH`` in ``env`` (never
``cwd`` itself: ``-P``), the client's stdout and stderr, stdin from /dev/null. The zygote has one thread, so forking is
safe; it dies with the client (SIGKILL, the parent-death signal) and its TaskExecutors with
it (SIGTERM, theirs); Ctrl-C is the client's to handle.
"""

from __future__ import annotations

import importlib
import os
import pickle
import select
import signal
import socket
import sys
import traceback
from typing import Any, NoReturn

from accelflow.runtime.taskexecutor._early import SUBTASK_MODULE

#: larger than any request (an environment); SOCK_SEQPACKET keeps packets whole
MAX_PACKET = 1 << 20
PRELOAD = (f"{__package__}._taskexecutor", SUBTASK_MODULE, "numpy", "cloudpickle")


def _pythonpath(env: dict[str, str]) -> list[str]:
    return [p for p in env.get("PYTHONPATH", "").split(os.pathsep) if p]


def _import_path(env: dict[str, str], base: list[str]) -> list[str]:
    """``sys.path`` of ``python -P -m`` started with ``env`` (``python_command``): ``$PYTHONPATH``,
    then the interpreter's own entries; never the working directory."""
    extra = _pythonpath(env)
    return [*extra, *(p for p in base if p not in extra)]


def serve(fd: int) -> None:
    """Fork TaskExecutors on request until the client closes the socket."""
    from accelflow.runtime import die_with_parent

    die_with_parent()
    client = os.getppid()
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    startup_path = _pythonpath(dict(os.environ))
    base = [p for p in sys.path if p not in startup_path]  # started with -P: no '' first
    for name in PRELOAD:
        importlib.import_module(name)
    sock = socket.socket(fileno=fd)
    wake_r, wake_w = os.pipe()
    os.set_blocking(wake_r, False)
    os.set_blocking(wake_w, False)
    signal.signal(signal.SIGCHLD, lambda *_: None)  # a handler, so that the wakeup fd fires
    signal.set_wakeup_fd(wake_w)
    living: set[int] = set()
    while True:
        ready, _, _ = select.select([sock.fileno(), wake_r], [], [])
        if wake_r in ready:
            os.read(wake_r, 4096)
        _reap(sock, living)  # before a "signal": a pid is only ever one of ours until reaped
        if sock.fileno() not in ready:
            continue
        try:
            data, fds, _, _ = socket.recv_fds(sock, MAX_PACKET, 2)
        except OSError:
            data, fds = b"", []
        if not data:
            return  # the client is gone; its TaskExecutors follow this process
        request = pickle.loads(data)
        if request[0] == "fork":
            _, seq, argv, env, cwd = request
            pid = os.fork()
            if pid == 0:
                _become_taskexecutor([sock.fileno(), wake_r, wake_w], fds, argv, env, cwd, base,
                                     client)
            for f in fds:
                os.close(f)
            living.add(pid)
            _send(sock, ("forked", seq, pid))
        elif request[0] == "signal" and request[1] in living:
            os.kill(request[1], request[2])


def _send(sock: socket.socket, report: tuple[Any, ...]) -> None:
    try:
        sock.send(pickle.dumps(report))
    except OSError:
        pass  # the client is gone: the next recv ends this process


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


def _become_taskexecutor(
    unused: list[int], fds: list[int], argv: list[str], env: dict[str, str], cwd: str,
    base: list[str], client: int,
) -> NoReturn:
    try:
        signal.set_wakeup_fd(-1)
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # SIGINT stays ignored: Ctrl-C is the client's
        for fd in unused:
            os.close(fd)
        null = os.open(os.devnull, os.O_RDONLY)
        os.dup2(null, 0)
        for target, fd in zip((1, 2), fds, strict=True):
            os.dup2(fd, target)
        for fd in {null, *fds} - {0, 1, 2}:
            os.close(fd)
        os.chdir(cwd)
        os.environ.clear()
        os.environ.update(env)
        sys.path[:] = _import_path(env, base)
        importlib.invalidate_caches()  # modules written since the zygote started
        from accelflow.runtime.taskexecutor._taskexecutor import run_and_exit

        run_and_exit(argv, client=client)
    except BaseException:
        traceback.print_exc()
    os._exit(1)

