"""Time as the runtime's parts see it: a :class:`Clock` they are given, not the ``time`` module.

Flink gives its ``CheckpointCoordinator`` a ``Clock`` and its tests a ``ManualClock``; here the
JobManager's parts (the checkpoint coordinator, the deployer, the event pump, membership) take a
clock as an argument. :data:`SYSTEM_CLOCK`, their default, is real time and real blocking waits.
:class:`ManualClock` is time that moves only when a test says so, or when the code under test
waits on it: a wait never blocks, it jumps to its deadline, running on the way the callbacks the
test scheduled (:meth:`ManualClock.call_later`). Timeouts, intervals and pauses are then tested
exactly, in microseconds, without a sleep or a thread.
"""

from __future__ import annotations

import heapq
import itertools
import queue
import threading
import time
from collections.abc import Callable
from typing import TypeVar

T = TypeVar("T")


class Clock:
    """The real clock: ``time.monotonic`` and ``time.time``, waits that block."""

    def monotonic(self) -> float:
        """Seconds on a clock that never goes back (durations, deadlines)."""
        return time.monotonic()

    def time(self) -> float:
        """Seconds since the epoch (what people read: a checkpoint's trigger time)."""
        return time.time()

    def sleep(self, seconds: float) -> None:
        time.sleep(seconds)

    def wait(self, condition: threading.Condition, timeout: float) -> bool:
        """``condition.wait(timeout)`` (its lock held); False when it timed out."""
        return condition.wait(timeout)

    def wait_event(self, event: threading.Event, timeout: float) -> bool:
        """``event.wait(timeout)``: whether the event is set."""
        return event.wait(timeout)

    def get(self, source: queue.Queue[T], timeout: float) -> T:
        """``source.get(timeout=timeout)``.

        Raises:
            queue.Empty: nothing came within ``timeout`` seconds.
        """
        return source.get(timeout=timeout)


#: real time, the default of every part that takes a clock
SYSTEM_CLOCK = Clock()


class ManualClock(Clock):
    """Time that moves only by :meth:`advance` and by the waits of the code under test.

    A wait that is not satisfied at once moves the clock to its deadline, running every callback
    scheduled up to there in time order, and ends early (at that callback's time) once one of
    them satisfied it: put something in the queue, set the event; for a condition any callback
    counts, as a ``notify`` would (the waiter checks its predicate again). Nothing blocks, so a
    wait for something no callback brings returns at its deadline at once. For one thread: the
    test's, which also runs the callbacks.

    Example:
        >>> clock = ManualClock()
        >>> clock.call_later(2.0, lambda: print("at", clock.monotonic()))
        >>> clock.sleep(5.0)
        at 2.0
        >>> clock.monotonic(), clock.time() - ManualClock.EPOCH
        (5.0, 5.0)
    """

    #: the wall-clock time (``time()``) when the monotonic clock reads 0
    EPOCH = 1_700_000_000.0

    def __init__(self) -> None:
        self._now = 0.0
        self._due: list[tuple[float, int, Callable[[], object]]] = []
        self._order = itertools.count()  # callbacks due at the same time run in call order

    def monotonic(self) -> float:
        return self._now

    def time(self) -> float:
        return self.EPOCH + self._now

    def call_later(self, delay: float, callback: Callable[[], object]) -> None:
        """Run ``callback`` once the clock has moved ``delay`` seconds on from now."""
        heapq.heappush(self._due, (self._now + delay, next(self._order), callback))

    def advance(self, seconds: float) -> None:
        """Move the clock on by ``seconds``, running the callbacks due by then."""
        self._run_until(self._now + seconds, lambda: False)

    def sleep(self, seconds: float) -> None:
        self.advance(seconds)

    def wait(self, condition: threading.Condition, timeout: float) -> bool:
        return self._run_until(self._now + timeout, lambda: False, stop_after_one=True)

    def wait_event(self, event: threading.Event, timeout: float) -> bool:
        self._run_until(self._now + timeout, event.is_set)
        return event.is_set()

    def get(self, source: queue.Queue[T], timeout: float) -> T:
        self._run_until(self._now + timeout, lambda: not source.empty())
        return source.get_nowait()

    def _run_until(self, deadline: float, done: Callable[[], bool], *, stop_after_one: bool = False) -> bool:
        """Run the callbacks due by ``deadline`` until ``done()``; the clock ends at the last
        one's time if ``done()`` (or one ran and ``stop_after_one``), else at ``deadline``.
        Whether any callback ran."""
        ran = False
        while not done() and not (ran and stop_after_one):
            if not self._due or self._due[0][0] > deadline:
                self._now = max(self._now, deadline)
                break
            at, _, callback = heapq.heappop(self._due)
            self._now = max(self._now, at)
            callback()
            ran = True
        return ran
