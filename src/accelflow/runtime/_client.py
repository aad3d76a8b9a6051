"""Submitting a job: start the embedded cluster, run the job in a background thread, stop.

``JobClient`` is what ``Environment.execute_async`` returns. The cluster lives exactly as long
as the job; Ctrl-C (or any exception) in the caller cancels the job and stops the cluster.
With ``rest.enabled: true`` the cluster serves the REST API and web UI for as long as it
lives. Under ``accelflow run --cluster URL`` (:data:`cluster_target` set), jobs go to that
session cluster instead (:class:`accelflow.runtime._remote.RemoteJobClient`).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from accelflow._errors import AccelflowError, JobCancelledError
from accelflow.runtime._graph import JobGraph, build_job_graph
from accelflow.config import _keys as k
from accelflow.runtime._jobmanager import JobManager, JobResult
from accelflow.runtime._rest import RestServer
from accelflow.runtime.launchers import make_launcher

if TYPE_CHECKING:
    from accelflow.api._stream import Environment

_CANCEL_WAIT_S = 30.0

#: Set by ``accelflow run`` to show a progress display: called with the JobManager.
progress_hook: Callable[[JobManager, Any], Callable[[], None]] | None = None
#: Set by ``accelflow run --cluster URL``: (the session cluster's URL, the job script's
#: directory, whose modules travel by value).
cluster_target: tuple[str, str | None] | None = None


class _Waitable:
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


class JobClient(_Waitable):
    """Handle of a running job: ``status()``, ``cancel()``, ``wait()``."""

    def __init__(self, env: Environment, name: str) -> None:
        self.name = name
        self.submitted = time.monotonic()
        self.graph = job_graph(env, name)
        self.launcher = make_launcher(env.config)
        self.jobmanager = JobManager(env.config, self.launcher)
        self.rest: RestServer | None = None
        self._status = "CREATED"
        self._result: JobResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._stop_progress: Callable[[], None] | None = None
        if progress_hook is not None:
            self._stop_progress = progress_hook(self.jobmanager, self.graph)
        self._thread = threading.Thread(target=self._run, name="accelflow-jobmanager", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._status = "STARTING"
            spill = threading.Thread(target=self.jobmanager.prepare_sources, args=(self.graph,))
            spill.start()  # large arrays go to disk while TaskExecutors start
            try:
                self.jobmanager.start_cluster()
            finally:
                spill.join()
            if self.jobmanager.config.get(k.REST_ENABLED):
                self.rest = RestServer(self.jobmanager, self.jobmanager.config)
                self.rest.start()
            self._status = "RUNNING"
            self._result = self.jobmanager.run(self.graph, self.submitted)
            self._status = "FINISHED"
        except JobCancelledError as exc:
            self._status, self._error = "CANCELED", exc
        except BaseException as exc:  # reported to the waiting caller
            self._status, self._error = "FAILED", exc
        finally:
            try:
                self.jobmanager.cleanup_after_failure(self.graph) if self._error else None
                self.jobmanager.close()  # before the launcher: its exit events are no news
                if self.rest is not None:
                    self.rest.stop()
                self.launcher.stop()
            finally:
                self._done.set()

    def status(self) -> str:
        """``STARTING``, ``RUNNING``, ``FINISHED``, ``FAILED`` or ``CANCELED``."""
        return self._status

    def cancel(self) -> None:
        """Ask the job to stop; ``wait()`` then raises ``JobCancelledError``."""
        self.jobmanager.cancel_requested = True


def job_graph(env: Environment, name: str) -> JobGraph:
    """Check the environment's job and turn it into its graph (the environment is emptied)."""
    if not env._transformations:
        raise AccelflowError("the job has no operators: add a source and a sink first")
    if not any(t.is_sink for t in env._transformations):
        raise AccelflowError(
            "the job has no sink: end it with print(), sink_to_file(), add_sink() or "
            "execute_and_collect()"
        )
    graph = build_job_graph(name, list(env._transformations))
    env._transformations.clear()
    return graph


def submit(env: Environment, name: str) -> Any:
    """A :class:`JobClient` on the embedded cluster, or a remote one under ``--cluster``."""
    if cluster_target is not None:
        from accelflow.runtime._remote import RemoteJobClient

        return RemoteJobClient(env, name, *cluster_target)
    return JobClient(env, name)
