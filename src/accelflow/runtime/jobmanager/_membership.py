"""Membership: starting the TaskExecutors a cluster wants, waiting for them to register, and
replacing the ones that were lost (before a restart, and in a session as soon as they are
lost: on Ray the replacement actor lands on any node that can host it)."""

from __future__ import annotations

import logging
import threading

from accelflow._errors import JobError, decode_error
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.runtime import (
    SYSTEM_CLOCK, Clock, Registration, RegistrationFailed, TaskExecutorExited, TaskExecutorLost,
)
from accelflow.runtime.jobmanager._events import POLL_S, EventPump
from accelflow.runtime.jobmanager._state import ClusterState

#: on Ray, registration waits at least this long after ``ray.placement-timeout``
_RAY_MARGIN_S = 30.0
#: a session's first and longest wait before it tries again to replace a lost TaskExecutor
_RETRY_FIRST_S, _RETRY_MAX_S = 5.0, 60.0
#: how long a TaskExecutor that ended during start-up may still send why it could not start
_LAST_WORDS_S = 1.0
_log = logging.getLogger("accelflow.runtime")


class Membership:
    """The cluster's TaskExecutors: started, awaited, replaced when lost.

    Args:
        config: how many TaskExecutors, how long registration may take.
        state: the cluster's; registered TaskExecutors are read there.
        pump: starts TaskExecutors (through its launcher) and brings their registrations.
        clock: what the registration timeout is measured with (tests: ``ManualClock``).
    """

    def __init__(self, config: Configuration, state: ClusterState, pump: EventPump, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.state = state
        self.pump = pump
        self.clock = clock
        self._starting = threading.Lock()  # one start or replacement at a time
        self._guard = threading.Lock()
        self._replacing = False  # a session's replacement thread runs (under _guard)
        pump.on_lost = self._replace_in_background

    def wanted(self) -> list[str]:
        """The ids of the TaskExecutors this cluster runs (``local.number-taskmanager``, or
        ``ray.number-taskmanager`` on Ray)."""
        ray = self.config.get(k.EXECUTION_TARGET) == "ray"
        n = self.config.get(k.RAY_NUMBER_TASKMANAGER if ray else k.NUMBER_TASKMANAGER)
        return [f"taskexecutor-{i}" for i in range(1, n + 1)]

    def start(self) -> None:
        """Start every wanted TaskExecutor and wait until each registered.

        Raises:
            the class a TaskExecutor's start-up failed with (``DriverLoadError``,
            ``DiscoveryError``...), or ``JobError`` when one died or never registered.
        """
        with self._starting:
            ids = self.wanted()
            self.pump.launch(ids)
            self._await(ids)

    def replace_lost(self) -> None:
        """Start again the wanted TaskExecutors that are not registered (lost ones)."""
        with self._starting:
            with self.state.lock:
                lost = [te for te in self.wanted() if te not in self.state.taskexecutors]
            if lost:
                self.pump.launch(lost)
                self._await(lost)

    def _replace_in_background(self, te_id: str) -> None:
        """A session lost ``te_id``: replace it on a thread of its own (the dispatcher, which
        calls this, must keep routing the registration), trying again until it registers."""
        with self._guard:
            if self._replacing:
                return  # the running replacement thread sees every lost one
            self._replacing = True
        threading.Thread(target=self._replace_until_done, daemon=True,
                         name=f"accelflow-replace-{te_id}").start()

    def _replace_until_done(self) -> None:
        delay = _RETRY_FIRST_S
        while True:
            with self._guard, self.state.lock:
                if self.state.cancel_all or all(te in self.state.taskexecutors for te in self.wanted()):
                    self._replacing = False
                    return
            try:
                self.replace_lost()
            except Exception as exc:  # the whole diagnosis once, then its first line
                why = str(exc).strip() or type(exc).__name__
                _log.warning("could not replace lost TaskExecutor(s) %s: %s; trying again in %g s",
                             sorted(self.pump.lost), why if delay == _RETRY_FIRST_S else why.splitlines()[0],
                             delay)
                if self.pump.wait_closed(delay):
                    with self._guard:
                        self._replacing = False
                    return
                delay = min(2 * delay, _RETRY_MAX_S)
                continue
            _log.info("replaced lost TaskExecutor(s); %d registered", len(self.state.taskexecutors))

    def _await(self, ids: list[str]) -> None:
        timeout, which = self.config.get(k.STARTUP_TIMEOUT), "taskmanager.registration.timeout"
        if self.config.get(k.EXECUTION_TARGET) == "ray":  # Ray's placement diagnosis wins
            placement = self.config.get(k.RAY_PLACEMENT_TIMEOUT) + _RAY_MARGIN_S
            if placement > timeout:
                timeout, which = placement, f"ray.placement-timeout + {_RAY_MARGIN_S:g} s"
        deadline = self.clock.monotonic() + timeout
        waiting = set(ids)
        #: TaskExecutors whose end was seen during start-up: (why, until when their own
        #: ``RegistrationFailed`` may still come). Its process end and its last message
        #: travel on different channels, so the end is often seen first.
        ended: dict[str, tuple[str, float]] = {}
        while waiting:
            now = self.clock.monotonic()
            for te_id, (how, until) in ended.items():
                if until <= now:
                    raise JobError(f"{te_id} {how} during start-up; see its output above")
            left = deadline - now
            wait_s = min([POLL_S, max(0.0, left), *(until - now for _, until in ended.values())])
            event = self.pump.next_event(self.pump.membership, max(0.0, wait_s))
            if event is None:
                if left > 0 or ended:
                    continue
                raise JobError(
                    f"TaskExecutor(s) {sorted(waiting)} did not register within {timeout:g} s "
                    f"({which})"
                )
            te_id, msg = event
            if isinstance(msg, Registration):
                waiting.discard(te_id)
                ended.pop(te_id, None)
            elif isinstance(msg, RegistrationFailed):
                raise decode_error(msg.error, context=f"{te_id} could not start")
            elif (isinstance(msg, TaskExecutorExited | TaskExecutorLost) and te_id in waiting
                  and msg.pid not in self.state.lost_pids and te_id not in ended):
                how = (f"exited (exit code {msg.exitcode})" if isinstance(msg, TaskExecutorExited)
                       else "disconnected")
                ended[te_id] = (how, self.clock.monotonic() + _LAST_WORDS_S)
