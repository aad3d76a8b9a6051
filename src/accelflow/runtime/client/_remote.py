"""Submitting a job to a running session cluster (``accelflow run --cluster URL job.py``).

The job graph travels with cloudpickle over the session's authenticated submission channel
(never through the REST API); a memory-mapped array in it (``np.load(path, mmap_mode="r")``)
goes by its file, which the cluster, on the same machine, maps itself. Modules next to the job script travel by value, so the cluster
need not import them; other modules the job imports by name must be importable there.

The client says on stderr what its user cannot see otherwise: the job was submitted, it waits
for resources (``PENDING``, once, with the placement's reasons) and later starts, it was
stopped with a savepoint (and where).
"""

from __future__ import annotations

import os
import sys
import threading
import time
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle

from accelflow._errors import AccelflowError, JobCancelledError, JobError, TransportError, decode_error
from accelflow._warn import warn
from accelflow.config import Configuration
from accelflow.dataflow import JobGraph
from accelflow.dataflow import Pickler
from accelflow.runtime import (
    ByFile, CancelJob, JobAccepted, JobFailed, JobProgress, JobSucceeded, SubmitJob, dumps,
)
from accelflow.runtime.client._waitable import Waitable
from accelflow.runtime.client._context import ExecutionContext
from accelflow.runtime.jobmanager import JOB_KEYS, JobResult


class _Pickler(ByFile, Pickler):
    """The job graph's pickler: memory-mapped arrays (``np.load(path, mmap_mode="r")``) go
    by their file, which the session cluster, on this machine, maps itself."""


