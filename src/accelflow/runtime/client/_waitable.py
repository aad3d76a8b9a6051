"""``wait()``, shared by the embedded and the session-cluster job clients."""

from __future__ import annotations

import threading
from collections.abc import Callable

from accelflow.runtime.jobmanager import JobResult

_CANCEL_WAIT_S = 30.0


class Waitable:
    """``wait()`` shared by the embedded and the session-cluster job clients."""

    name: str
    _done: threading.Event
    _error: BaseException | None
    _result: JobResult | None
    _stop_progress: Callable[[], None] | None

    def cancel(self) -> None:
        raise NotImplementedError

    def wait(self, timeout: float | None = None) -> JobResult:
        """Wait for the end of the job and return its result.

        Raises:
            TimeoutError: still running after ``timeout`` seconds.
            JobCancelledError: the job was cancelled.
            JobError / AllocationError / ...: the job failed; the message says why.
        """
        try:
            if not self._done.wait(timeout):
                raise TimeoutError(f"job {self.name!r} still running after {timeout} s")
        except KeyboardInterrupt:
            self.cancel()
            self._done.wait(_CANCEL_WAIT_S)
            raise
        finally:
            if self._done.is_set() and self._stop_progress is not None:
                self._stop_progress()
                self._stop_progress = None
        if self._error is not None:
            raise self._error
        assert self._result is not None
        return self._result
