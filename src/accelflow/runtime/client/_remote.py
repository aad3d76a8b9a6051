"""Submitting a job to a running session cluster (``accelflow run --cluster URL job.py``).

The job graph travels with cloudpickle over the session's authenticated submission channel
(never through the REST API). Modules next to the job script travel by value, so the cluster
need not import them; other modules the job imports by name must be importable there.
"""

from __future__ import annotations

import os
import sys
import threading
from collections.abc import Callable
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

import cloudpickle

from accelflow._errors import AccelflowError, JobError
from accelflow.config import Configuration
from accelflow.dataflow import JobGraph
from accelflow.runtime.client._client import _Waitable
from accelflow.runtime.client._context import ExecutionContext
from accelflow.runtime.jobmanager import JobResult


class RemoteJobClient(_Waitable):
    """Handle of a job on a session cluster: ``status()``, ``cancel()``, ``wait()``, ``job_id``.

    Raises (from the constructor):
        AccelflowError: no session cluster at ``url``, or it refused the job.
    """

    def __init__(self, graph: JobGraph, config: Configuration, context: ExecutionContext) -> None:
        from accelflow.runtime.service import find_session

        self.name = graph.name
        self.graph = graph
        session = find_session(context.cluster_url)
        _pickle_by_value(context.script_dir)
        try:
            blob = cloudpickle.dumps(self.graph)
        except Exception as exc:
            raise JobError(f"the job cannot be sent to the session cluster: {type(exc).__name__}: {exc}") from exc
        self.url = session.url
        self._conn: Connection = session.connect()
        self._conn.send(("submit", blob, config.to_raw_dict()))
        self._status = "CREATED"
        self._result: JobResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._send_lock = threading.Lock()
        #: progress displays attached to this job (see ``ExecutionContext.progress``)
        self.progress_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.job_id = self._accepted()
        self._status = "RUNNING"
        self._stop_progress = None
        if context.progress is not None:
            self._stop_progress = context.progress(self, self.graph)
        threading.Thread(target=self._read, daemon=True, name="accelflow-remote").start()

    def _accepted(self) -> str:
        msg = self._recv()
        if msg[0] == "accepted":
            print(f"accelflow: submitted {msg[1]} ({self.name}) to {msg[2]}", file=sys.stderr, flush=True)
            return str(msg[1])
        self._conn.close()
        raise self._error_of(msg)

    def _recv(self) -> tuple[Any, ...]:
        try:
            msg: tuple[Any, ...] = self._conn.recv()
            return msg
        except (EOFError, OSError) as exc:
            raise JobError(f"the session cluster at {self.url} went away while running the job") from exc

    @staticmethod
    def _error_of(msg: tuple[Any, ...]) -> BaseException:
        from accelflow.runtime.service import rebuild_error

        if msg[0] == "error":
            return rebuild_error(msg[1], msg[2], tuple(msg[3]))
        return AccelflowError(f"unexpected answer from the session cluster: {msg[0]!r}")

    def _read(self) -> None:
        try:
            while True:
                msg = self._recv()
                if msg[0] == "progress":
                    for listener in self.progress_listeners:
                        listener(msg[1])
                    continue
                if msg[0] == "result":
                    self._result, self._status = msg[1], "FINISHED"
                else:
                    self._error = self._error_of(msg)
                    self._status = "CANCELED" if msg[1:2] == ("JobCancelledError",) else "FAILED"
                return
        except BaseException as exc:
            self._error, self._status = exc, "FAILED"
        finally:
            self._conn.close()
            self._done.set()

    def status(self) -> str:
        """``RUNNING``, ``FINISHED``, ``FAILED`` or ``CANCELED``."""
        return self._status

    def cancel(self) -> None:
        """Ask the cluster to cancel the job; ``wait()`` then raises ``JobCancelledError``."""
        try:
            with self._send_lock:
                self._conn.send(("cancel",))
        except OSError:
            pass  # already over


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
