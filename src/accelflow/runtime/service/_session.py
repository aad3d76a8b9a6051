"""The session cluster: a long-lived JobManager with its TaskExecutors, REST API and web UI,
to which ``accelflow run --cluster URL job.py`` submits jobs (as Flink's session mode).

``accelflow cluster start`` runs this module as a detached process (``setsid``); its state
file and socket directory are described in :mod:`._statefile`. SIGTERM or SIGINT stop it in
order (every job cancelled, every TaskExecutor stopped, the state file removed), also while it
starts: ``accelflow cluster start`` sends SIGTERM when Ctrl-C interrupts it.

Messages on the submission channel are the typed messages of
:mod:`accelflow.runtime._messages` (the job graph inside with cloudpickle):

- ``SubmitJob`` → ``JobAccepted``, then ``JobProgress``... and finally ``JobSucceeded`` or
  ``JobFailed`` (the error keeps its class and traceback through ``encode_error``);
  the client may send ``CancelJob``. A client that disconnects leaves its job running (cancel
  it in the UI or with the REST API). Each ``JobProgress`` snapshot carries, besides the
  record counts, the job's ``state`` and, while it waits for resources, ``pending``
  (``{"message": ..., "reasons": [...]}``); the last one carries ``retained_checkpoint`` and
  ``stopped_with_savepoint`` (the client tells its user).
- ``StatusRequest`` → ``StatusReply``; ``StopRequest`` → ``Stopping``; ``ConfigRequest`` →
  ``ConfigReply``: the cluster's keys, the lowest config layer of a job script run with
  ``--cluster`` (so it sees e.g. the cluster's external resources); ``TriggerSavepoint`` →
  ``SavepointDone`` or ``SavepointFailed`` (``accelflow savepoint|stop``, see ``_savepoints``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import logging
import os
import secrets
import shutil
import signal
import sys
import threading
import time
from collections.abc import Callable, Iterator
from contextlib import AbstractContextManager
from dataclasses import asdict
from multiprocessing.connection import Connection, Listener, wait
from types import FrameType
from typing import Any

import cloudpickle
import psutil

from accelflow._errors import (
    AccelflowError, AccelflowInternalError, AllocationError, ConfigError, JobError, encode_error,
)
from accelflow.config import Configuration, config_from
from accelflow.runtime import close_listener, serve_forever, unix_listener
from accelflow.runtime import (
    CancelJob, ConfigReply, ConfigRequest, JobAccepted, JobFailed, JobProgress, JobSucceeded,
    StatusReply, StatusRequest, Stopping, StopRequest, SubmitJob,
    TriggerSavepoint, send_pickled,
)
from accelflow.runtime.jobmanager import Job, JobManager
from accelflow.runtime import SessionInfo, socket_dir, write_private
from accelflow.runtime.rest import RestServer, answer_savepoint, cluster_view, retained_checkpoint
from accelflow.runtime.launchers import make_launcher

_STOP_JOBS_S = 20.0
_PROGRESS_S = 0.5
_log = logging.getLogger("accelflow.session")


class SessionCluster:
    """The session cluster process: JobManager, TaskExecutors, REST server, submissions."""

    def __init__(self, config: Configuration, *, stopping: threading.Event | None = None) -> None:
        self.config = config
        self.launcher = make_launcher(config)
        self.jobmanager = JobManager(config, self.launcher)
        self.rest = RestServer(self.jobmanager, config)
        self.stopping = stopping or threading.Event()
        self.job_threads: list[threading.Thread] = []
        self.client_threads: list[threading.Thread] = []  # each tells its client how its job ended
        self.socket_dir = socket_dir()
        self.authkey = secrets.token_bytes(32)
        self.listener: Listener | None = None
        self.info: SessionInfo | None = None

    def start(self, log_path: str,
              interruptible: Callable[[], AbstractContextManager[None]] = contextlib.nullcontext) -> SessionInfo:
        """Start the TaskExecutors (within ``interruptible()``), the REST server and the
        submission channel, then write the state file."""
        self.jobmanager.start_dispatcher()
        with interruptible():
            self.jobmanager.start_cluster()
        url = self.rest.start()
        socket = str(self.socket_dir / "submit.sock")
        self.listener = unix_listener(socket)
        threading.Thread(target=serve_forever, daemon=True, name="accelflow-submit",
                         args=(self.listener, self.authkey, self._serve, self.stopping.is_set,
                               "accelflow-submission")).start()
        me = psutil.Process()
        self.info = SessionInfo(os.getpid(), url, socket, self.authkey.hex(), time.time(), log_path,
                                self.rest.token, me.create_time(), me.cmdline())
        write_private(self.info.path, json.dumps(asdict(self.info)))
        return self.info

    def stop(self) -> None:
        """Cancel every job, stop every TaskExecutor (devices released), remove the state."""
        self.jobmanager.cancel_requested = True
        deadline = time.monotonic() + _STOP_JOBS_S
        for t in [*self.job_threads, *self.client_threads]:
            t.join(max(0.0, deadline - time.monotonic()))
        self.rest.stop()
        if self.listener is not None:
            self.stopping.set()
            close_listener(self.listener)
        self.launcher.stop()  # the dispatcher (which started the TaskExecutors) still lives
        self.jobmanager.close()
        if self.info is not None:
            self.info.path.unlink(missing_ok=True)
        shutil.rmtree(self.socket_dir, ignore_errors=True)

    # -- submission channel (served by runtime/_accept.serve_forever) ----------------------
    def _serve(self, conn: Connection) -> None:
        me = threading.current_thread()  # stop() waits for it to tell its client the end
        self.client_threads = [t for t in self.client_threads if t.is_alive()] + [me]
        try:
            msg = conn.recv()
            if isinstance(msg, StatusRequest):
                view = cluster_view(self.jobmanager)  # the devices too: their health, for the CLI
                conn.send(StatusReply(dict(view["overview"], url=self.rest.url, pid=os.getpid(),
                                           taskexecutor_views=view["taskexecutors"])))
            elif isinstance(msg, ConfigRequest):
                conn.send(ConfigReply(self.jobmanager.config.to_raw_dict()))
            elif isinstance(msg, StopRequest):
                conn.send(Stopping())
                self.stopping.set()
            elif isinstance(msg, SubmitJob):
                self._submit(conn, msg.graph_blob, msg.config)
            elif isinstance(msg, TriggerSavepoint):
                conn.send(answer_savepoint(self.jobmanager, msg))
        except (EOFError, OSError):
            pass
        except Exception as exc:  # our bug: tell the client instead of leaving it waiting
            _log.exception("internal error while serving a submission")
            try:
                error = AccelflowInternalError(f"{type(exc).__name__}: {exc}")
                conn.send(JobFailed(encode_error(error)))
            except OSError:
                pass
        finally:
            conn.close()

    def _submit(self, conn: Connection, blob: bytes, raw: dict[str, Any]) -> None:
        try:
            graph = cloudpickle.loads(blob)
            job_config = config_from(values=raw)
        except Exception as exc:
            conn.send(JobFailed(encode_error(JobError(
                f"the session cluster cannot load the job: {type(exc).__name__}: {exc}. Modules "
                "the job imports by name must be importable by the cluster (start it with them on "
                "PYTHONPATH)"))))
            return
        if self.stopping.is_set():
            conn.send(JobFailed(encode_error(JobError("the session cluster is stopping"))))
            return
        try:
            self.jobmanager.check_fits(graph, job_config)
        except AllocationError as exc:
            conn.send(JobFailed(encode_error(exc)))
            return
        job = self.jobmanager.submit(graph, config=job_config)
        ended, ended_w = os.pipe()  # the job's thread writes (and closes) its end when done
        outcome: dict[str, Any] = {}
        thread = threading.Thread(target=self._run, args=(job, outcome, ended_w), daemon=True, name=job.id)
        self.job_threads.append(thread)
        thread.start()
        try:
            conn.send(JobAccepted(job.id, self.rest.url))
            self._follow(conn, job, thread, outcome, ended)
        finally:
            os.close(ended)

    def _run(self, job: Job, outcome: dict[str, Any], ended: int) -> None:
        try:
            outcome["result"] = self.jobmanager.run_job(job)
        except BaseException as exc:
            outcome["error"] = exc
            self.jobmanager.cleanup_after_failure(job.graph)
        finally:
            try:
                os.write(ended, b"x")
            except OSError:  # nobody follows any more (the client went)
                pass
            os.close(ended)

    def _follow(self, conn: Connection, job: Job, thread: threading.Thread, outcome: dict[str, Any],
                ended: int) -> None:
        """Relay progress every :data:`_PROGRESS_S` and a cancel request until the job's thread
        writes to ``ended`` (the result then goes out at once, not at the next tick)."""
        last: dict[str, Any] | None = None
        while ended not in (ready := wait([conn, ended], _PROGRESS_S)):
            if conn in ready and isinstance(conn.recv(), CancelJob):
                self.jobmanager.cancel(job.id)
            snapshot = self._snapshot(job)
            if snapshot != last:
                conn.send(JobProgress(snapshot))
                last = snapshot
        thread.join()
        with self.jobmanager.lock:  # what a cancelled or failed job left to resume from
            ending = {"retained_checkpoint": retained_checkpoint(job),
                      "stopped_with_savepoint": job.stopped_with_savepoint}
        conn.send(JobProgress(dict(self._snapshot(job), **ending)))
        if "result" in outcome:
            # its collected records may be of the job script's classes: by value where needed
            send_pickled(conn.send, outcome["result"], JobSucceeded)
        else:
            conn.send(JobFailed(encode_error(outcome["error"], with_traceback=True)))  # for -v

    def _snapshot(self, job: Job) -> dict[str, Any]:
        """What the job's client hears: records and total, the job's state and, while it
        waits for resources, why (``{"message": ..., "reasons": [...]}``, as ``/pending``)."""
        with self.jobmanager.lock:
            state, pending = job.state, job.pending
        why = None if pending is None else {"message": pending.message, "reasons": list(pending.reasons)}
        return dict(self.jobmanager.progress(job.graph), state=state, pending=why)


class _Interrupted(BaseException):
    """SIGTERM or SIGINT while the cluster's TaskExecutors start: end the start at once."""


