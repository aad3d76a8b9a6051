"""Which failure a job reports when one subtask dies under others (``docs/failover.md``,
*Which failure is reported*).

When a subtask dies (SIGKILLed, raising, its TaskExecutor lost), the subtasks next to it see
its data channels close at the same moment and fail with
:class:`~accelflow._errors.ChannelClosed` (a survivor of a job that rolls back in place
waits for its rollback instead). Their reports and the dead subtask's own race to the
JobManager; the first to arrive used to be the job's error, so a healthy upstream was often
blamed (``subtask numbers (1/2) failed: the downstream subtask closed its data channel``)
and the full restart's record named it as the failed subtask.

A ``ChannelClosed`` is therefore *held* (:class:`HeldFailures`) for up to
:data:`ROOT_CAUSE_WAIT_S` while the JobManager handles every other event as usual (checkpoint
acks, progress, a cancel). When another failure of the attempt arrives meanwhile (a
``SubtaskFailed`` of another kind, a ``SubtaskExited`` without finishing, a lost
TaskExecutor), that one is the job's error and its subtasks come first in the attempt's
:class:`~._failover.Failure`; the held errors are added to it as notes
(``... closed its data channel (a consequence)``). When none arrives in time, the first held
error stands, as before. Flink's exception history reports a root cause with the failures
that happened concurrently in the same way.
"""

from __future__ import annotations

from accelflow._errors import ChannelClosed
from accelflow._parent import killed_by
from accelflow.runtime import SubtaskKey

#: how long a subtask's ``ChannelClosed`` waits for the failure of the neighbour that closed
#: the channel, in seconds. That failure takes the same path (subtask, TaskExecutor,
#: JobManager) and is sent when the neighbour dies: a raising subtask sends its error before
#: its process exits (and closes its channels), a SIGKILLed one's exit is seen by its
#: TaskExecutor at once, a lost TaskExecutor by the launcher at once. It arrives within
#: milliseconds, tens on a loaded host; 1 s covers that with room, and is all a job whose
#: only failure is a transport one (no neighbour failed) is delayed by.
ROOT_CAUSE_WAIT_S = 1.0


class HeldFailures:
    """The ``ChannelClosed`` failures of one attempt held back (see the module's description).

    Example:
        >>> from accelflow._errors import ChannelClosed, JobError
        >>> held = HeldFailures()
        >>> up = SubtaskKey("job-1", 0, 0, 0)
        >>> held.hold(up, ChannelClosed("subtask numbers (1/2) failed: the downstream subtask "
        ...                               "closed its data channel"), now=10.0)
        True
        >>> held.overdue(10.5) is None, held.overdue(11.0) is not None, up in held
        (True, True, True)
        >>> keys, error = held.root([SubtaskKey("job-1", 0, 1, 1)], JobError("subtask model (2/2) exited"))
        >>> keys[1] == up, error.__notes__
        (True, ['subtask numbers (1/2) failed: the downstream subtask closed its data channel (a consequence)'])
    """

    def __init__(self) -> None:
        self.failures: list[tuple[SubtaskKey, BaseException]] = []
        self.until: float | None = None  # the first one's deadline (``clock.monotonic()``)

    def hold(self, key: SubtaskKey, error: BaseException, now: float) -> bool:
        """Hold ``error`` of subtask ``key`` if it only says a neighbour closed its channel."""
        if not isinstance(error, ChannelClosed):
            return False
        self.failures.append((key, error))
        if self.until is None:
            self.until = now + ROOT_CAUSE_WAIT_S
        return True

    def __contains__(self, key: object) -> bool:
        return any(held == key for held, _ in self.failures)

    def overdue(self, now: float) -> BaseException | None:
        """The first held error once no other failure came within :data:`ROOT_CAUSE_WAIT_S`."""
        if self.until is None or now < self.until:
            return None
        return self.failures[0][1]

    def root(self, keys: list[SubtaskKey], error: BaseException) -> tuple[list[SubtaskKey], BaseException]:
        """The failure to report, ``error`` of ``keys``: the held subtasks follow ``keys``
        (they failed too: their processes end), their errors are noted on ``error``."""
        for key, held in self.failures:
            if held is not error:
                error.add_note(f"{first_line(held)} (a consequence)")
            if key not in keys:
                keys = [*keys, key]
        return keys, error


def exit_text(exitcode: int | None) -> str:
    """How a subtask's process exited, for an error message.

    Example:
        >>> exit_text(-9), exit_text(1), exit_text(None)
        (' with code -9 (killed by SIGKILL)', ' with code 1', '')
    """
    if exitcode is None:  # it was waited for before its rollback, or never started
        return ""
    name = killed_by(exitcode)
    return f" with code {exitcode}" + (f" (killed by {name})" if name else "")


def first_line(error: BaseException) -> str:
    """The first line of ``error``'s message (its class name when it has none)."""
    return (str(error).splitlines() or [type(error).__name__])[0]
