"""Warm subtask processes: a small pool per device a TaskExecutor has had work for.

A subtask that holds exactly one device (all of it or a share) starts in a process started
ahead for that device (``runtime/subtask/_warm.py``): forked by the TaskExecutor's warm zygote
of the device's framework and ``warm.preload`` (``_warmzygote.py``: they are imported there
once), or spawned (``python -m accelflow.runtime.subtask``) while the zygote imports, where
it cannot fork, or with ``taskmanager.device-pool.fork: false``; with the device's isolation
environment, its CUDA context made, the subtask runtime, NumPy and ``warm.preload`` imported. Taking one
starts a replacement in the background, so the next subtask on the device (a restart, or the
next job of a session cluster) finds one ready. Without one ready but with one still starting
(importing, making its CUDA context) the subtask waits for that one (:meth:`WarmPool.claim`:
it is closer to ready than a fork, which would start the same imports from zero), at most
until :meth:`WarmPool.bound` after its spawn; without either it is forked as any other
(logged at debug). A process runs one subtask only: a subtask never inherits another's state.

A subtask of a resident-only chain (``SubtaskDescriptor.resident_only``: its device's host
computes for it) needs no device context: it is forked, never started here nor counted here.

A device keeps as many processes as subtasks it ran at once (:meth:`WarmPool.target`: two
sharers at ``{"gpu": 0.5}``, two), at least ``size``: the next job's sharers, or a full
restart's, all start warm; one ready for the first and a fresh one for the second would make
the whole job wait for the second's imports.

To the TaskExecutor a taken process is what a forked subtask is (:class:`WarmProcess` has the
parts of ``multiprocessing.Process`` it uses: ``sentinel``, ``exitcode``, ``join``...), and
its socket becomes the subtask's status pipe.
"""

from __future__ import annotations

import logging
import os
import socket
import subprocess
import threading
import time
import weakref
from collections.abc import Callable
from multiprocessing.connection import Connection
from typing import Any

from accelflow.runtime import DevicePool, StartSubtask, WarmReady, parent_env, python_command, work_dir_env
from accelflow.runtime.taskexecutor._warmzygote import ZygoteChild, Zygotes

_log = logging.getLogger("accelflow.runtime")
#: the subtask runtime, named, not imported (a TaskExecutor never imports it)
SUBTASK_MODULE = (__package__ or "").rsplit(".", 1)[0] + ".subtask"

Device = tuple[str, str]  # (resource, address)
#: how long a subtask waits for a starting warm process of a device none of whose warm
#: processes was ready yet (nothing measured): as long as the JobManager waits for a
#: TaskExecutor to start and register (``taskmanager.registration.timeout``'s default)
FIRST_WAIT_S = 60.0
#: with readiness measured: the wait ends this many times the slowest start-up of the
#: device's warm processes after the spawn (load makes start-ups vary 2x), and never sooner
#: than :data:`MIN_WAIT_S` after it
SLOWEST_FACTOR, MIN_WAIT_S = 3.0, 5.0
#: the most warm processes a device keeps, however many subtasks it ran at once: the most
#: ``taskmanager.device-pool.size`` may ask for (each holds a CUDA context on a real GPU)
MAX_PER_DEVICE = 16


class WarmProcess:
    """One spawned warm subtask process and its socket."""

    def __init__(self, popen: subprocess.Popen[bytes] | ZygoteChild, conn: Connection, device: Device) -> None:
        self.popen, self.conn, self.device = popen, conn, device
        # readable once it exited; closed with this object
        self.sentinel = os.dup(popen.pidfd) if isinstance(popen, ZygoteChild) and popen.pidfd is not None \
            else os.pidfd_open(popen.pid)
        weakref.finalize(self, os.close, self.sentinel)
        self.ready: WarmReady | None = None
        self.spawned = time.monotonic()
        self.ready_after: float | None = None  # seconds from the spawn to its WarmReady
        self.claimed = False  # a subtask waits for it (``WarmPool.claim``)

    @property
    def pid(self) -> int:
        return self.popen.pid

    @property
    def exitcode(self) -> int | None:
        return self.popen.poll()

    def poll_ready(self) -> bool:
        """Whether it said it is ready (reads its :class:`WarmReady` when it has come)."""
        if self.ready is None and self.popen.poll() is None:
            try:
                if self.conn.poll(0):
                    self.ready = self.conn.recv()
                    self.ready_after = time.monotonic() - self.spawned
            except (EOFError, OSError):
                pass
        return self.ready is not None and self.popen.poll() is None

    def is_alive(self) -> bool:
        return self.popen.poll() is None

    def terminate(self) -> None:
        if self.is_alive():
            self.popen.terminate()

    def kill(self) -> None:
        if self.is_alive():
            self.popen.kill()

    def join(self, timeout: float | None = None) -> None:
        try:
            self.popen.wait(timeout)
        except subprocess.TimeoutExpired:
            pass

    def stop(self) -> None:
        """End an unused one: closing its socket makes it exit; then make sure."""
        self.conn.close()
        self.terminate()
        self.join(2.0)
        if self.is_alive():
            self.kill()
            self.join()


