"""The client's side of the zygote (``accelflow.runtime.taskexecutor._zygote``): started by
the first local cluster that asks for one and kept while the client runs, so every later
TaskExecutor of this client starts in milliseconds. One zygote per set of import-time
variables (:data:`IMPORT_TIME_PREFIXES`), which a forked process cannot take on."""

from __future__ import annotations

import os
import pickle
import queue
import signal
import socket
import subprocess
import threading
import time

import psutil

from accelflow.runtime import python_command
from accelflow.runtime.launchers._base import child_environment
from accelflow.runtime.taskexecutor import AUTHKEY_ENV_VAR
from accelflow.runtime.taskexecutor import zygote as program


class ZygoteUnavailable(Exception):
    """The zygote could not be started, or it died: start the TaskExecutor some other way."""


class ForkedProcess:
    """A TaskExecutor the zygote forked: what the local launcher uses of ``subprocess.Popen``."""

    def __init__(self, zygote: Zygote, pid: int) -> None:
        self.pid = pid
        self.returncode: int | None = None
        self._zygote = zygote
        self._exited = threading.Event()

    def _ended(self, returncode: int) -> None:
        self.returncode = returncode
        self._exited.set()

    def poll(self) -> int | None:
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if not self._exited.wait(timeout):
            raise subprocess.TimeoutExpired(f"TaskExecutor {self.pid}", timeout or 0.0)
        assert self.returncode is not None
        return self.returncode

    def terminate(self) -> None:
        self._zygote.signal(self.pid, signal.SIGTERM)

    def kill(self) -> None:
        self._zygote.signal(self.pid, signal.SIGKILL)


class Zygote:
    def __init__(self, import_env: dict[str, str]) -> None:
        self._sock, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        self._lock = threading.Lock()
        self._seq = 0
        self._replies: dict[int, queue.Queue[ForkedProcess | None]] = {}
        self._children: dict[int, ForkedProcess] = {}
        self.alive = True
        self.owner = os.getpid()  # a forked copy of the client must start its own
        started: queue.Queue[BaseException | None] = queue.Queue()
        # The reader thread starts the zygote: Linux sends the parent-death signal when the
        # thread that forked a process ends, and this one lasts as long as the client.
        threading.Thread(target=self._run, args=(theirs, import_env, started), daemon=True,
                         name="accelflow-zygote").start()
        error = started.get()
        if error is not None:
            self.alive = False
            raise ZygoteUnavailable(f"cannot start the zygote: {error}") from error

    def _run(self, theirs: socket.socket, import_env: dict[str, str],
             started: queue.Queue[BaseException | None]) -> None:
        env = {name: value for name, value in os.environ.items()
               if not name.startswith(IMPORT_TIME_PREFIXES) and name != AUTHKEY_ENV_VAR}
        env.update(import_env, **child_environment())
        fd = theirs.fileno()
        # Ctrl-C is the client's to handle: ignored before the zygote's first import
        code = ("import signal; signal.signal(signal.SIGINT, signal.SIG_IGN); "
                f"import {program.__name__} as z; z.serve({fd})")
        try:  # stderr stays the client's, for a traceback should the zygote ever fail
            self.process = subprocess.Popen(
                python_command("-c", code),
                pass_fds=[fd], env=env, stdin=subprocess.DEVNULL, stdout=subprocess.DEVNULL,
            )
        except OSError as exc:
            started.put(exc)
            return
        finally:
            theirs.close()
        started.put(None)
        while True:
            try:
                data = self._sock.recv(program.MAX_PACKET)
            except OSError:
                data = b""
            if not data:
                break
            report = pickle.loads(data)
            if report[0] == "forked":
                child = ForkedProcess(self, report[2])
                self._children[child.pid] = child
                self._replies.pop(report[1]).put(child)
            elif report[0] == "exited":
                self._children.pop(report[1])._ended(report[2])
        self._gone()

    def _gone(self) -> None:
        """The zygote died (killed; it never exits while the client runs): its TaskExecutors
        get SIGTERM, their parent-death signal. Report them when they are gone."""
        with self._lock:
            self.alive = False
            for reply in self._replies.values():
                reply.put(None)
            self._replies.clear()
        self.process.wait()
        for child in list(self._children.values()):
            while _running(child.pid):
                time.sleep(0.05)
            child._ended(-signal.SIGTERM)

    def fork(self, argv: list[str], env: dict[str, str]) -> ForkedProcess:
        """A TaskExecutor running ``argv`` with ``env``, this process's working directory,
        stdout and stderr.

        Raises:
            ZygoteUnavailable: the zygote has died.
        """
        reply: queue.Queue[ForkedProcess | None] = queue.Queue(maxsize=1)
        with self._lock:
            if not self.alive:
                raise ZygoteUnavailable("the zygote has died")
            self._seq += 1
            self._replies[self._seq] = reply
            request = pickle.dumps(("fork", self._seq, argv, env, os.getcwd()))
            std = [_std(1), _std(2)]
            try:
                socket.send_fds(self._sock, [request], std)
            except OSError as exc:
                del self._replies[self._seq]
                raise ZygoteUnavailable(f"the zygote is gone: {exc}") from exc
            finally:
                for fd in set(std) - {1, 2}:
                    os.close(fd)
        child = reply.get()
        if child is None:
            raise ZygoteUnavailable("the zygote died while forking a TaskExecutor")
        return child

    def signal(self, pid: int, signum: int) -> None:
        """Send ``signum`` to a TaskExecutor the zygote forked and has not reaped (so the pid
        is still that process's)."""
        with self._lock:
            if self.alive:
                try:
                    self._sock.send(pickle.dumps(("signal", pid, signum)))
                except OSError:
                    pass


