"""A TaskExecutor's warm devices: the warm subtask processes of each device it has had work
for (``_warmpool``) and the device hosts of resident operators (``_devicehosts``), behind
one object the TaskExecutor's loop uses (:class:`WarmDevices`).

Both kinds of process are spawned for one device with its isolation environment (what
``isolation_env`` of the device's driver gives, e.g. ``CUDA_VISIBLE_DEVICES=<uuid>``) by one
thread of the TaskExecutor (:class:`Spawner`) that lives as long as it does: Linux sends a
child's parent-death signal when the *thread* that started it ends.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import queue
import threading
import time
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import Future
from dataclasses import dataclass, field
from typing import Any

from accelflow._errors import ConfigError, ConfigProblem
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.resources import ExternalResourceInfoProvider, info_properties
from accelflow.runtime import (
    DeviceStatus, NotifyCheckpointComplete, Rollback, StartSubtask, SubtaskDescriptor, SubtaskKey, TriggerCheckpoint,
    resolve_framework,
)
from accelflow.runtime.taskexecutor._devicehosts import DeviceHosts
from accelflow.runtime.taskexecutor._warmpool import Device, WarmPool, WarmProcess

_log = logging.getLogger("accelflow.runtime")


@dataclass(frozen=True)
class WarmSettings:
    """``taskmanager.device-pool.size``, ``.fork`` and ``taskmanager.resident.max-instances``."""

    pool_size: int = 1
    max_instances: int = 8
    fork: bool = True

    @classmethod
    def from_config(cls, config: Configuration) -> WarmSettings:
        """The settings, once every ``warm.preload`` module is found.

        Raises:
            ConfigError: a module named in ``external-resource.<name>.warm.preload`` cannot be
                found, naming the key and the module.
        """
        problems = [
            ConfigProblem(spec.key("warm.preload"), f"no module named {name!r} can be imported here "
                                                    "(check the name, or install it where the TaskExecutors run)")
            for spec in config.external_resources.values() for name in spec.warm_preload
            if not _findable(name)
        ]
        if problems:
            raise ConfigError(problems)
        return cls(config.get(k.DEVICE_POOL_SIZE), config.get(k.RESIDENT_MAX_INSTANCES), config.get(k.DEVICE_POOL_FORK))


def _findable(module: str) -> bool:
    try:
        return importlib.util.find_spec(module) is not None
    except (ImportError, ValueError):
        return False


class Spawner:
    """A thread of the TaskExecutor's own that runs functions (spawns): :meth:`submit` does
    not wait, :meth:`call` waits for the result (or the exception)."""

    def __init__(self) -> None:
        self.jobs: queue.SimpleQueue[tuple[Callable[[], Any], Future[Any]] | None] = queue.SimpleQueue()
        threading.Thread(target=self._run, daemon=True, name="accelflow-spawner").start()

    def _run(self) -> None:
        while (job := self.jobs.get()) is not None:
            fn, future = job
            try:
                future.set_result(fn())
            except BaseException as exc:
                future.set_exception(exc)

    def submit(self, fn: Callable[[], Any]) -> Future[Any]:
        future: Future[Any] = Future()
        self.jobs.put((fn, future))
        return future

    def call(self, fn: Callable[[], Any]) -> Any:
        return self.submit(fn).result()

    def close(self) -> None:
        self.jobs.put(None)


@dataclass
class Waiting:
    """A subtask whose start waits for a warm process of its device that is still starting
    (:meth:`WarmDevices.wait_for_warm`): what it is started with, the process, when the wait
    ends (``time.monotonic()``; then it forks), and the commands the JobManager sent it
    meanwhile (``held``: sent on once it runs, as a forked subtask finds them in its pipe).
    ``key`` is its key now (a rollback in place renames it)."""

    key: SubtaskKey
    desc: SubtaskDescriptor
    env: dict[str, str]
    process: WarmProcess
    deadline: float
    held: list[TriggerCheckpoint | NotifyCheckpointComplete | Rollback] = field(default_factory=list)


class WarmDevices:
    """What the TaskExecutor's loop uses: :meth:`start_subtask` (or, first,
    :meth:`wait_for_warm`, then :meth:`hold`, :meth:`cancel`, :meth:`due` and :meth:`due_in`
    for the subtasks that wait), :meth:`sources`, :meth:`event`, :meth:`status` and
    :meth:`close`; :attr:`subtask_env` goes into every subtask's environment. ``running``
    gives the subtasks that run now (the pool of a device keeps a process per subtask it ran
    at once)."""

    def __init__(self, taskexecutor_id: str, provider: ExternalResourceInfoProvider, settings: WarmSettings,
                 base_env: dict[str, str], running: Callable[[], Iterable[SubtaskDescriptor]]) -> None:
        self.taskexecutor_id, self.provider, self.base_env = taskexecutor_id, provider, base_env
        self.running = running  # the subtasks that run now (started: forked or warm)
        self.spawner = Spawner()
        self.wake_r, self.wake_w = os.pipe2(os.O_NONBLOCK | os.O_CLOEXEC)
        self.pool = WarmPool(settings.pool_size, self.spawner.submit, self._warm_command, self._env, self._wake,
                             fork=settings.fork)
        self.hosts = DeviceHosts(taskexecutor_id, self.spawner.call, self._env, self._host_spec, self._wake)
        self.max_instances = settings.max_instances
        self.subtask_env = self.hosts.subtask_env
        self.last: DeviceStatus | None = None
        #: subtasks waiting for a warm process of their device that is still starting
        self.waiting: dict[SubtaskKey, Waiting] = {}
        self.ahead: dict[Device, bool] = {}  # whether its warm processes import anything ahead

    # -- one device --------------------------------------------------------------------------
    def _env(self, device: Device) -> dict[str, str]:
        resource, address = device
        info = next((i for i in self.provider.get_external_resource_infos(resource) if i.address == address), None)
        isolation = self.provider.isolation_env({resource: [info]}) if info is not None else {}
        return dict(self.base_env, **isolation) if isolation else {}

    def _framework(self, device: Device) -> tuple[str, str, tuple[str, ...]]:
        """(``warm.framework``, its key, ``warm.preload``) of the device's resource; ``auto``
        initialises a framework only for a CUDA device."""
        status = self.provider.statuses.get(device[0])
        if status is None:
            return "none", "", ()
        spec = status.spec
        framework = spec.warm_framework
        if framework == "auto" and "CUDA_VISIBLE_DEVICES" not in self._env(device):
            framework = "none"
        return framework, spec.key("warm.preload"), spec.warm_preload

    def _warm_command(self, device: Device) -> list[str]:
        framework, key, modules = self._framework(device)
        return [framework, key, *modules]

    def _host_spec(self, device: Device) -> dict[str, Any]:
        framework, key, modules = self._framework(device)
        info = next(i for i in self.provider.get_external_resource_infos(device[0]) if i.address == device[1])
        return {"resource": device[0], "properties": info_properties(info), "framework": framework,
                "preload": list(modules), "preload_key": key, "max_instances": self.max_instances}

    def _wake(self) -> None:
        try:
            os.write(self.wake_w, b"x")
        except OSError:
            pass  # full (a wake-up is pending already) or closed

    # -- the TaskExecutor's loop -------------------------------------------------------------
    def _device(self, desc: SubtaskDescriptor) -> Device | None:
        """The device of a subtask that may run in a warm process: it holds exactly one device,
        which has an isolation environment, and computes on it (not ``resident_only``: its
        device's host does; a warm process would make a device context it never uses)."""
        held = [(resource, d.info().address) for resource, shares in desc.assigned.items() for d in shares]
        return held[0] if desc.isolate and not desc.resident_only and len(held) == 1 and self._env(held[0]) else None

    def start_subtask(self, desc: SubtaskDescriptor, env: dict[str, str], watch: tuple[str, str, float] | None = None,
                      claimed: WarmProcess | None = None) -> WarmProcess | None:
        """A warm process running ``desc`` (one of its device was ready: ``claimed``, the one
        it waited for, first), or None: fork it. ``watch``: the watchdog's (``run_subtask``'s
        argument)."""
        device = self._device(desc)
        return None if device is None else self.pool.take(device, StartSubtask(desc, env, watch), claimed)

    def wait_for_warm(self, desc: SubtaskDescriptor, env: dict[str, str]) -> bool:
        """Whether ``desc``'s start waits, without blocking, for a warm process of its device
        that is still starting (none is ready, and no other subtask waits for that one):
        :meth:`due` gives it back once the process is ready, exited, or past its bound."""
        device = self._device(desc)
        if device is not None:
            self.pool.running(device, self._sharers(device, desc.key))
        process = None if device is None or not self._imports_ahead(device) else self.pool.claim(device)
        if device is None or process is None:
            return False
        self.waiting[desc.key] = Waiting(desc.key, desc, env, process, process.spawned + self.pool.bound(device))
        _log.debug("subtask %s waits for warm process %d of %s %s, still starting", desc.key, process.pid, *device)
        return True

    def _sharers(self, device: Device, key: SubtaskKey) -> int:
        """The subtasks on ``device`` once ``key``'s starts: those running or waiting there, and it."""
        others = [*self.running(), *(w.desc for w in self.waiting.values())]
        return 1 + sum(1 for d in others if d.key != key and self._device(d) == device)

    def _imports_ahead(self, device: Device) -> bool:
        """Whether a warm process of ``device`` imports what a fork would import again (a device
        framework, ``warm.preload``): else a fork, of a forkserver that imported accelflow's
        runtime and NumPy already, is the sooner ready."""
        if device not in self.ahead:
            framework, _, modules = self._framework(device)
            self.ahead[device] = bool(modules) or resolve_framework(framework) != "none"
        return self.ahead[device]

    def warm_ahead(self, wanted: Mapping[str, tuple[int, int]]) -> None:
        """Spawn, in the background, the warm processes of the devices a job will want before
        it is deployed (a local cluster started for it): per resource, ``(devices, subtasks
        per device)``, the first ``devices`` of this TaskExecutor's (the order ``pack``
        fills them in). Only for devices whose warm processes import something ahead (else
        a fork is as soon ready). E.g. ``{"gpu": (1, 2)}``: 2 processes for GPU 0.

        Returns once the processes exist (a few ms each; their imports and CUDA contexts
        go on meanwhile): a subtask deployed right after the registration then finds them
        starting and waits for one, where it would fork were they still to be spawned."""
        for resource, (devices, each) in wanted.items():
            status = self.provider.statuses.get(resource)
            for info in status.infos[:devices] if status is not None else ():
                device = (resource, info.address)
                if self._env(device) and self._imports_ahead(device):
                    self.pool.running(device, each)
        if wanted:
            self.spawner.call(lambda: None)  # after the spawns asked for: one thread runs them in turn

    def hold(self, msg: TriggerCheckpoint | NotifyCheckpointComplete | Rollback) -> bool:
        """Keep ``msg`` for its subtask if that one is waiting (a :class:`Rollback` renames
        it to ``new_key``); whether it was."""
        waiting = self.waiting.pop(msg.key, None)
        if waiting is None:
            return False
        waiting.held.append(msg)
        if isinstance(msg, Rollback):
            waiting.key = msg.new_key
        self.waiting[waiting.key] = waiting
        return True

    def cancel(self, keys: Iterable[SubtaskKey]) -> list[SubtaskKey]:
        """Stop the waits of ``keys`` (their subtasks never started; the processes they waited
        for stay in the pool, for the next subtask); the keys that were waiting."""
        dropped = [self.waiting.pop(key) for key in keys if key in self.waiting]
        for waiting in dropped:
            self.pool.unclaim(waiting.process)
        return [waiting.key for waiting in dropped]

    def due(self) -> list[Waiting]:
        """The waiting subtasks to start now (``start_subtask`` with their ``process`` as
        ``claimed``): their process is ready, or another of their device is (they take that
        one; theirs stays for the next), or it exited while starting (they fork), or it was not
        ready by the deadline (they fork; it is stopped and replaced)."""
        now, due = time.monotonic(), []
        spare: dict[Device, int] = {}  # ready processes no subtask waits for, not yet handed out
        for key, waiting in list(self.waiting.items()):
            process = waiting.process
            starting = process.ready is None and process.is_alive()
            other = False  # another of its device is ready: it takes that one (one each)
            if process.ready is None:
                left = spare.setdefault(process.device, self.pool.ready_count(process.device))
                other, spare[process.device] = left > 0, max(0, left - 1)
            if starting and now < waiting.deadline and not other:
                continue
            if starting and not other:
                self.pool.give_up(process)
            elif process.ready is None and not other:
                _log.info("subtask %s forks: the warm process it waited for exited while starting", key)
            due.append(self.waiting.pop(key))
        return due

    def due_in(self) -> float | None:
        """Seconds until the first wait ends (None: none waits)."""
        return max(0.0, min(w.deadline for w in self.waiting.values()) - time.monotonic()) if self.waiting else None

    def sources(self) -> list[Any]:
        return [self.wake_r, *self.pool.waiting(), *self.hosts.controls()]

    def event(self, ready: Any) -> bool:
        """Handle ``ready`` if it is one of :meth:`sources`; whether it was."""
        if ready == self.wake_r and isinstance(ready, int):
            try:
                os.read(self.wake_r, 4096)
            except BlockingIOError:
                pass
            return True
        return self.pool.event(ready) or self.hosts.event(ready)

    def status(self) -> DeviceStatus | None:
        """What is resident and warm now, or None when the JobManager was told it already."""
        now = DeviceStatus(self.taskexecutor_id, self.hosts.resident(), self.pool.status())
        if now == self.last:
            return None
        self.last = now
        return now

    def close(self) -> None:
        self.waiting.clear()
        self.pool.close()
        self.hosts.close()
        self.spawner.close()
        for fd in (self.wake_r, self.wake_w):
            os.close(fd)
