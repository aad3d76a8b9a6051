"""The TaskExecutor process: runs the external resource drivers once at start-up, registers
its slots and devices with the JobManager, and forks one process per deployed subtask with
that subtask's isolation environment (e.g. ``CUDA_VISIBLE_DEVICES``).

It never outlives the JobManager: when the JobManager's connection drops (the client exited
or crashed) it kills its subtasks, gives its devices back and exits.

Run as ``python -m accelflow.runtime.taskexecutor ID JM_ADDRESS CONFIG_JSON``, or forked by
the client's zygote (``_zygote``) with those arguments, with the authentication key in
``$ACCELFLOW_AUTHKEY`` (hex).
"""

from __future__ import annotations

import atexit
import json
import multiprocessing
import os
import shutil
import signal
import sys
import threading
import time
import traceback
from multiprocessing.connection import Client, Connection, wait
from typing import Any, NoReturn

from accelflow._errors import AccelflowError, encode_error
from accelflow.config import config_from
from accelflow.config import keys as k
from accelflow.resources import SUBTASK_ENV_VAR, ExternalResourceInfoProvider
from accelflow.runtime import (
    CancelJob, Deploy, DevicesFree, InjectFault, NotifyCheckpointComplete, RegisteredDevice, RegisteredResource, Registration,
    RegistrationFailed, Rollback, Shutdown, SubtaskDescriptor, SubtaskExited, SubtaskFailed, SubtaskKey,
    TriggerCheckpoint,
)
from accelflow.runtime import die_with_parent
from accelflow.runtime import whole_lines
from accelflow.runtime.taskexecutor._ahead import read_warm_ahead
from accelflow.runtime.taskexecutor._early import AUTHKEY_ENV_VAR, SubtaskEntry, start_forkserver
from accelflow.runtime.taskexecutor._health import FailDevice, HealthMonitor, subtask_marker
from accelflow.runtime.taskexecutor._trace import process_started, trace
from accelflow.runtime.taskexecutor._watchdog import Watchdog
from accelflow.runtime.taskexecutor._warm import WarmDevices, WarmSettings

_TERM_GRACE_S = 2.0