class WarmPool:
    """Warm processes per device that has had work: ``size``, or as many as the device's
    subtasks that ran at once (:meth:`target`).

    Args:
        spawn_in: runs a function on the thread that spawns the TaskExecutor's children (their
            parent-death signal is tied to it), without waiting.
        command: the warm process's arguments after the socket's descriptor, per device.
        env: the environment of a warm process of a device (the device's isolation).
        changed: called (from any thread) when a process was added.
        fork: fork the processes from a warm zygote (``taskmanager.device-pool.fork``).
    """

    def __init__(self, size: int, spawn_in: Callable[[Callable[[], None]], Any],
                 command: Callable[[Device], list[str]], env: Callable[[Device], dict[str, str]],
                 changed: Callable[[], None], fork: bool = True) -> None:
        self.size, self.spawn_in, self.command, self.env, self.changed = size, spawn_in, command, env, changed
        self.zygotes = Zygotes(SUBTASK_MODULE) if fork else None
        self.pools: dict[Device, list[WarmProcess]] = {}
        self.slowest: dict[Device, float] = {}  # the longest start-up seen per device (``bound``)
        self.peak: dict[Device, int] = {}  # the most subtasks seen at once per device (``target``)
        self.spawning: dict[Device, int] = {}  # spawns asked for and not done yet (``_refill``)
        self.lock = threading.Lock()
        self.closed = False

    def target(self, device: Device) -> int:
        """How many processes ``device`` keeps: as many as its subtasks that ran at once, at
        least ``size``, at most :data:`MAX_PER_DEVICE`; none when ``size`` is 0. E.g. size 1
        and 4 subtasks at ``{"gpu": 0.25}`` seen: 4."""
        return 0 if self.size < 1 else max(self.size, min(self.peak.get(device, 0), MAX_PER_DEVICE))

    def running(self, device: Device, subtasks: int) -> None:
        """``subtasks`` run (or start) on ``device`` at once now: when that is more than it
        ever ran, its pool grows to match, in the background."""
        if self.size < 1:
            return
        with self.lock:
            raised = subtasks > self.peak.get(device, 0)
            if raised:
                self.peak[device] = subtasks
                self.pools.setdefault(device, [])
        if raised:
            self._refill(device)

    def take(self, device: Device, start: StartSubtask, claimed: WarmProcess | None = None) -> WarmProcess | None:
        """A ready process of ``device`` running ``start``'s subtask (``claimed``: the one it
        waited for, when that one is ready), or None (fork it); the pool is refilled in the
        background either way."""
        if self.size < 1:
            return None
        with self.lock:
            pool = self.pools.setdefault(device, [])
            candidates = ([claimed] if claimed in pool else []) + [p for p in pool if not p.claimed]
            ready = next((p for p in candidates if p.poll_ready()), None)
            if ready is not None:
                pool.remove(ready)
                self._measured(ready)
            if claimed is not None and ready is not claimed:
                claimed.claimed = False  # still starting: the next subtask of the device may take it
        self._refill(device)
        if ready is None:
            _log.debug("no warm process ready for %s %s: forking the subtask", *device)
            return None
        try:
            ready.conn.send(start)
        except OSError:  # it died just now
            ready.stop()
            return None
        return ready

    def ready_count(self, device: Device) -> int:
        """How many processes of ``device`` that no subtask waits for are ready."""
        with self.lock:
            return sum(1 for p in self.pools.get(device, []) if not p.claimed and p.poll_ready())

    def claim(self, device: Device) -> WarmProcess | None:
        """The oldest process of ``device`` still starting that no other subtask waits for and
        that is not past :meth:`bound`, now waited for; None when there is none, or when one
        is ready (take that one)."""
        if self.size < 1:
            return None
        with self.lock:
            pool = self.pools.get(device, [])
            if any(not p.claimed and p.poll_ready() for p in pool):
                return None
            deadline = time.monotonic() - self.bound(device)
            found = next((p for p in pool if not p.claimed and p.ready is None and p.is_alive()
                          and p.spawned > deadline), None)
            if found is not None:
                found.claimed = True
        if found is not None:  # it is as good as taken: its replacement starts now, not once it is
            self._refill(device)
        return found

    def unclaim(self, process: WarmProcess) -> None:
        """Nobody waits for ``process`` any more: the next subtask of its device may take it."""
        with self.lock:
            process.claimed = False

    def give_up(self, process: WarmProcess) -> None:
        """``process`` was not ready within :meth:`bound` for the subtask waiting for it (which
        forks): it is stopped (on the spawning thread: that may take 2 s) and replaced."""
        with self.lock:
            pool = self.pools.setdefault(process.device, [])
            if process in pool:
                pool.remove(process)
        _log.warning("warm process %d for %s %s was not ready %.1f s after its start: stopped, and the "
                     "subtask waiting for it forked", process.pid, *process.device, time.monotonic() - process.spawned)
        self.spawn_in(process.stop)
        self._refill(process.device)

    def bound(self, device: Device) -> float:
        """How long after its spawn a subtask waits for a warm process of ``device`` (then
        forks): :data:`SLOWEST_FACTOR` times the slowest start-up of the device's warm
        processes so far, at least :data:`MIN_WAIT_S`; :data:`FIRST_WAIT_S` before any got
        ready. E.g. processes ready after 1.2 s and 2.1 s: 6.3 s."""
        slowest = self.slowest.get(device)
        return FIRST_WAIT_S if slowest is None else max(MIN_WAIT_S, SLOWEST_FACTOR * slowest)

    def _measured(self, process: WarmProcess) -> None:
        """Note how long ``process`` took to get ready (under the lock)."""
        if process.ready_after is not None:
            self.slowest[process.device] = max(self.slowest.get(process.device, 0.0), process.ready_after)

    def _refill(self, device: Device) -> None:
        """Spawn, in the background, what ``device`` lacks of :meth:`target` processes no
        subtask waits for (counting the spawns asked for and not done yet: two takes in a row
        do not spawn twice)."""
        with self.lock:
            pool = self.pools[device]
            for dead in [p for p in pool if not p.is_alive()]:
                pool.remove(dead)
                dead.join()
            unclaimed = sum(1 for p in pool if not p.claimed)
            missing = self.target(device) - unclaimed - self.spawning.get(device, 0)
            self.spawning[device] = self.spawning.get(device, 0) + max(0, missing)
        for _ in range(missing):
            self.spawn_in(lambda: self._spawn(device))

    def _spawn(self, device: Device) -> None:
        process = self._start(device)
        with self.lock:
            self.spawning[device] -= 1
            kept = not self.closed
            if process is not None and kept:
                self.pools.setdefault(device, []).append(process)
        if process is None:
            return
        if not kept:  # the TaskExecutor is stopping
            process.stop()
            return
        self.changed()

    def _start(self, device: Device) -> WarmProcess | None:
        mine, theirs = socket.socketpair()
        forked = None if self.zygotes is None else self.zygotes.fork(
            self.command(device), dict(os.environ, **self.env(device), **work_dir_env()), theirs.fileno())
        if forked is not None and forked.pidfd is not None:  # (None: it died at once; spawn one)
            theirs.close()
            return WarmProcess(forked, Connection(mine.detach()), device)
        try:
            popen: subprocess.Popen[bytes] = subprocess.Popen(
                python_command("-m", SUBTASK_MODULE, str(theirs.fileno()), *self.command(device)),
                env=dict(os.environ, **self.env(device), **parent_env(), **work_dir_env()), pass_fds=(theirs.fileno(),),
                stdin=subprocess.DEVNULL)
        except OSError as exc:
            _log.warning("cannot start a warm process for %s %s: %s", *device, exc)
            mine.close()
            return None
        finally:
            theirs.close()
        return WarmProcess(popen, Connection(mine.detach()), device)

    def waiting(self) -> list[Connection]:
        """The sockets of processes not ready yet (readable when they say so)."""
        with self.lock:
            return [p.conn for pool in self.pools.values() for p in pool if p.ready is None]

    def event(self, ready: Any) -> bool:
        """Read what a process said (``ready``: one of :meth:`waiting`); whether it was one."""
        with self.lock:
            found = next((p for pool in self.pools.values() for p in pool if p.conn is ready), None)
        if found is None:
            return False
        if not found.poll_ready():  # it died while starting: the next take replaces it
            _log.warning("a warm process for %s %s exited (code %s) before it was ready", *found.device,
                         found.exitcode)
            with self.lock:
                self.pools[found.device].remove(found)
            found.stop()
        elif found.ready is not None:
            with self.lock:
                self._measured(found)
            _log.debug("warm process %d for %s %s ready: %s", found.pid, *found.device, found.ready.note)
        return True

    def status(self) -> tuple[DevicePool, ...]:
        with self.lock:
            return tuple(DevicePool(device[0], device[1], sum(p.poll_ready() for p in pool), self.target(device))
                         for device, pool in sorted(self.pools.items()))

    def close(self) -> None:
        with self.lock:
            self.closed = True
            processes = [p for pool in self.pools.values() for p in pool]
            self.pools.clear()
        for process in processes:
            process.conn.close()
            process.terminate()
        for process in processes:
            process.stop()
        if self.zygotes is not None:
            self.zygotes.close()
