"""A failure that repeats is shown once, then counted (review finding 10).

A deterministic error in user code (a map that always raises) fails every attempt the same
way; with checkpointing on, restarts are unbounded by default (Flink's default), and each
attempt logged a line or two at WARNING: hundreds of lines in minutes, for one cause. The
first failure of each cause is logged in full at WARNING, as before; a repeat of a cause seen
before (the same error text, the failing subtask's index and TaskExecutor aside) is logged at
INFO (``accelflow -v`` and the session cluster's log keep every line), and a WARNING line
counts the repeats at most once per :data:`EVERY` attempts or :data:`INTERVAL_S` seconds::

    accelflow: warning: job-1: the same failure again (attempt 3, 1 repeat in 0.1 s): subtask map (1/2) on taskexecutor-1 failed; shown again once per 10 attempts or 30 s (each one with -v); it gives up after restart-strategy.fixed-delay.attempts (30) restarts
    accelflow: warning: job-1: the same failure again (attempt 13, 11 repeats in 1.3 s): subtask map (2/2) on taskexecutor-1 failed
"""

from __future__ import annotations

import logging
import re
from typing import Any

from accelflow.config import keys as k
from accelflow.runtime import Clock

EVERY = 10
INTERVAL_S = 30.0
UNBOUNDED = 2**31 - 1  # the restarts of Flink's default with checkpointing on
_log = logging.getLogger("accelflow.runtime")
_NUMBER = re.compile(r"[0-9]+")


def identity(error: BaseException) -> str:
    """What makes two failures "the same": the error's text, numbers in its first line (which
    subtask index, which TaskExecutor) left out.

    Example:
        >>> identity(ValueError("subtask map (2/4) on taskexecutor-3 failed\\nValueError: bad 7"))
        'subtask map (#/#) on taskexecutor-# failed\\nValueError: bad 7'
    """
    first, _, rest = str(error).partition("\n")
    return "\n".join(filter(None, [_NUMBER.sub("#", first or type(error).__name__), rest]))


class RepeatedFailures:
    """The failover lines of one job, repeats collapsed.

    Args:
        job_id: the job, e.g. ``job-1``.
        restarts: the restarts it had at the start (:data:`UNBOUNDED`: Flink's default).
        clock: ``monotonic()`` for the time since the first repeat (tests: ``ManualClock``).
    """

    def __init__(self, job_id: str, restarts: int, clock: Clock) -> None:
        self.job_id, self.restarts, self.clock = job_id, restarts, clock
        self.seen: set[str] = set()
        self.repeats = 0
        self.error: BaseException | None = None
        self._first = 0.0  # when the first repeat came
        self._shown: tuple[int, float] | None = None  # the repeats and the time of the last line

    def note(self, error: BaseException) -> None:
        """``error`` failed the attempt: the next :meth:`warning` is about it."""
        self.error = error

    def warning(self, message: str, *args: Any, attempt: int, error: BaseException | None = None) -> None:
        """Log ``message % args`` at WARNING when its error (``error``, else the one noted) is
        new to this job, else at INFO with, at most once per :data:`EVERY` attempts or
        :data:`INTERVAL_S` s, a WARNING line counting the repeats (``attempt``: the next one)."""
        error = error if error is not None else self.error
        key = identity(error) if error is not None else message % args
        if key not in self.seen:
            self.seen.add(key)
            _log.warning(message, *args)
            return
        _log.info(message, *args)
        now = self.clock.monotonic()
        self.repeats += 1
        if self._shown is None:
            self._first = now
        elif self.repeats - self._shown[0] < EVERY and now - self._shown[1] < INTERVAL_S:
            return
        first_line = key.partition("\n")[0] if error is None else (str(error).splitlines() or [key])[0]
        _log.warning("%s: the same failure again (attempt %d, %d repeat%s in %.1f s): %s%s", self.job_id,
                     attempt, self.repeats, "" if self.repeats == 1 else "s", now - self._first, first_line,
                     self._hint() if self._shown is None else "")
        self._shown = (self.repeats, now)

    def _hint(self) -> str:
        """Said once, with the first repeat: how repeats are shown, and the restarts left."""
        shown = f"; shown again once per {EVERY} attempts or {INTERVAL_S:g} s (each one with -v); "
        if self.restarts >= UNBOUNDED:
            return (f"{shown}it restarts until it is cancelled: set {k.RESTART_ATTEMPTS.name} to give up "
                    "after that many restarts (unbounded restarts are Flink's default with checkpointing on)")
        return f"{shown}it gives up after {k.RESTART_ATTEMPTS.name} ({self.restarts}) restarts"
