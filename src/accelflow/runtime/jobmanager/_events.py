"""The event pump: reads the launcher's one event queue and routes every event.

Registration events (and a TaskExecutor's end) go to the membership queue, after the
:class:`~._state.ClusterState` has recorded them; a subtask's events go to its job's own
queue (by ``SubtaskKey.job_id``); a lost TaskExecutor is told to every running job as
:class:`TaskExecutorDied`.

A session cluster routes on a *dispatcher* thread of its own (:meth:`EventPump.start`),
which also starts every TaskExecutor: Linux signals a TaskExecutor's parent-death signal when
the *thread* that started it ends, so they must be started by a thread that lives as long as
the cluster. The embedded cluster runs no extra thread: whichever thread waits for an event
pumps the launcher's queue itself (:meth:`EventPump.next_event`). In a session, a registered
TaskExecutor that is lost is logged (one line naming it) and handed to :attr:`EventPump.on_lost`
(membership replaces it); :attr:`EventPump.lost` remembers why it is gone until it registers
again, so a job refused for lack of slots can name it.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from accelflow.runtime import (
    SUBTASK_MESSAGES, SYSTEM_CLOCK, Clock, DeviceReport, DevicesFree, DeviceStatus, MemoryReport,
    Registration, RegistrationFailed, TaskExecutorEvent, TaskExecutorExited, TaskExecutorLost,
)
from accelflow.runtime.jobmanager._quarantine import on_device_event
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.runtime.launchers import Event, Launcher

POLL_S = 0.1
_log = logging.getLogger("accelflow.runtime")


@dataclass(frozen=True, slots=True)
class TaskExecutorDied:
    """JobManager-internal: a registered TaskExecutor is gone (told to each running job)."""

    taskexecutor_id: str


#: what a job's queue or the membership queue holds: ``(taskexecutor_id, message)``
RoutedEvent = tuple[str, TaskExecutorEvent | TaskExecutorDied]


class EventPump:
    """Routes the launcher's events (see the module's description).

    Args:
        launcher: whose ``events`` queue is read and who starts TaskExecutors.
        state: the cluster's; registrations and losses are recorded there first.
        clock: what waits for an event are measured with (tests: ``ManualClock``, whose
            waits never block).
    """

    def __init__(self, launcher: Launcher, state: ClusterState, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.launcher = launcher
        self.state = state
        self.clock = clock
        #: registrations, failed registrations and TaskExecutor ends (see ``_membership``)
        self.membership: queue.Queue[RoutedEvent] = queue.Queue()
        self._pump = threading.Lock()
        self._launches: queue.Queue[tuple[list[str], queue.Queue[BaseException | None]]] = queue.Queue()
        self._closed = threading.Event()
        self._dispatcher: threading.Thread | None = None
        #: a session's lost TaskExecutors, not registered again since: id -> how it was lost
        self.lost: dict[str, str] = {}
        #: called (on the dispatcher thread) with the id of each lost TaskExecutor of a session
        self.on_lost: Callable[[str], None] | None = None

    def start(self) -> None:
        """Route events (and start TaskExecutors) on a dispatcher thread of its own."""
        if self._dispatcher is None:
            self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                                name="accelflow-dispatch")
            self._dispatcher.start()

    def close(self) -> None:
        self._closed.set()
        if self._dispatcher is not None and self._dispatcher is not threading.current_thread():
            self._dispatcher.join(5)

    def wait_closed(self, timeout: float) -> bool:
        """Wait up to ``timeout`` s for :meth:`close`; whether the pump is closed."""
        return self.clock.wait_event(self._closed, timeout)

    def launch(self, ids: list[str]) -> None:
        """Start TaskExecutors ``ids`` from the dispatcher thread when there is one."""
        if self._dispatcher is None or self._dispatcher is threading.current_thread():
            self.launcher.start(ids)
            return
        done: queue.Queue[BaseException | None] = queue.Queue()
        self._launches.put((ids, done))
        error = done.get()
        if error is not None:
            raise error

    def next_event(self, source: queue.Queue[RoutedEvent], timeout: float) -> RoutedEvent | None:
        """The next event of ``source``, pumping the launcher's queue when nobody else does."""
        if self._dispatcher is None and self._pump.acquire(blocking=False):
            try:
                try:
                    return source.get_nowait()
                except queue.Empty:
                    pass
                try:
                    event = self.clock.get(self.launcher.events, timeout)
                except queue.Empty:
                    return None
                self.route(event)
            finally:
                self._pump.release()
            try:
                return source.get_nowait()
            except queue.Empty:
                return None
        try:
            return self.clock.get(source, timeout)
        except queue.Empty:
            return None

    def route_pending(self) -> None:
        """Route the events that came meanwhile, without waiting, unless a dispatcher thread
        or another waiter routes them (a placement waiting for shares to come back)."""
        if self._dispatcher is None and self._pump.acquire(blocking=False):
            try:
                while True:
                    try:
                        event = self.launcher.events.get_nowait()
                    except queue.Empty:
                        return
                    self.route(event)
            finally:
                self._pump.release()

    @property
    def dispatching(self) -> bool:
        """Whether a dispatcher thread routes every event."""
        return self._dispatcher is not None

    def route(self, event: Event) -> None:
        te_id, msg = event
        if isinstance(msg, Registration):
            with self.state.lock:
                self.state.add_taskexecutor(msg)
                self.lost.pop(te_id, None)
        if isinstance(msg, TaskExecutorLost | TaskExecutorExited):
            if self.state.lose_taskexecutor(te_id, msg.pid):
                for running in self.state.running_jobs():
                    running.events.put((te_id, TaskExecutorDied(te_id)))
                if self._dispatcher is not None and not (self._closed.is_set() or self.state.cancel_all):
                    self._lost_in_session(te_id, msg)
        if isinstance(msg, DeviceReport | MemoryReport | DevicesFree):
            on_device_event(self.state, te_id, msg)
            if isinstance(msg, DevicesFree) and (job := self.state.jobs.get(msg.key.job_id)) is not None:
                job.events.put((te_id, msg))  # shares came back: a standby that did not fit may now
            return
        if isinstance(msg, DeviceStatus):  # what is resident and warm there (REST, cluster status)
            with self.state.lock:
                if te_id in self.state.taskexecutors:
                    self.state.taskexecutors[te_id].devices = msg
        elif isinstance(msg, Registration | RegistrationFailed | TaskExecutorLost | TaskExecutorExited):
            self.membership.put((te_id, msg))
        elif isinstance(msg, SUBTASK_MESSAGES):
            job = self.state.jobs.get(msg.key.job_id)
            if job is not None:
                job.events.put((te_id, msg))

    def _lost_in_session(self, te_id: str, msg: TaskExecutorLost | TaskExecutorExited) -> None:
        how = (f"exited with code {msg.exitcode}" if isinstance(msg, TaskExecutorExited)
               else "was lost (its process, Ray actor or node died)")
        with self.state.lock:  # read by the deployer under the lock
            self.lost[te_id] = f"{te_id} {how} at {time.strftime('%H:%M:%S', time.localtime(self.clock.time()))}"
        _log.warning("%s %s; starting a replacement", te_id, how)
        if self.on_lost is not None:
            self.on_lost(te_id)

    def _dispatch(self) -> None:
        while not self._closed.is_set():
            while not self._launches.empty():
                ids, done = self._launches.get()
                try:
                    self.launcher.start(ids)
                    done.put(None)
                except BaseException as exc:
                    done.put(exc)
            try:
                event = self.clock.get(self.launcher.events, POLL_S)
            except queue.Empty:
                continue
            try:
                self.route(event)
            except Exception:  # the dispatcher must outlive any one bad event
                _log.exception("accelflow internal error while handling %r", event)
