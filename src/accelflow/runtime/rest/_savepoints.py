"""Savepoints asked for from outside the job: the REST API's asynchronous operations (as
Flink's: trigger, get a request id, poll it) and the session cluster's blocking ones
(``accelflow savepoint|stop`` on the submission channel).

Three kinds, as Flink has them:

- a *savepoint*: the job goes on (``POST /v1/jobs/{id}/savepoints``, ``accelflow savepoint``);
- *cancel with savepoint*: the job is cancelled once the savepoint is complete
  (``"cancel-job": true``; the job ends ``CANCELED``);
- *stop with savepoint*: the sinks commit the savepoint's output and the job ends
  ``FINISHED`` (``POST /v1/jobs/{id}/stop``, ``accelflow stop``).

A savepoint whose job ends before it completes is reported failed (the coordinator drops a
checkpoint in flight when its job ends).
"""

from __future__ import annotations

import secrets
import threading
import time
from collections import OrderedDict
from concurrent.futures import Future
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from accelflow._errors import AccelflowError, CheckpointError, encode_error
from accelflow.runtime import SavepointDone, SavepointFailed, TriggerSavepoint

if TYPE_CHECKING:
    from accelflow.runtime.jobmanager import Job, JobManager

#: how many operations the REST API remembers (the oldest finished ones are forgotten)
MAX_OPERATIONS = 256
_POLL_S = 0.1
#: how long ``stop`` waits for the job's end once its savepoint is complete
_STOP_END_S = 60.0


class UnknownJob(AccelflowError):
    """No job of that id on this cluster."""


class JobNotRunning(AccelflowError):
    """The job has ended (or has not started its run yet)."""


def trigger(jm: JobManager, job_id: str, target: str | None, *, stop: bool = False) -> Future[str]:
    """Ask job ``job_id`` for a savepoint (see :meth:`JobManager.trigger_savepoint`).

    Raises:
        UnknownJob: no such job (the message lists the known ones).
        JobNotRunning: it has ended.
        CheckpointError: no target and no ``execution.checkpointing.savepoint-dir``.
    """
    with jm.lock:
        job = jm.jobs.get(job_id)
        known = sorted(jm.jobs, key=lambda j: (len(j), j))
    if job is None:
        raise UnknownJob(f"no such job: {job_id} (jobs on this cluster: {', '.join(known) or 'none'})")
    if job.done.is_set():
        raise JobNotRunning(f"{job_id} has already ended ({job.state}); savepoints are taken of running jobs")
    try:
        return jm.trigger_savepoint(job_id, target, stop=stop)
    except CheckpointError as exc:
        if job.done.is_set() or "is not running" in str(exc):
            raise JobNotRunning(f"{job_id} is not running ({job.state})") from exc
        raise


def outcome(job: Job, future: Future[str]) -> tuple[str, str | None, str | None]:
    """``(status, location, failure)``: ``IN_PROGRESS``, ``COMPLETED`` with the path, or
    ``FAILED`` with why."""
    if not future.done():
        if not job.done.is_set():
            return "IN_PROGRESS", None, None
        if not future.done():  # the job ended first (its result may have come just now)
            return "FAILED", None, f"{job.id}: the job ended ({job.state}) before its savepoint completed"
    error = future.exception()
    if error is not None:
        return "FAILED", None, str(error)
    return "COMPLETED", future.result(), None


def wait(jm: JobManager, job_id: str, future: Future[str], *, stop: bool = False) -> str:
    """Block until the savepoint completes (and, for ``stop``, the job has ended); its path.

    Raises:
        CheckpointError: it failed, or the job ended first.
    """
    job = jm.jobs[job_id]
    while True:
        try:
            path = future.result(timeout=_POLL_S)  # raises the savepoint's error
        except TimeoutError:
            if job.done.is_set() and not future.done():
                raise CheckpointError(f"the job ended ({job.state}) before its savepoint "
                                      "completed", path=job_id) from None
            continue
        if stop:
            job.done.wait(_STOP_END_S)
        return path


def answer(jm: JobManager, msg: TriggerSavepoint) -> SavepointDone | SavepointFailed:
    """The session cluster's answer to ``accelflow savepoint|stop``, once it is known."""
    try:
        future = trigger(jm, msg.job_id, msg.target, stop=msg.stop)
        return SavepointDone(wait(jm, msg.job_id, future, stop=msg.stop))
    except AccelflowError as exc:
        return SavepointFailed(encode_error(exc))


@dataclass
class _Operation:
    job_id: str
    kind: str  # savepoint, cancel, stop
    future: Future[str]
    triggered: float


class Operations:
    """The REST API's savepoint operations, by request id (Flink's trigger ids)."""

    def __init__(self, jm: JobManager) -> None:
        self.jm = jm
        self._ops: OrderedDict[str, _Operation] = OrderedDict()
        self._lock = threading.Lock()

    def trigger(self, job_id: str, target: str | None, *, kind: str = "savepoint") -> str:
        """Start one; its request id. ``kind``: ``savepoint``, ``cancel`` (cancel the job once
        the savepoint is complete) or ``stop`` (stop with savepoint). Raises as :func:`trigger`."""
        future = trigger(self.jm, job_id, target, stop=kind == "stop")
        if kind == "cancel":
            future.add_done_callback(lambda f: self._cancel_after(job_id, f))
        request_id = secrets.token_hex(16)
        with self._lock:
            self._ops[request_id] = _Operation(job_id, kind, future, time.time())
            while len(self._ops) > MAX_OPERATIONS:
                oldest = next((rid for rid, op in self._ops.items() if op.future.done()),
                              next(iter(self._ops)))
                del self._ops[oldest]
        return request_id

    def _cancel_after(self, job_id: str, future: Future[str]) -> None:
        if future.exception() is None:
            try:
                self.jm.cancel(job_id)
            except KeyError:
                pass

    def status(self, job_id: str, request_id: str) -> dict[str, Any]:
        """Flink's asynchronous operation result: ``{"status": {"id": ...}, "operation":
        {"location": ...} | {"failure-cause": ...}}`` (``IN_PROGRESS``, ``COMPLETED``, ``FAILED``).

        Raises:
            KeyError: no such request for this job.
        """
        with self._lock:
            op = self._ops.get(request_id)
        if op is None or op.job_id != job_id:
            raise KeyError(request_id)
        status, location, failure = outcome(self.jm.jobs[job_id], op.future)
        operation: dict[str, Any] | None = None
        if status == "COMPLETED":
            operation = {"location": location}
        elif status == "FAILED":
            operation = {"failure-cause": failure}
        return {"request-id": request_id, "job": job_id, "kind": op.kind,
                "triggered_at": op.triggered, "status": {"id": status}, "operation": operation}
