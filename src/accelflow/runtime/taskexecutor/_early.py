"""What a TaskExecutor process does before its own imports: start its forkserver, so the
forkserver's preloads (the subtask runtime, NumPy, cloudpickle) import while this process
imports the rest (drivers, messages) instead of after it, on the way to the first subtask.

Only the standard library here (and ``runtime._process``, which ``__main__`` imported first):
``__main__`` imports this module before the rest.
"""

from __future__ import annotations

import importlib
import multiprocessing
import os
import signal
import socket
import traceback
from multiprocessing import connection, forkserver, resource_tracker, util
from typing import Any, NoReturn

from accelflow.runtime import keep_tempdir_in  # ``runtime._process``: light, imported already

AUTHKEY_ENV_VAR = "ACCELFLOW_AUTHKEY"
#: ``accelflow._parent.PARENT_PID_ENV_VAR`` (this module imports only the standard library)
PARENT_PID_ENV_VAR = "ACCELFLOW_PARENT_PID"
#: the subtask runtime, named, not imported: the forkserver imports it (with NumPy), not us
SUBTASK_MODULE = (__package__ or "").rsplit(".", 1)[0] + ".subtask"


class _Module:
    def __init__(self, name: str) -> None:
        self.name = name

    def __reduce__(self) -> tuple[Any, ...]:
        return importlib.import_module, (self.name,)


class SubtaskEntry:
    """``run_subtask`` as a ``Process`` target, pickled by name: the forked child resolves it
    from the module its forkserver preloaded, and the TaskExecutor never imports it."""

    def __reduce__(self) -> tuple[Any, ...]:
        return getattr, (_Module(SUBTASK_MODULE), "run_subtask")

    def __call__(self, *args: Any) -> None:
        importlib.import_module(SUBTASK_MODULE).run_subtask(*args)


def start_forkserver(*, fork: bool = False, workdir: str | None = None) -> None:
    """Start this process's forkserver, which forks the subtasks (a no-op once it runs).

    ``workdir``: the cluster's working directory (the launcher's, where the configuration
    file and the JobManager's socket are): the forkserver's socket goes there, not into a
    ``pymp-*`` directory in ``$TMPDIR`` (:func:`keep_tempdir_in`).

    ``_forkserver_guard`` first: it makes the forkserver die with this process, and subtasks
    die with the forkserver, so nothing outlives a TaskExecutor that is SIGKILLed. The
    authentication key (still in the environment this early) is kept from the forkserver.
    It returns at once: the forkserver imports its preloads on its own, and the first subtask
    fork waits for them.

    ``fork``: this process was forked by the zygote, its preloads are imported already and it
    has no thread yet: the forkserver is forked from it (milliseconds) instead of started as
    a fresh interpreter that imports them again (0.2-0.3 s).
    """
    keep_tempdir_in(workdir)
    ctx = multiprocessing.get_context("forkserver")
    guard = f"{__package__}._forkserver_guard"  # named, not imported: importing it ties us too
    ctx.set_forkserver_preload([guard, SUBTASK_MODULE, "numpy", "cloudpickle"])
    key = os.environ.pop(AUTHKEY_ENV_VAR, None)
    os.environ[PARENT_PID_ENV_VAR] = str(os.getpid())  # for the guard (``accelflow._parent``)
    try:
        if not (fork and _fork_forkserver()):
            forkserver.ensure_running()
    finally:
        os.environ.pop(PARENT_PID_ENV_VAR, None)
        if key is not None:
            os.environ[AUTHKEY_ENV_VAR] = key


#: what ``_fork_forkserver`` sets on multiprocessing's forkserver (CPython 3.11-3.14)
_FORKSERVER_STATE = ("_lock", "_forkserver_address", "_forkserver_alive_fd", "_forkserver_pid")


def _fork_forkserver() -> bool:
    """Fork the forkserver from this process: what ``ForkServer.ensure_running`` does, with
    ``os.fork`` where it runs a new interpreter. False (nothing done) where this Python's
    forkserver is not the one this code knows; the caller then starts one as usual."""
    server: Any = forkserver._forkserver  # type: ignore[attr-defined]
    if not all(hasattr(server, name) for name in _FORKSERVER_STATE):
        return False
    import inspect

    takes_authkey = "authkey_r" in inspect.signature(forkserver.main).parameters  # 3.14+
    with server._lock:
        if server._forkserver_pid is not None:
            return True
        resource_tracker.ensure_running()  # as ensure_running: subtasks get its descriptor
        with socket.socket(socket.AF_UNIX) as listener:
            address = connection.arbitrary_address("AF_UNIX")  # type: ignore[attr-defined]
            listener.bind(address)
            if not util.is_abstract_socket_namespace(address):
                os.chmod(address, 0o600)
            listener.listen()
            alive_r, alive_w = os.pipe()  # EOF when this process and every subtask are gone
            extra: dict[str, int] = {}
            if takes_authkey:
                authkey = os.urandom(32)
                authkey_r, authkey_w = os.pipe()
                os.write(authkey_w, authkey)
                os.close(authkey_w)
                extra["authkey_r"] = authkey_r
            parent = os.getpid()
            pid = os.fork()
            if pid == 0:
                _serve_forks(listener.fileno(), alive_r, alive_w, extra, parent)
            os.close(alive_r)
            for fd in extra.values():
                os.close(fd)
        server._forkserver_address = address
        server._forkserver_alive_fd = alive_w
        server._forkserver_pid = pid
        if takes_authkey:
            server._forkserver_authkey = authkey
    return True


def _serve_forks(listener_fd: int, alive_r: int, alive_w: int, extra: dict[str, int], parent: int) -> NoReturn:
    """The forked forkserver: tied to this TaskExecutor (``parent``, its pid before the fork)
    as the guard module ties a started one (already imported here, so named explicitly),
    SIGTERM as a fresh process has it."""
    code = 1
    try:
        from accelflow.runtime import die_with_parent

        os.close(alive_w)
        signal.signal(signal.SIGTERM, signal.SIG_DFL)
        die_with_parent(parent=parent)
        forkserver.main(listener_fd, alive_r, [], **extra)  # type: ignore[arg-type]
    except SystemExit:  # its way out: every holder of the alive pipe is gone
        code = 0
    except BaseException:
        traceback.print_exc()
    finally:
        os._exit(code)
