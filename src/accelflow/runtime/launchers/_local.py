"""The embedded local cluster: TaskExecutors as OS processes on this machine."""

from __future__ import annotations

import json
import logging
import os
import subprocess
import threading
from collections.abc import Mapping
from multiprocessing.connection import Connection

from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.runtime import close_listener, python_command, serve_forever, unix_listener
from accelflow.runtime import (
    Command, Registration, RegistrationFailed, Shutdown, TaskExecutorExited, TaskExecutorLost,
)
from accelflow.runtime import taskexecutor
from accelflow.runtime.taskexecutor import AUTHKEY_ENV_VAR, trace, write_warm_ahead
from accelflow.runtime.launchers._base import Launcher, TaskExecutorHandle, child_environment
from accelflow.runtime.launchers._zygote import ForkedProcess, ZygoteUnavailable, get_zygote

_STOP_TIMEOUT_S = 10.0
_log = logging.getLogger(__name__)


class _LocalHandle(TaskExecutorHandle):
    def __init__(self, te_id: str, conn: Connection) -> None:
        self.id = te_id
        self.conn = conn
        self.lock = threading.Lock()

    def send(self, message: Command) -> None:
        try:
            with self.lock:
                self.conn.send(message)
        except OSError:
            pass  # its reader thread reports TaskExecutorLost


class LocalLauncher(Launcher):
    def __init__(self, config: Configuration) -> None:
        self.config = config
        self._set_up()
        self.listener = unix_listener(str(self.workdir / "jm.sock"))
        self.config_path = self.workdir / "config.json"
        self.config_path.write_text(json.dumps(config.to_raw_dict(), default=str), encoding="utf-8")
        self.procs: dict[str, subprocess.Popen[bytes] | ForkedProcess] = {}
        self.handles: dict[str, _LocalHandle] = {}
        self._connected: dict[str, int] = {}  # te_id -> pid of the incarnation connected now
        self._stopped = False
        threading.Thread(target=serve_forever, daemon=True, name="accelflow-accept",
                         args=(self.listener, self.authkey, self._read, lambda: self._stopped,
                               "accelflow-taskexecutor-connection")).start()

    def warm_ahead(self, wanted: Mapping[str, tuple[int, int]]) -> None:
        if wanted:
            write_warm_ahead(str(self.workdir), wanted)

    def start(self, ids: list[str]) -> None:
        env = dict(os.environ, **child_environment())
        env[AUTHKEY_ENV_VAR] = self.authkey.hex()
        for te_id in ids:
            trace(f"launcher popen {te_id}")
            argv = [te_id, str(self.workdir / "jm.sock"), str(self.config_path)]
            proc = self._fork(argv, env) or subprocess.Popen(
                python_command("-m", taskexecutor.__name__, *argv), env=env, stdin=subprocess.DEVNULL,
            )
            self.procs[te_id] = proc
            threading.Thread(target=self._watch, args=(te_id, proc), daemon=True).start()

    def _fork(self, argv: list[str], env: dict[str, str]) -> ForkedProcess | None:
        """A TaskExecutor forked by the zygote (``local.start-method: zygote``), or None to
        spawn one: the other start method, or no zygote to be had (with a warning)."""
        if self.config.get(k.LOCAL_START_METHOD) != "zygote":
            return None
        for _ in range(2):  # a zygote found dead is replaced once
            try:
                return get_zygote(env).fork(argv, env)
            except ZygoteUnavailable as exc:
                error = exc
        _log.warning("%s; starting TaskExecutor %s as a fresh interpreter instead "
                     "(local.start-method: spawn)", error, argv[0])
        return None

    def handle(self, te_id: str) -> TaskExecutorHandle:
        return self.handles[te_id]

    def channel_address(self, name: str) -> str:
        return str(self.workdir / f"{name}.sock")

    def pid(self, te_id: str) -> int:
        return self.procs[te_id].pid

    def _read(self, conn: Connection) -> None:
        te_id, pid = None, None
        try:
            while True:
                msg = conn.recv()
                if isinstance(msg, Registration):
                    te_id, pid = msg.taskexecutor_id, msg.pid
                    self.handles[te_id] = _LocalHandle(te_id, conn)
                    self._connected[te_id] = pid
                elif isinstance(msg, RegistrationFailed):
                    self.events.put((msg.taskexecutor_id, msg))
                    continue
                if te_id is not None:
                    self.events.put((te_id, msg))
        except (EOFError, OSError):
            if te_id is not None:
                if self._connected.get(te_id) == pid:
                    del self._connected[te_id]
                self.events.put((te_id, TaskExecutorLost(te_id, pid)))

    def _watch(self, te_id: str, proc: subprocess.Popen[bytes] | ForkedProcess) -> None:
        code = proc.wait()
        self.events.put((te_id, TaskExecutorExited(te_id, code, proc.pid)))

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        for te_id, proc in self.procs.items():
            if self._connected.get(te_id) == proc.pid:
                self.handles[te_id].send(Shutdown())
            elif proc.poll() is None:
                proc.terminate()  # not registered (yet): nobody to ask; SIGTERM still releases
        for proc in self.procs.values():
            try:
                proc.wait(_STOP_TIMEOUT_S)
            except subprocess.TimeoutExpired:
                proc.kill()
                proc.wait()
        close_listener(self.listener)
        self._torn_down()