class TaskExecutor:
    def __init__(self, te_id: str, jm: Connection, provider: ExternalResourceInfoProvider,
                 slots: int, base_env: dict[str, str] | None = None, warm: WarmSettings | None = None,
                 heartbeat: tuple[float, float] = (k.HEARTBEAT_INTERVAL.default or 1.0,
                                                   k.HEARTBEAT_TIMEOUT.default or 30.0)) -> None:
        self.id = te_id
        self.base_env = dict(base_env or {})  # every subtask's env (e.g. the Ray relay dir)
        self.jm = jm
        self.provider = provider
        self.slots = slots
        self.ctx = multiprocessing.get_context("forkserver")
        self.children: dict[SubtaskKey, tuple[Any, Connection]] = {}
        self.watchdog = Watchdog(*heartbeat)  # ``heartbeat``: (interval, timeout)
        self.descriptors: dict[SubtaskKey, SubtaskDescriptor] = {}
        watches = provider.device_watches()
        self.monitor = HealthMonitor(watches, {
            name: [i.address for i in provider.get_external_resource_infos(name)] for name in watches
        }) if watches else None
        #: warm subtask processes and device hosts, per device with work (``_warm``)
        self.devices = WarmDevices(te_id, provider, warm or WarmSettings(), dict(self.base_env),
                                   lambda: self.descriptors.values())
        self.base_env.update(self.devices.subtask_env)

    #: True when the JobManager's connection dropped without a shutdown command
    orphaned = False

    def registration(self) -> Registration:
        """What this TaskExecutor registers: its slots and what its drivers discovered."""
        resources = tuple(
            RegisteredResource(s.spec.name, s.spec.amount, s.spec.driver_factory, s.status, s.message,
                               tuple(RegisteredDevice.of(info) for info in s.infos),
                               watched=self.monitor is not None and self.monitor.watched(s.spec.name))
            for s in self.provider.statuses.values()
        )
        return Registration(self.id, os.getpid(), self.slots, resources)

    def serve(self) -> None:
        if self.monitor is not None:
            self.monitor.start()
        while True:
            sources: list[Any] = [self.jm, *self.devices.sources()]
            if self.monitor is not None:
                sources.append(self.monitor.wakeup)
            for proc, conn in self.children.values():
                sources += [proc.sentinel, conn]
            for ready in wait(sources, _soonest(self.watchdog.due_in(), self.devices.due_in())):
                if ready is self.jm:
                    if not self._command():
                        return
                elif self.monitor is not None and ready == self.monitor.wakeup:
                    self._health()
                elif self.devices.event(ready):
                    self._device_status()
                else:
                    self._child_event(ready)
            for waited in self.devices.due():  # its warm process is ready, exited or too slow
                self._launch(waited.key, waited.desc, waited.env, waited.process, waited.held)
            for failed in self.watchdog.check():  # hung subtasks: dumped, reported, killed
                self.jm.send(failed)

    def _health(self) -> None:
        """Send what the health monitor saw; fail the subtasks on a device that failed."""
        assert self.monitor is not None
        for notice in self.monitor.drain():
            if not isinstance(notice, FailDevice):
                self.jm.send(notice)
                continue
            running = {key: desc for key, desc in self.descriptors.items() if key in self.children}
            keys = [key for key, desc in {**running, **{k: w.desc for k, w in self.devices.waiting.items()}}.items()
                    if any(d.info().address == notice.address for d in desc.assigned.get(notice.resource, ()))]
            for key in keys:  # before they are stopped: the failure, not the exit, is the news
                self.jm.send(SubtaskFailed(key, encode_error(notice.error)))
            self._terminate(keys)

    def _device_status(self) -> None:
        """Tell the JobManager what is resident and warm, when that changed."""
        status = self.devices.status()
        if status is not None:
            self.jm.send(status)

    def _command(self) -> bool:
        try:
            msg = self.jm.recv()
        except (EOFError, OSError):
            self.orphaned = True  # the JobManager went away without saying shutdown
            return False
        if isinstance(msg, Deploy):
            trace(f"deploy received {msg.descriptor.key}")
            self._deploy(msg.descriptor)
        elif isinstance(msg, CancelJob):
            trace(f"cancel received {msg.job_id}")
            self._terminate([key for key in [*self.children, *self.devices.waiting] if key.job_id == msg.job_id])
        elif isinstance(msg, TriggerCheckpoint | NotifyCheckpointComplete | Rollback) and self.devices.hold(msg):
            pass  # its subtask waits for a warm process: sent on once it runs
        elif isinstance(msg, TriggerCheckpoint | NotifyCheckpointComplete | Rollback):
            child = self.children.get(msg.key)
            if child is not None and isinstance(msg, Rollback):  # it goes on under its new key
                self._rename(msg.key, msg.new_key)
            if child is not None:  # one that has just ended needs nothing any more
                try:
                    child[1].send(msg)
                except OSError:
                    pass  # it is exiting: its exit is reported as usual
            elif isinstance(msg, Rollback):  # it ended before its rollback: the new epoch lacks it
                self.jm.send(SubtaskExited(msg.new_key, None))
        elif isinstance(msg, InjectFault):
            self._inject(msg)
        elif isinstance(msg, Shutdown):
            return False
        return True

    def _inject(self, msg: InjectFault) -> None:
        """A drill: the Xid goes where an NVML event of the device would."""
        from accelflow.resources.gpu import xid_fault

        if self.monitor is not None:
            self.monitor.inject(msg.resource, msg.address, xid_fault(msg.xid))

    def _rename(self, old: SubtaskKey, new: SubtaskKey) -> None:
        """A subtask rolled back in place goes on as ``new`` (a standby may take another index)."""
        self.children[new] = self.children.pop(old)
        self.watchdog.rename(old, new)
        if old in self.descriptors:
            self.descriptors[new] = self.descriptors.pop(old)
        if self.monitor is not None:
            self.monitor.subtask_renamed(old, new)

    def _deploy(self, desc: SubtaskDescriptor) -> None:
        env = {**self.base_env, SUBTASK_ENV_VAR: subtask_marker(desc.key)}
        if desc.isolate:
            assigned = {name: [d.info() for d in shares] for name, shares in desc.assigned.items()}
            env.update(self.provider.isolation_env(assigned))
        if self.devices.wait_for_warm(desc, env):  # its device's warm process is starting: see serve
            trace(f"subtask waits for warm {desc.key}")
            return
        self._launch(desc.key, desc, env)

    def _launch(self, key: SubtaskKey, desc: SubtaskDescriptor, env: dict[str, str], claimed: Any = None,
                held: list[Any] | None = None) -> None:
        """Start subtask ``key`` in a warm process of its device (``claimed``: the one it waited
        for) or fork it; then send it the commands ``held`` for it while it waited."""
        watch = self.watchdog.watch(key, f"{key.index + 1}/{desc.parallelism} of chain {key.chain} of {key.job_id}")
        warm = self.devices.start_subtask(desc, env, watch, claimed)  # a process of its device, ready ahead
        proc: Any = warm
        if warm is not None:
            trace(f"subtask warm {key}")
            conn = warm.conn
        else:
            conn, child = self.ctx.Pipe()  # events up, checkpoint commands down
            proc = self.ctx.Process(
                target=SubtaskEntry(), args=(desc, child, env, watch), name=f"accelflow-subtask-{key}",
                daemon=False,
            )
            proc.start()
            trace(f"subtask forked {key}")
            child.close()
        self.children[key] = (proc, conn)
        self._started(key, desc, proc.pid or -1)
        try:
            for msg in held or ():
                conn.send(msg)
        except OSError:
            pass  # it exited already: its exit is reported as usual

    def _started(self, key: SubtaskKey, desc: SubtaskDescriptor, pid: int) -> None:
        """A subtask's process runs (forked, or in a warm process): the watchdog watches it, its
        devices are watched for its leftovers, and what is warm changed."""
        self.watchdog.started(key, pid)
        self.descriptors[key] = desc
        if self.monitor is not None:
            self.monitor.subtask_started(key, pid, {
                r: [d.info().address for d in shares] for r, shares in desc.assigned.items()})
        self._device_status()

    def _child_event(self, ready: Any) -> None:
        for key, (proc, conn) in list(self.children.items()):
            if ready is conn:
                try:  # forwarded as pickled, never unpickled here (collected chunks are large)
                    self.jm.send_bytes(conn.recv_bytes())
                except (EOFError, OSError):  # a reset: it exited with commands unread
                    pass
                return
            if ready == proc.sentinel:
                try:
                    while conn.poll():  # relay what it said before exiting
                        self.jm.send_bytes(conn.recv_bytes())
                except (EOFError, OSError):
                    pass
                proc.join()
                conn.close()
                del self.children[key]
                self.watchdog.forget(key)
                self.descriptors.pop(key, None)
                self.jm.send(SubtaskExited(key, proc.exitcode))
                if self.monitor is not None:
                    self.monitor.subtask_ended(key)
                return

    def _terminate(self, keys: list[SubtaskKey]) -> None:
        for key in self.devices.cancel(keys):  # waiting for a warm process: never started,
            self.jm.send(SubtaskExited(key, None))  # so no process of its own holds its devices
            self.jm.send(DevicesFree(key))
        procs = [self.children[key][0] for key in keys if key in self.children]
        for proc in procs:
            if proc.is_alive():
                proc.terminate()
        deadline = time.monotonic() + _TERM_GRACE_S
        for proc in procs:
            proc.join(max(0.0, deadline - time.monotonic()))
            if proc.is_alive():
                proc.kill()
                proc.join()

    def shutdown(self) -> None:
        """Stop every subtask and give the devices back; a second SIGTERM (the JobManager's
        connection dropping and the parent-death signal often come together) must not cut
        this short, or the host coordination file keeps GPUs nobody uses."""
        if threading.current_thread() is threading.main_thread():  # not in a Ray actor's thread
            signal.signal(signal.SIGTERM, signal.SIG_IGN)
        try:
            self._terminate(list(self.children))
            self.devices.close()
        finally:
            if self.monitor is not None:
                self.monitor.close()
            self.provider.close()


