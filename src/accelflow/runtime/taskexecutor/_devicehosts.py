"""The device hosts of one TaskExecutor (``runtime/devicehost``): one per device that a
resident operator runs on, started on demand and kept as long as the TaskExecutor (a session
cluster keeps them between jobs; ``accelflow cluster stop`` ends them, and with them every
resident instance).

A subtask's resident operator asks this TaskExecutor's broker (a Unix socket named in its
environment, ``$ACCELFLOW_DEVICE_HOSTS``) for the host of its device; the broker starts one
if there is none or the last one died (its resident instances died with it: the subtasks
using them fail and restart, and the restarted ones open a fresh instance), waits until it
is ready and answers with its address. A subtask whose host's connection closes asks again
with ``HostRequest.gone``: the broker answers how that host ended (:meth:`DeviceHosts.exit_of`),
which the subtask fails with at once. Each host is spawned, never forked, with its device's
isolation environment, and reports what is resident on its control socket, which the
TaskExecutor's loop reads (:meth:`DeviceHosts.controls`, :meth:`DeviceHosts.event`).
"""

from __future__ import annotations

import itertools
import json
import logging
import os
import socket
import subprocess
import threading
from collections import deque
from collections.abc import Callable
from multiprocessing import util
from multiprocessing.connection import Connection
from typing import Any, TypeVar

from accelflow._parent import killed_by
from accelflow._errors import ConfigError, JobError, encode_error
from accelflow.resources import ExternalResourceInfo
from accelflow.runtime import (
    HOSTS_ENV_VAR, HOSTS_KEY_ENV_VAR, HostAddress, HostFailed, HostReady, HostReport, HostRequest,
    ResidentInstance, close_listener, parent_env, python_command, serve_forever, unix_listener, work_dir_env,
)
from accelflow.runtime.taskexecutor._warmpool import Device

_log = logging.getLogger("accelflow.runtime")
#: the device host's program, named, not imported (it runs in its own process)
HOST_MODULE = (__package__ or "").rsplit(".", 1)[0] + ".devicehost"
#: how long a device host may take to import its framework and make its CUDA context
READY_TIMEOUT_S = 300.0
#: how long the broker waits for a host whose connections closed to exit (it is dying)
EXIT_WAIT_S = 5.0
#: how many ended hosts the broker remembers, to say how they ended
_GONE_KEPT = 16
T = TypeVar("T")


class _Host:
    def __init__(self, device: Device, popen: subprocess.Popen[bytes], control: Connection, ready: HostReady) -> None:
        self.popen, self.control, self.ready = popen, control, ready
        self.name = f"the device host of {device[0]} {device[1]} (pid {ready.pid})"

    def ended(self) -> str:
        """How it ended, e.g. ``was killed by signal 9 (SIGKILL)``, once it has."""
        code, name = self.popen.returncode, killed_by(self.popen.returncode)
        if name is None:
            return f"exited with code {code}"
        return f"was killed by {name}" if name.startswith("signal ") else f"was killed by signal {-code} ({name})"

    def stop(self, grace: float = 2.0) -> None:
        """Closing its control socket ends it (its instances' ``close()`` run); then make sure."""
        self.control.close()
        try:
            self.popen.wait(grace)
        except subprocess.TimeoutExpired:
            self.popen.kill()
            self.popen.wait()