class _StopSignals:
    """SIGTERM and SIGINT set :attr:`stopping`; inside :meth:`interruptible` (while the
    TaskExecutors start, which may take the whole ``taskmanager.registration.timeout``) the
    first also raises :class:`_Interrupted`, so the start ends at once and the cluster stops
    what it has started. SIGHUP is ignored (the terminal that started it may close)."""

    def __init__(self) -> None:
        self.stopping = threading.Event()
        self._raise = False
        for sig in (signal.SIGTERM, signal.SIGINT):
            signal.signal(sig, self._on_signal)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        self.stopping.set()
        if self._raise:
            self._raise = False
            raise _Interrupted(signal.Signals(signum).name)

    @contextlib.contextmanager
    def interruptible(self) -> Iterator[None]:
        if self.stopping.is_set():
            raise _Interrupted("a signal")
        self._raise = True
        try:
            yield
        finally:
            self._raise = False


def main(argv: list[str] | None = None) -> int:
    """``python -m accelflow.runtime.service --log FILE [--conf FILE] [-D k=v ...]``."""
    signals = _StopSignals()  # before anything is made: nothing of a cluster is left behind
    parser = argparse.ArgumentParser(prog="accelflow-session")
    parser.add_argument("--log", required=True)
    parser.add_argument("--conf")
    parser.add_argument("-D", dest="definitions", action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from(conf_file=args.conf, definitions=args.definitions)
        cluster = SessionCluster(config, stopping=signals.stopping)
    except AccelflowError as exc:
        print(f"accelflow: error: {exc}", file=sys.stderr, flush=True)
        return 2 if isinstance(exc, ConfigError) else 1
    try:
        info = cluster.start(args.log, signals.interruptible)
        print(f"accelflow: session cluster ready (pid {info.pid}) at {info.url}", flush=True)
        while not cluster.stopping.wait(0.5):
            pass
        print("accelflow: stopping the session cluster", flush=True)
    except _Interrupted as exc:
        print(f"accelflow: {exc} while starting: stopping the session cluster", flush=True)
    except AccelflowError as exc:
        print(f"accelflow: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        cluster.stop()
    print("accelflow: session cluster stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