class RemoteJobClient(Waitable):
    """Handle of a job on a session cluster: ``status()``, ``cancel()``, ``wait()``, ``job_id``.

    Raises (from the constructor):
        AccelflowError: no session cluster at ``url``, or it refused the job.
    """

    def __init__(self, graph: JobGraph, config: Configuration, context: ExecutionContext) -> None:
        from accelflow.runtime.client._sessions import find_session, session_config

        self.name = graph.name
        self.graph = graph
        session = find_session(context.cluster_url)
        _pickle_by_value(context.script_dir)
        try:
            blob = dumps(self.graph, _Pickler)
        except Exception as exc:
            raise JobError(f"the job cannot be sent to the session cluster: {type(exc).__name__}: {exc}") from exc
        self.url = session.url
        cluster_keys = dict(context.base_config) or session_config(session)
        _warn_cluster_keys(config.to_raw_dict(), cluster_keys, self.url)
        self._conn: Connection = session.connect()
        self._conn.send(SubmitJob(blob, config.to_raw_dict()))
        self._status = "CREATED"
        self._result: JobResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._send_lock = threading.Lock()
        #: progress displays attached to this job (see ``ExecutionContext.progress``)
        self.progress_listeners: list[Callable[[dict[str, Any]], None]] = []
        #: the checkpoint a cancelled or failed job left to resume from (its last progress)
        self.retained_checkpoint: str | None = None
        #: the savepoint of a job stopped with one (``accelflow stop``, REST, web UI)
        self.stopped_with_savepoint: str | None = None
        self._waiting_since: float | None = None  # since when it waits for resources (PENDING)
        self.job_id = self._accepted()
        self._status = "RUNNING"
        self._stop_progress = None
        if context.progress is not None:
            self._stop_progress = context.progress(self, self.graph)
        threading.Thread(target=self._read, daemon=True, name="accelflow-remote").start()

    def _accepted(self) -> str:
        msg = self._recv()
        if isinstance(msg, JobAccepted):
            _say(f"submitted {msg.job_id} ({self.name}) to {msg.url}")
            return msg.job_id
        self._conn.close()
        raise self._error_of(msg)

    def _recv(self) -> Any:
        try:
            return self._conn.recv()
        except (EOFError, OSError) as exc:
            raise TransportError(f"the session cluster at {self.url} went away while running the job") from exc

    @staticmethod
    def _error_of(msg: Any) -> BaseException:
        if isinstance(msg, JobFailed):
            return decode_error(msg.error)
        return AccelflowError(f"unexpected answer from the session cluster: {msg!r}")

    def _read(self) -> None:
        try:
            while True:
                msg = self._recv()
                if isinstance(msg, JobProgress):
                    self._progress(msg.snapshot)
                    continue
                if isinstance(msg, JobSucceeded):
                    self._result, self._status = msg.result, "FINISHED"
                    if self.stopped_with_savepoint is not None:
                        _say(f"{self.job_id} ({self.name}) was stopped with a savepoint at "
                             f"{self.stopped_with_savepoint}")
                else:
                    self._error = self._error_of(msg)
                    self._status = "CANCELED" if isinstance(self._error, JobCancelledError) else "FAILED"
                return
        except BaseException as exc:
            self._error, self._status = exc, "FAILED"
        finally:
            self._conn.close()
            self._done.set()

    def _progress(self, snapshot: dict[str, Any]) -> None:
        """Hand ``snapshot`` to the progress displays; say once that the job waits for
        resources and why, and again when it starts after waiting."""
        self.retained_checkpoint = snapshot.get("retained_checkpoint")
        self.stopped_with_savepoint = snapshot.get("stopped_with_savepoint")
        pending = snapshot.get("pending")
        if pending is not None and self._waiting_since is None:
            self._waiting_since = time.monotonic()
            reasons = "".join(f"\n  {reason}" for reason in pending["reasons"])
            _say(f"{self.job_id} ({self.name}) waits for resources (PENDING): {pending['message']}"
                 f"{reasons}\n  it starts when they are free; see {self.url}")
        elif self._waiting_since is not None and snapshot.get("state") in _PLACED:
            _say(f"{self.job_id} ({self.name}) got its resources after "
                 f"{time.monotonic() - self._waiting_since:.1f} s")
            self._waiting_since = None
        for listener in self.progress_listeners:
            listener(snapshot)

    def status(self) -> str:
        """``RUNNING``, ``FINISHED``, ``FAILED`` or ``CANCELED``."""
        return self._status

    def cancel(self) -> None:
        """Ask the cluster to cancel the job; ``wait()`` then raises ``JobCancelledError``."""
        try:
            with self._send_lock:
                self._conn.send(CancelJob())
        except OSError:
            pass  # already over


#: a job in one of these states has been placed (a job that waited may end before a tick)
_PLACED = ("RUNNING", "RESTARTING", "FINISHED")


def _say(text: str) -> None:
    """One ``accelflow: ...`` status line (or several) on stderr, in one write (other
    processes may write to the same terminal or file meanwhile)."""
    sys.stderr.write(f"accelflow: {text}\n")
    sys.stderr.flush()


def _warn_cluster_keys(job: dict[str, Any], cluster: dict[str, Any], url: str) -> None:
    """Say which keys the job sets that only the cluster decides (they are not applied)."""
    job_keys = {key.name for key in JOB_KEYS}
    ignored = sorted(name for name, value in job.items()
                     if name not in job_keys and cluster.get(name, _UNSET) != value)
    if ignored:
        warn(f"the session cluster at {url} decides {', '.join(ignored)} for every job: the "
             "job's values are ignored (only " + ", ".join(sorted(job_keys)) + " apply per job)")


_UNSET = object()


def _pickle_by_value(script_dir: str | None) -> None:
    """Send the modules loaded from the job script's directory by value, not by name."""
    if not script_dir:
        return
    root = os.path.realpath(script_dir)
    for name, module in list(sys.modules.items()):
        path = getattr(module, "__file__", None)
        if not path or name == "__main__" or "site-packages" in path:
            continue
        if os.path.realpath(path).startswith(root + os.sep) and Path(path).suffix == ".py":
            try:
                cloudpickle.register_pickle_by_value(module)
            except ValueError:
                pass  # not a plain importable module