class DeviceHosts:
    """Args:
        taskexecutor_id: this TaskExecutor's id.
        spawn: runs a function on the thread that spawns this TaskExecutor's children and
            returns its result (their parent-death signal is tied to that thread).
        env: the environment of a process of a device (its isolation; empty: it has none).
        spec: what a device's host is told besides the device (its framework, preloads...).
        changed: called (from any thread) when a host was added.
    """

    def __init__(self, taskexecutor_id: str, spawn: Callable[[Callable[[], Any]], Any],
                 env: Callable[[Device], dict[str, str]], spec: Callable[[Device], dict[str, Any]],
                 changed: Callable[[], None]) -> None:
        self.taskexecutor_id, self.spawn, self.env, self.spec, self.changed = taskexecutor_id, spawn, env, spec, changed
        self.key = os.urandom(32)
        self.dir = util.get_temp_dir()  # the cluster's work directory (see runtime.keep_tempdir_in)
        self.names = itertools.count()
        self.address = os.path.join(self.dir, f"dh-{os.getpid()}.sock")
        self.hosts: dict[Device, _Host] = {}
        self.gone: deque[_Host] = deque(maxlen=_GONE_KEPT)  # ended, latest last
        self.reports: dict[Device, tuple[ResidentInstance, ...]] = {}
        self.starting: dict[Device, threading.Event] = {}
        self.lock = threading.Lock()
        self.stopped = threading.Event()
        self.listener = unix_listener(self.address)
        threading.Thread(target=serve_forever, daemon=True, name="accelflow-device-hosts",
                         args=(self.listener, self.key, self._serve, self.stopped.is_set,
                               "accelflow-device-host-request")).start()

    @property
    def subtask_env(self) -> dict[str, str]:
        """What every subtask's environment holds to find its device hosts."""
        return {HOSTS_ENV_VAR: self.address, HOSTS_KEY_ENV_VAR: self.key.hex()}

    def _serve(self, conn: Connection) -> None:
        try:
            request = conn.recv()
            assert isinstance(request, HostRequest), request
            try:
                if request.gone is not None:
                    raise self.exit_of(request.gone)
                address = self._host_of((request.resource, ExternalResourceInfo(request.properties).address))
            except Exception as exc:
                conn.send(HostFailed(encode_error(exc)))
            else:
                conn.send(HostAddress(address))
        except (EOFError, OSError):
            pass  # the subtask went away
        finally:
            conn.close()

    def exit_of(self, address: str) -> JobError:
        """The error of a subtask whose connection to the host at ``address`` closed: which host
        it was and how it ended (waiting :data:`EXIT_WAIT_S` for it to exit).

        Example: ``the device host of gpu 2 (pid 4242) was killed by signal 9 (SIGKILL); its
        resident instances are gone (the restarted subtasks open them again in a new host)``."""
        with self.lock:
            host = next((h for h in [*self.hosts.values(), *self.gone] if h.ready.address == address), None)
        if host is None:
            return JobError(f"the device host at {address} went away (its TaskExecutor does not know it)")
        try:
            host.popen.wait(EXIT_WAIT_S)
        except subprocess.TimeoutExpired:
            return JobError(f"{host.name} closed the subtask's connection but still runs; see its output above")
        return JobError(f"{host.name} {host.ended()}; its resident instances are gone (the restarted "
                        "subtasks open them again in a new host)")

    def _host_of(self, device: Device) -> str:
        """The address of ``device``'s host, started first where there is none (one start at
        a time per device: the others wait for it)."""
        while True:
            with self.lock:
                host = self.hosts.get(device)
                if host is not None and host.popen.poll() is None:
                    return host.ready.address
                starting = self.starting.get(device)
                if starting is None:
                    starting = self.starting[device] = threading.Event()
                    break
            starting.wait()
        started = None
        try:
            started = self._start(device)
            return started.ready.address
        finally:
            with self.lock:
                del self.starting[device]
                if started is not None:
                    self.hosts[device] = started
            starting.set()
            self.changed()

    def _start(self, device: Device) -> _Host:
        resource, address = device
        env = self.env(device)
        if not env:
            raise ConfigError(
                f"resident=True needs a device its driver isolates (an environment such as "
                f"CUDA_VISIBLE_DEVICES for a process of its own); {resource} {address} has none",
                key=f"external-resource.{resource}.driver-factory.class")
        listen = os.path.join(self.dir, f"dh-{os.getpid()}-{next(self.names)}.sock")
        mine, theirs = socket.socketpair()
        spec = json.dumps(dict(self.spec(device), taskexecutor_id=self.taskexecutor_id))
        argv = python_command("-m", HOST_MODULE, str(theirs.fileno()), listen, spec)
        try:
            popen = self.spawn(lambda: subprocess.Popen(
                argv, env=dict(os.environ, **env, **parent_env(), **work_dir_env(), **{HOSTS_KEY_ENV_VAR: self.key.hex()}),
                pass_fds=(theirs.fileno(),), stdin=subprocess.DEVNULL))
        finally:
            theirs.close()
        control = Connection(mine.detach())
        try:
            if not control.poll(READY_TIMEOUT_S):
                raise TimeoutError(f"not ready within {READY_TIMEOUT_S:g} s")
            ready = control.recv()
        except (EOFError, OSError, TimeoutError) as exc:
            popen.kill()
            code = popen.wait()
            control.close()
            raise JobError(f"the device host of {resource} {address} did not start ({exc or 'exit code ' + str(code)}); "
                           "see its output above") from None
        assert isinstance(ready, HostReady), ready
        _log.info("device host of %s %s started (pid %d): %s", resource, address, ready.pid, ready.note)
        return _Host(device, popen, control, ready)

    # -- on the TaskExecutor's loop ----------------------------------------------------------
    def controls(self) -> list[Connection]:
        with self.lock:
            return [h.control for h in self.hosts.values()]

    def event(self, ready: Any) -> bool:
        """Read a host's report (``ready``: one of :meth:`controls`); whether it was one."""
        with self.lock:
            device = next((d for d, h in self.hosts.items() if h.control is ready), None)
        if device is None:
            return False
        try:
            report = self.hosts[device].control.recv()
            assert isinstance(report, HostReport), report
            self.reports[device] = report.instances
        except (EOFError, OSError):
            with self.lock:
                host = self.hosts.pop(device)
                self.gone.append(host)
            self.reports.pop(device, None)
            host.stop(0)
            _log.warning("%s %s: its resident instances are gone; the next subtask that needs one starts a "
                         "new host", host.name, host.ended())
        return True

    def resident(self) -> tuple[ResidentInstance, ...]:
        return tuple(i for device in sorted(self.reports) for i in self.reports[device])

    def close(self) -> None:
        self.stopped.set()
        close_listener(self.listener)
        with self.lock:
            hosts = list(self.hosts.values())
            self.hosts.clear()
        for host in hosts:
            host.control.close()  # all at once: each closes its instances
        for host in hosts:
            host.stop()
        for host in hosts:
            try:
                os.unlink(host.ready.address)
            except OSError:
                pass