def _running(pid: int) -> bool:
    """Whether ``pid`` runs (an orphan that has exited stays a zombie until init reaps it,
    which some containers' init never does)."""
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


def _std(fd: int) -> int:
    """``fd``, or a new descriptor of /dev/null where this process has ``fd`` closed."""
    try:
        os.fstat(fd)
    except OSError:
        return os.open(os.devnull, os.O_WRONLY)
    return fd


#: variables read when an interpreter starts or a library loads (thread pools, allocators,
#: the dynamic loader): a zygote serves only TaskExecutors whose values equal its own
IMPORT_TIME_PREFIXES = ("PYTHON", "LD_", "OMP_", "OPENBLAS_", "GOTO_", "MKL_", "KMP_", "BLIS_",
                        "NUMPY_", "VECLIB_", "MALLOC_")
_PER_FORK = ("PYTHONPATH", "PYTHONHASHSEED")  # set per TaskExecutor / the same for all

_zygotes: dict[tuple[tuple[str, str], ...], Zygote] = {}
_zygote_lock = threading.Lock()


def import_time_environment(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    """The variables of ``env`` that a forked process cannot take from ``env`` afterwards."""
    return tuple(sorted((name, value) for name, value in env.items()
                        if name.startswith(IMPORT_TIME_PREFIXES) and name not in _PER_FORK))


def get_zygote(env: dict[str, str] | None = None) -> Zygote:
    """This client's zygote for ``env`` (default: this process's environment), started on
    first use, again after it died, and once more for each other set of import-time
    variables (``OMP_NUM_THREADS`` and the like: NumPy's thread pool is sized on import).

    Raises:
        ZygoteUnavailable: it cannot be started.
    """
    key = import_time_environment(dict(os.environ) if env is None else env)
    with _zygote_lock:
        zygote = _zygotes.get(key)
        if (zygote is None or not zygote.alive or zygote.owner != os.getpid()
                or zygote.process.poll() is not None):
            zygote = _zygotes[key] = Zygote(dict(key))
        return zygote


def zygote_pids() -> set[int]:
    """The pids of this client's zygotes that run (tests tell them from stray processes)."""
    return {z.process.pid for z in list(_zygotes.values())
            if z.alive and z.owner == os.getpid() and z.process.poll() is None}
