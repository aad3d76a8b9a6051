"""The device host's process: its device made ready once, the resident instances it keeps,
and the subtasks attached to them.

A subtask attaches with :class:`~accelflow.runtime.Attach` (the operator's key and pickled
bytes, its call options and its share of the device). The first attach of a key opens an
instance (``open(ctx)`` with a :class:`~accelflow.dataflow.RuntimeContext` of the whole
device, see :func:`device_context`); later ones, of any attempt or job, reuse it. Instances
are kept least recently used first, at most ``taskmanager.resident.max-instances``, and,
where the framework measures device memory, no more than the device holds: an instance no
subtask uses is closed to make room. An instance that holds more memory than the share of
the subtask that opened it is refused (``AllocationError``). Every change is reported to the
TaskExecutor (:class:`~accelflow.runtime.HostReport`), which tells the JobManager.

A hung call: every :data:`WATCH_S`, a batch running for longer has its thread's stack written
next to the watchdog's stack file of each subtask waiting for it (``Attach.stack_path``), so
the watchdog that kills such a subtask reports the user's frames, and leaves a mark next to
that file. A subtask that leaves so marked while a batch of its requests runs leaves the
instance hung: it is dropped at once (the next attach opens a fresh one), reported ``hung``
until its call returns, then closed.
"""

from __future__ import annotations

import gc
import json
import logging
import os
import signal
import sys
import threading
import time
from collections import OrderedDict
from fractions import Fraction
from multiprocessing.connection import Connection
from typing import Any

from accelflow._errors import AllocationError, RingError, encode_error
from accelflow.dataflow import RuntimeContext
from accelflow.resources import ExternalResourceInfo
from accelflow.scheduling import format_amount
from accelflow.runtime import (
    HOSTS_KEY_ENV_VAR, RESIDENT_KILLED_SUFFIX, WORK_DIR_ENV_VAR, Attach, Attached, HostFailed, HostReady,
    HostReport, ResidentInstance, ResidentRequest, die_with_parent, expected_parent, is_out_of_memory,
    keep_tempdir_in, memory_text, preload, serve_forever, share_for, unix_listener, warm_device, whole_lines,
)
from accelflow.runtime.devicehost._instances import Client, Instance, Request

_log = logging.getLogger("accelflow.devicehost")
_MIB = 2**20
#: how often the host looks for long batches, and how long one runs before its stack is written
WATCH_S = 0.5


def device_context(resource: str, info: ExternalResourceInfo, taskexecutor_id: str, operator: str) -> RuntimeContext:
    """What a resident instance's ``open(ctx)`` gets: the device, not one subtask: subtask 0
    of 1, attempt 0, the whole device assigned (``get_resource_shares`` gives it share 1)."""
    return RuntimeContext(task_name=operator, operator_name=operator, index_of_this_subtask=0,
                          number_of_parallel_subtasks=1, attempt_number=0,
                          assigned={resource: {info: Fraction(1)}},
                          taskexecutor_infos={resource: frozenset({info})}, taskexecutor_id=taskexecutor_id)