def _soonest(*delays: float | None) -> float | None:
    """The shortest of ``delays`` that are set (None: none is)."""
    return min((d for d in delays if d is not None), default=None)


_terminated = False


def _on_sigterm(signum: int, frame: Any) -> None:
    global _terminated
    _terminated = True  # e.g. the parent-death signal: the client may be gone
    sys.exit(143)


def _client_gone(client: int, *, parent: bool, wait_s: float = 2.0) -> bool:
    """Whether the client process has died (it may still be exiting when its socket closes:
    the kernel closes a dying process's files before it re-parents its children). Where the
    client is the ``parent``, being re-parented says so too; a TaskExecutor the zygote forked
    has the zygote for a parent, which may be killed while the client runs on."""
    import psutil

    deadline = time.monotonic() + wait_s
    while True:
        if parent and os.getppid() != client:
            return True
        try:
            if psutil.Process(client).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        if time.monotonic() >= deadline:
            return False
        time.sleep(0.05)


def _exit_quietly(signum: int, frame: Any) -> None:
    os._exit(143)


def main(argv: list[str] | None = None, *, client: int | None = None) -> int:
    """The TaskExecutor process: ``ID JM_ADDRESS CONFIG_JSON``. ``client``: the client's pid
    when the client's zygote forked this process (``_zygote``) instead of the client
    starting a fresh interpreter for it."""
    try:
        return _main(argv, client)
    finally:
        # From here on the interpreter only shuts down (atexit callbacks of multiprocessing):
        # a SIGTERM now (the client stopping the cluster) must end the process, not raise
        # SystemExit inside an atexit callback, which printed a stray traceback.
        signal.signal(signal.SIGTERM, _exit_quietly)


