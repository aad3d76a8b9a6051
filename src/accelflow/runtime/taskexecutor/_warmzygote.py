"""The TaskExecutor's side of its warm zygotes (``runtime/subtask/_warm.py``): one process per
``(warm.framework, warm.preload)`` that has imported them and forks the warm subtask
processes of the devices that use them, so a pool refill costs a CUDA context (0.1-0.4 s),
not a fresh interpreter's torch import (2-5 s) as well.

:class:`Zygotes` starts one on first use (on the spawning thread, whose end the zygote's
parent-death signal is tied to) and gives the warm pool a :class:`ZygoteChild` per fork: what
``subprocess.Popen`` is to a spawned warm process (``pid``, ``poll``, ``wait``, ``terminate``,
``kill``), the exit code as the zygote reports it. A zygote that cannot fork (its imports
failed, or initialised CUDA) says why once, in the log, and the pool spawns instead.
"""

from __future__ import annotations

import logging
import os
import pickle
import select
import signal
import socket
import subprocess
import threading

from accelflow.runtime import parent_env, python_command, work_dir_env

_log = logging.getLogger("accelflow.runtime")

#: how long a fork request waits for the zygote's answer; past it the pool spawns the process
#: instead (and from then on)
FORK_WAIT_S = 10.0
#: how long an exited child's exit code may take to come from the zygote (it reaps at once)
EXIT_REPORT_S = 2.0


class Zygote:
    """One warm zygote process and the reader of what it says."""

    def __init__(self, module: str, command: list[str]) -> None:
        mine, theirs = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            self.popen = subprocess.Popen(
                python_command("-m", module, "zygote", str(theirs.fileno()), *command),
                env=dict(os.environ, **parent_env(), **work_dir_env()), pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL)
        except BaseException:
            mine.close()
            raise
        finally:
            theirs.close()
        self.sock, self.command = mine, command
        self.cond = threading.Condition()
        self.why_not: str | None = None
        self.ready = False  # it said ("ready", ...)
        self.forked: dict[int, int] = {}  # seq -> pid
        self.codes: dict[int, int] = {}  # pid -> exit code
        self.seq = 0
        threading.Thread(target=self._read, daemon=True, name="accelflow-warm-zygote").start()

    def _read(self) -> None:
        while True:
            try:
                data = self.sock.recv(1 << 16)
            except OSError:
                data = b""
            with self.cond:
                if not data:
                    self.why_not = self.why_not or f"the warm zygote (pid {self.popen.pid}) exited"
                    self.ready = True
                    self.cond.notify_all()
                    return
                report = pickle.loads(data)
                if report[0] == "ready":
                    self.ready, self.why_not = True, report[1]
                elif report[0] == "forked":
                    self.forked[report[1]] = report[2]
                elif report[0] == "exited":
                    self.codes[report[1]] = report[2]
                self.cond.notify_all()

    def fork(self, env: dict[str, str], fd: int) -> ZygoteChild | None:
        """A warm process forked with ``env`` and the socket ``fd``, or None (spawn it): the
        zygote still imports (a spawn waits for nobody), cannot fork (:attr:`why_not`), or did
        not answer in time (:attr:`why_not` says so)."""
        with self.cond:
            if not self.ready or self.why_not is not None:
                return None
            self.seq += 1
            seq = self.seq
        try:
            socket.send_fds(self.sock, [pickle.dumps(("fork", seq, env))], [fd])
        except OSError:
            return None
        with self.cond:
            if not self.cond.wait_for(lambda: seq in self.forked or self.why_not is not None, FORK_WAIT_S):
                self.why_not = f"the warm zygote (pid {self.popen.pid}) did not answer within {FORK_WAIT_S:g} s"
                return None
            pid = self.forked.pop(seq, None)
        return None if pid is None else ZygoteChild(pid, self)

    def exitcode(self, pid: int, wait: float) -> int | None:
        with self.cond:
            self.cond.wait_for(lambda: pid in self.codes or self.why_not is not None, wait)
            return self.codes.get(pid)

    def close(self) -> None:
        """Stop it (its warm processes die with it)."""
        try:
            self.sock.shutdown(socket.SHUT_RDWR)
        except OSError:
            pass
        self.sock.close()
        try:
            self.popen.wait(2.0)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class ZygoteChild:
    """A warm process forked by a zygote, as ``subprocess.Popen`` is to a spawned one."""

    def __init__(self, pid: int, zygote: Zygote) -> None:
        self.pid, self.zygote = pid, zygote
        try:
            self.pidfd: int | None = os.pidfd_open(pid)
        except ProcessLookupError:  # exited and reaped already
            self.pidfd = None
        self.returncode: int | None = None

    def _exited(self, timeout: float | None) -> bool:
        """Whether it exited, waiting ``timeout`` seconds at most (None: until it does)."""
        if self.pidfd is None:
            return True
        return bool(select.select([self.pidfd], [], [], timeout)[0])

    def poll(self) -> int | None:
        if self.returncode is None and self._exited(0):
            code = self.zygote.exitcode(self.pid, EXIT_REPORT_S)
            self.returncode = code if code is not None else -signal.SIGKILL  # the zygote died with it
            self._close()
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        if self.returncode is None and not self._exited(timeout):
            raise subprocess.TimeoutExpired(f"warm process {self.pid}", timeout or 0.0)
        code = self.poll()
        assert code is not None
        return code

    def send_signal(self, sig: int) -> None:
        if self.returncode is None and self.pidfd is not None:
            try:
                signal.pidfd_send_signal(self.pidfd, sig)
            except ProcessLookupError:
                pass

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def _close(self) -> None:
        if self.pidfd is not None:
            os.close(self.pidfd)
            self.pidfd = None


class Zygotes:
    """The warm zygotes of one TaskExecutor, one per warm command (framework and modules),
    started on first use."""

    def __init__(self, module: str) -> None:
        self.module = module
        self.started: dict[tuple[str, ...], Zygote | None] = {}
        self.lock = threading.Lock()
        self.closed = False

    def fork(self, command: list[str], env: dict[str, str], fd: int) -> ZygoteChild | None:
        """A warm process of ``command`` forked by its zygote, or None: the caller spawns one
        (as it does while the zygote, started at the first call, still imports). Called on
        the spawning thread."""
        with self.lock:
            if self.closed:
                return None
            key = tuple(command)
            if key not in self.started:
                try:
                    self.started[key] = Zygote(self.module, command)
                except OSError as exc:
                    _log.warning("cannot start a warm zygote for %s: %s; warm processes are spawned", command, exc)
                    self.started[key] = None
            zygote = self.started[key]
        child = zygote.fork(env, fd) if zygote is not None else None
        if child is None and zygote is not None and zygote.why_not is not None:
            with self.lock:
                dropped = self.started.get(key) is zygote
                if dropped:  # said once; spawned from now on
                    self.started[key] = None
            if dropped:
                _log.warning("warm processes for %s are spawned, not forked: %s", command, zygote.why_not)
                zygote.close()
        return child

    def close(self) -> None:
        with self.lock:
            self.closed = True
            zygotes = [z for z in self.started.values() if z is not None]
            self.started.clear()
        for zygote in zygotes:
            zygote.close()


__all__ = ["Zygote", "ZygoteChild", "Zygotes"]