class DeviceHost:
    def __init__(self, resource: str, properties: dict[str, str], taskexecutor_id: str, max_instances: int,
                 control: Connection) -> None:
        self.resource, self.info = resource, ExternalResourceInfo(properties)
        self.device = f"{resource} {self.info.address}"
        self.taskexecutor_id, self.max_instances = taskexecutor_id, max_instances
        mib = properties.get("memory_total", "")
        self.memory_total = int(mib) * _MIB if mib.isdigit() else None
        self.instances: OrderedDict[str, Instance] = OrderedDict()  # least recently used first
        self.hung: list[Instance] = []  # dropped, their call still running
        self.lock = threading.Lock()  # the instances; an open holds it (opens one at a time)
        self.control, self.control_lock = control, threading.Lock()

    # -- one attached subtask (a thread each) --------------------------------------------------
    def serve(self, conn: Connection) -> None:
        try:
            attach = conn.recv()
            assert isinstance(attach, Attach), attach
            client = Client(conn, attach.subtask, attach.stack_path)
            try:
                instance, opened = self._attach(attach, id(client))
            except BaseException as exc:
                conn.send(HostFailed(encode_error(exc, with_traceback=True)))
                return
            try:
                conn.send(Attached(opened, instance.memory))
                while True:
                    try:
                        header, chunk = client.shared.recv(conn, copy=instance.copies_on_receipt)
                    except RingError as exc:  # this host's fault: the subtask fails with it
                        client.fail(RingError(f"the device host of {self.device}: {exc}"))
                        return
                    assert isinstance(header, ResidentRequest), header
                    client.read(header.read)
                    instance.submit(Request(client, header.seq, chunk, header.records, header.flush))
            finally:
                client.leave()
                with self.lock:
                    instance.users.discard(id(client))
                    self._hang_if_stuck(instance, client)
                self.report()
        except (EOFError, OSError):
            pass  # the subtask ended, or was cancelled
        finally:
            conn.close()

    def _attach(self, attach: Attach, user: int) -> tuple[Instance, bool]:
        with self.lock:
            instance, opened = self.instances.get(attach.key), False
            if instance is None:
                instance, opened = self._open(attach), True
            self.instances.move_to_end(attach.key)
            instance.users.add(user)
        self.report()
        return instance, opened

    def _open(self, attach: Attach) -> Instance:
        self._make_room(attach)
        instance = self._open_evicting(attach)
        _log.info("%s: opened resident operator %r (key %s, %s of device memory)", self.device,
                  attach.operator, attach.key, memory_text(instance.memory))
        share = Fraction(attach.numerator, attach.denominator)
        if instance.memory is not None and self.memory_total is not None and instance.memory > share * self.memory_total:
            instance.close()
            raise AllocationError(
                f"resident operator {attach.operator!r} holds {memory_text(instance.memory)} of device memory "
                f"after open(), more than its share {format_amount(share)} of {self.device} allows "
                f"({memory_text(int(share * self.memory_total))} of {memory_text(self.memory_total)}): ask for a "
                f"larger share, e.g. resources={{{self.resource!r}: {share_for(instance.memory, self.memory_total)}}}")
        self.instances[attach.key] = instance
        if instance.memory is not None and self.memory_total is not None:
            while sum(i.memory or 0 for i in self.instances.values()) > self.memory_total:
                if not self._evict_one(keep=attach.key):
                    break
        return instance

    def _open_evicting(self, attach: Attach) -> Instance:
        """``attach``'s instance, opened; where its ``open()`` runs out of device memory, the
        least recently used instance no subtask uses is closed and ``open()`` runs again, until
        none is left to close: then an ``AllocationError`` names the instances in use that hold
        the memory (the framework's error where none holds any)."""
        ctx = device_context(self.resource, self.info, self.taskexecutor_id, attach.operator)
        while True:
            instance = Instance(attach)
            try:
                instance.open(ctx)
                return instance
            except BaseException as exc:
                if not is_out_of_memory(exc):
                    raise
                if not self._evict_one():
                    error = self._held_by_others(attach, exc)
                    if error is None:
                        raise
                    raise error from exc
            instance.drop()
            del instance
            gc.collect()  # what the failed open() took (its frames, the instance's own cycles) goes now

    def _held_by_others(self, attach: Attach, exc: BaseException) -> AllocationError | None:
        """The error of ``attach``'s ``open()`` that ran out of device memory (``exc``) with
        no idle instance left to close: naming the instances in use that hold memory, or None
        where none holds any (``exc`` then stands)."""
        held = [i for i in self.instances.values() if i.memory]
        if not held:
            return None
        first = str(exc).splitlines()[0] if str(exc) else ""
        return AllocationError(
            f"resident operator {attach.operator!r} ran out of device memory in open() on {self.device} "
            f"({type(exc).__name__}: {first}); resident instances in use hold "
            f"{memory_text(sum(i.memory or 0 for i in held))} of it: "
            + ", ".join(f"{i.operator!r} ({memory_text(i.memory)}, {len(i.users)} subtask(s))" for i in held)
            + ": run them at other times or on other devices, or use smaller models")

    def _make_room(self, attach: Attach) -> None:
        """Close least recently used idle instances until ``attach``'s fits
        ``taskmanager.resident.max-instances``; an ``AllocationError`` naming the instances in
        use where they are all in use."""
        while len(self.instances) >= self.max_instances:
            if not self._evict_one():
                in_use = ", ".join(f"{i.operator!r} ({len(i.users)} subtask(s))" for i in self.instances.values())
                raise AllocationError(
                    f"the device host of {self.device} keeps {len(self.instances)} resident instances "
                    f"(taskmanager.resident.max-instances ({self.max_instances})), each used by a running subtask: "
                    f"{in_use}; resident operator {attach.operator!r} cannot open one more: raise the limit "
                    f"(e.g. taskmanager.resident.max-instances: {self.max_instances + 1}), or run fewer different "
                    "resident operators on one device at once")

    def _evict_one(self, keep: str | None = None) -> bool:
        """Close the least recently used instance that no subtask uses; whether there was one."""
        key = next((k for k, i in self.instances.items() if not i.users and k != keep), None)
        if key is None:
            return False
        instance = self.instances.pop(key)
        instance.close()
        _log.info("%s: closed resident operator %r (key %s) to make room", self.device, instance.operator, key)
        return True

    # -- hung calls --------------------------------------------------------------------------
    def watch(self, stopped: threading.Event) -> None:
        """Every :data:`WATCH_S`: write where each long batch is for the subtasks waiting on
        it; close the hung instances whose call returned."""
        while not stopped.wait(WATCH_S):
            with self.lock:
                instances = [*self.instances.values(), *self.hung]
                done = [i for i in self.hung if i.running is None]
                self.hung = [i for i in self.hung if i.running is not None]
            for instance in instances:
                running = instance.running
                if running is not None and time.monotonic() - running[1] >= WATCH_S:
                    _write_where(instance.where(), {path for r in running[0] if not r.client.gone
                                                    and (path := r.client.stack_path) is not None})
            for instance in done:
                instance.close()
                _log.info("%s: closed hung resident operator %r (key %s): its call returned", self.device,
                          instance.operator, instance.key)
            if done:
                self.report()

    def _hang_if_stuck(self, instance: Instance, client: Client) -> None:
        """``client`` left, killed by its watchdog while a call of ``instance`` ran for it (the
        watchdog's mark next to its stack file): the instance is hung; drop it. Holds :attr:`lock`."""
        running, mark = instance.running, f"{client.stack_path}{RESIDENT_KILLED_SUFFIX}"
        if client.stack_path is None or not os.path.exists(mark):
            return
        os.unlink(mark)
        if running is None or instance.hung or all(r.client is not client for r in running[0]):
            return
        instance.hung = True
        if self.instances.get(instance.key) is instance:
            del self.instances[instance.key]
        self.hung.append(instance)
        _log.warning("%s: resident operator %r (key %s) is hung: its call has run for %.1f s and the watchdog "
                     "killed a subtask waiting for it; dropped (a later attach opens a fresh instance)\n%s",
                     self.device, instance.operator, instance.key, time.monotonic() - running[1], instance.where())

    def report(self) -> None:
        """Tell the TaskExecutor what is resident now."""
        with self.lock:
            instances = tuple(
                ResidentInstance(self.resource, self.info.address, i.operator, i.key, i.memory, len(i.users), i.since,
                                 i.batches, i.hung)
                for i in [*self.instances.values(), *self.hung])
        with self.control_lock:
            try:
                self.control.send(HostReport(instances))
            except OSError:
                pass  # the TaskExecutor is stopping this host

    def close(self) -> None:
        with self.lock:
            for instance in self.instances.values():
                instance.close()
            self.instances.clear()