def run_and_exit(argv: list[str] | None = None, *, client: int | None = None) -> NoReturn:
    """Run :func:`main`, then end the process without the interpreter's teardown.

    Subtasks stopped, devices given back: what is left is the exit callbacks (logging's
    flush, multiprocessing's removal of the forkserver's socket directory) and the teardown
    of every module, 25-50 ms on the way to the client's wait for this process (and, in a
    process forked by the zygote, never to be run: ``os._exit`` is the only way out).
    """
    code = 1
    try:
        code = main(argv, client=client)
    except SystemExit as exc:  # SIGTERM (``_on_sigterm``)
        code = exc.code if isinstance(exc.code, int) else 1
    except BaseException:
        traceback.print_exc()
    finally:
        try:
            atexit._run_exitfuncs()
            sys.stdout.flush()
            sys.stderr.flush()
        finally:
            os._exit(code)


def _main(argv: list[str] | None, client: int | None) -> int:
    te_id, address, config_path = (argv or sys.argv[1:])[:3]
    trace("te process created", process_started())
    trace("te imports done")
    forked = client is not None
    client = os.getppid() if client is None else client
    die_with_parent(signal.SIGTERM)
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
    signal.signal(signal.SIGTERM, _on_sigterm)
    authkey = bytes.fromhex(os.environ.pop(AUTHKEY_ENV_VAR))
    workdir = os.path.dirname(os.path.abspath(config_path))
    whole_lines()  # before the forkserver: a forked one, and its subtasks, keep it
    start_forkserver(fork=forked, workdir=workdir)
    trace("te forkserver started")
    try:
        with open(config_path, encoding="utf-8") as f:
            config = config_from(values=json.load(f))
        jm = Client(address, "AF_UNIX", authkey=authkey)
    except (FileNotFoundError, ConnectionRefusedError) as exc:
        if os.path.isdir(workdir):  # else the cluster stopped while this process started
            print(f"accelflow: error: {te_id} cannot reach its JobManager: {exc}", file=sys.stderr)
        return 1
    try:
        warm = WarmSettings.from_config(config)
        provider = ExternalResourceInfoProvider.from_config(config)
    except AccelflowError as exc:
        jm.send(RegistrationFailed(te_id, encode_error(exc)))
        return 1
    trace("te drivers done")
    te = TaskExecutor(te_id, jm, provider, config.get(k.NUMBER_OF_TASK_SLOTS), warm=warm,
                      heartbeat=(config.get(k.HEARTBEAT_INTERVAL), config.get(k.HEARTBEAT_TIMEOUT)))
    try:
        te.devices.warm_ahead(read_warm_ahead(workdir))  # spawned: they import while it registers
        jm.send(te.registration())
        trace("te registered")
        te.serve()
    finally:
        te.shutdown()
        if (te.orphaned or _terminated) and _client_gone(client, parent=not forked):
            # the client died without stopping the cluster: nobody else will remove its
            # working directory (sockets; arrays spilled where there is no memfd)
            shutil.rmtree(workdir, ignore_errors=True)
    return 0