def _write_where(text: str, paths: set[str]) -> None:
    """``text`` into each file of ``paths`` (replaced whole: a reader never sees half of it)."""
    for path in paths:
        try:
            with open(f"{path}.part", "w", encoding="utf-8") as f:
                f.write(text)
            os.replace(f"{path}.part", path)
        except OSError:
            pass  # its subtask's watch ended


def main(argv: list[str] | None = None) -> None:
    """``FD ADDRESS SPEC_JSON``: the control socket to the TaskExecutor, the address to listen
    on, and ``{"resource", "properties", "framework", "preload", "preload_key",
    "taskexecutor_id", "max_instances"}``. The connections' key is in ``$ACCELFLOW_DEVICE_HOSTS_KEY``."""
    fd, address, raw = argv if argv is not None else sys.argv[1:]
    # its TaskExecutor's spawning thread, which lives as long as it (killed now if already gone)
    die_with_parent(parent=expected_parent())
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the client's to handle
    whole_lines()
    keep_tempdir_in(os.environ.get(WORK_DIR_ENV_VAR))  # its TaskExecutor's: the cluster's work directory
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    spec: dict[str, Any] = json.loads(raw)
    key = bytes.fromhex(os.environ.pop(HOSTS_KEY_ENV_VAR))
    control = Connection(int(fd))
    used, note = warm_device(spec["framework"])
    preload(spec["preload"], spec["preload_key"])
    host = DeviceHost(spec["resource"], spec["properties"], spec["taskexecutor_id"], spec["max_instances"], control)
    _log.info("device host of %s (pid %d): %s", host.device, os.getpid(), note)
    listener = unix_listener(address)
    stopped = threading.Event()
    threading.Thread(target=serve_forever, daemon=True, name="accelflow-resident-accept",
                     args=(listener, key, host.serve, stopped.is_set, "accelflow-resident")).start()
    threading.Thread(target=host.watch, args=(stopped,), daemon=True, name="accelflow-resident-watch").start()
    try:
        control.send(HostReady(os.getpid(), address, used, note))
        control.recv()  # nothing comes: the TaskExecutor closes it to stop this host
    except (EOFError, OSError):
        pass
    stopped.set()
    host.close()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(0)
