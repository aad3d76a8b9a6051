"""The session cluster: a long-lived JobManager with its TaskExecutors, REST API and web UI,
to which ``accelflow run --cluster URL job.py`` submits jobs (as Flink's session mode).

``accelflow cluster start`` runs this module as a detached process (``setsid``). When the
cluster is ready it writes a *state file* ``session-<pid>.json`` (mode 0600) into the per-user
state directory (``$ACCELFLOW_STATE_DIR``, default ``$XDG_STATE_HOME/accelflow`` or
``~/.local/state/accelflow``, mode 0700). The file maps the REST URL to the *submission
channel*: a ``multiprocessing.connection`` Unix socket in a private 0700 directory, guarded by
the random authentication key stored in the same file. Only the user who can read the file
can submit code; the REST API cannot (see :mod:`accelflow.runtime.service._rest`). The file
also holds the REST token, and the cluster process's start time and command line: a pid is
only believed while both still match, so a stale file whose pid was reused by another process
is removed and nothing is signalled (:func:`session_process`). The socket directory
(``$TMPDIR/accelflow-session-*``) names its owner the same way in its ``owner`` file (pid and
start time; the directory name stays short: Unix socket paths are limited to 107 bytes), so
the directory of a SIGKILLed cluster is removed by the next ``accelflow cluster
start|status|stop`` (:func:`sweep_stale`).

Messages on the submission channel are the typed messages of
:mod:`accelflow.runtime._messages` (the job graph inside with cloudpickle):

- ``SubmitJob`` → ``JobAccepted``, then ``JobProgress``... and finally ``JobSucceeded`` or
  ``JobFailed`` (the error keeps its class and traceback through ``encode_error``);
  the client may send ``CancelJob``. A client that disconnects leaves its job running (cancel
  it in the UI or with the REST API).
- ``StatusRequest`` → ``StatusReply``; ``StopRequest`` → ``Stopping``; ``ConfigRequest`` →
  ``ConfigReply``: the cluster's keys, the lowest config layer of a job script run with
  ``--cluster`` (so it sees e.g. the cluster's external resources); ``TriggerSavepoint`` →
  ``SavepointDone`` or ``SavepointFailed`` (``accelflow savepoint|stop``, see ``_savepoints``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import re
import secrets
import shutil
import signal
import stat
import sys
import tempfile
import threading
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from multiprocessing.connection import Client, Connection, Listener, wait
from pathlib import Path
from typing import Any

import cloudpickle
import psutil

from accelflow._errors import (
    AccelflowError, AccelflowInternalError, AllocationError, ConfigError, JobError, encode_error,
)
from accelflow.config import Configuration, config_from
from accelflow.config.keys import STATE_DIR_ENV_VAR
from accelflow.runtime import close_listener, serve_forever, unix_listener
from accelflow.runtime import (
    CancelJob, ConfigReply, ConfigRequest, JobAccepted, JobFailed, JobProgress, JobSucceeded,
    StatusReply, StatusRequest, Stopping, StopRequest, SubmitJob,
    TriggerSavepoint,
)
from accelflow.runtime.jobmanager import Job, JobManager
from accelflow.runtime.service import _savepoints
from accelflow.runtime.service._rest import RestServer
from accelflow.runtime.service._snapshot import cluster_view, retained_checkpoint
from accelflow.runtime.launchers import make_launcher

_STOP_JOBS_S = 20.0
_PROGRESS_S = 0.5
_log = logging.getLogger("accelflow.session")
_SOCKET_PREFIX = "accelflow-session-"
_OWNER = re.compile(r"^(?P<pid>[0-9]{1,10}) (?P<start>[0-9]{1,12}(?:\.[0-9]{1,6})?)\n?$")
_START_TOLERANCE_S = 0.05  # psutil's start times are in clock ticks (1/100 s)


@dataclass(frozen=True, slots=True)
class SessionInfo:
    """What a state file says about one running session cluster."""

    pid: int
    url: str
    socket: str
    authkey: str  # hex
    started: float
    log: str
    token: str  # the REST API's bearer token
    create_time: float  # of the cluster process (psutil), with cmdline: who ``pid`` is
    cmdline: list[str] = field(default_factory=list)

    @property
    def ui_url(self) -> str:
        """The web UI's link with the token."""
        return f"{self.url}?token={self.token}"

    @property
    def path(self) -> Path:
        return state_dir() / f"session-{self.pid}.json"

    def connect(self) -> Connection:
        """Open the submission channel.

        Raises:
            AccelflowError: the session does not answer (it crashed or is stopping).
        """
        try:
            return Client(self.socket, "AF_UNIX", authkey=bytes.fromhex(self.authkey))
        except (OSError, EOFError) as exc:
            raise AccelflowError(
                f"the session cluster at {self.url} (pid {self.pid}) does not answer on "
                f"{self.socket}: {exc}; see its log {self.log}"
            ) from exc


def state_dir() -> Path:
    """The per-user state directory, created with mode 0700."""
    base = os.environ.get(STATE_DIR_ENV_VAR)
    if base:
        path = Path(base)
    else:
        xdg = os.environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
        path = Path(xdg) / "accelflow"
    path.mkdir(mode=0o700, parents=True, exist_ok=True)
    if path.stat().st_mode & 0o077:
        os.chmod(path, 0o700)
    return path


def session_process(info: SessionInfo) -> psutil.Process | None:
    """The cluster's process, or None when ``info.pid`` has exited or now belongs to another
    process (start time or command line differ): then signal nothing."""
    return _same_process(info.pid, info.create_time, info.cmdline)


def _same_process(pid: int, create_time: float, cmdline: list[str] | None) -> psutil.Process | None:
    try:
        proc = psutil.Process(pid)
        if abs(proc.create_time() - create_time) > _START_TOLERANCE_S:
            return None
        if cmdline is not None and proc.cmdline() != cmdline:
            return None
        if proc.status() == psutil.STATUS_ZOMBIE:
            return None
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return None
    return proc


def _stale_reason(info: SessionInfo) -> str:
    try:
        proc = psutil.Process(info.pid)
        return f"pid {info.pid} now belongs to another process ({' '.join(proc.cmdline())[:120] or proc.name()})"
    except (psutil.NoSuchProcess, psutil.AccessDenied):
        return f"pid {info.pid} has exited"


def running_sessions(report: Callable[[str], None] | None = None) -> list[SessionInfo]:
    """Every session whose process is alive (same pid, start time and command line); the state
    files of the others are removed, each with a line to ``report`` when given."""
    found = []
    for path in sorted(state_dir().glob("session-*.json")):
        try:
            info = SessionInfo(**json.loads(path.read_text(encoding="utf-8")))
        except (OSError, ValueError, TypeError) as exc:
            if report is not None:
                report(f"ignored {path}: not a session state file of this accelflow version "
                       f"({type(exc).__name__}); remove it if no session cluster uses it")
            continue
        if session_process(info) is not None:
            found.append(info)
            continue
        path.unlink(missing_ok=True)
        if report is not None:
            report(f"removed the stale state file {path}: its session cluster at {info.url} is "
                   f"gone ({_stale_reason(info)}); nothing was signalled")
    return found


def sweep_stale(report: Callable[[str], None]) -> None:
    """Remove stale state files and the socket directories of clusters that died (SIGKILL),
    saying so through ``report``; only this user's directories, only when their owner (pid and
    start time in their ``owner`` file) is gone. A directory without that file (being created,
    or from an older accelflow) is left alone."""
    running_sessions(report)
    base = Path(tempfile.gettempdir())
    try:
        entries = list(base.iterdir())
    except OSError:
        return
    for path in entries:
        if not path.name.startswith(_SOCKET_PREFIX):
            continue
        try:
            st = path.lstat()
            if st.st_uid != os.getuid() or not stat.S_ISDIR(st.st_mode):
                continue
            match = _OWNER.match((path / "owner").read_text(encoding="ascii")[:64])
        except (OSError, UnicodeDecodeError):
            continue
        if match is None or _same_process(int(match["pid"]), float(match["start"]), None) is not None:
            continue
        shutil.rmtree(path, ignore_errors=True)
        if not path.exists():
            report(f"removed the socket directory {path} of a session cluster that died "
                   f"(pid {match['pid']})")


def _socket_dir() -> Path:
    """A private (0700) directory whose ``owner`` file records this process's pid and start time."""
    path = Path(tempfile.mkdtemp(prefix=_SOCKET_PREFIX))
    _write_private(path / "owner", f"{os.getpid()} {psutil.Process().create_time():.3f}\n")
    return path


def find_session(url: str | None) -> SessionInfo:
    """The running session with REST URL ``url`` (or the only one when ``url`` is None).

    Raises:
        AccelflowError: none, or several and no URL, or none at that URL; says which exist.
    """
    sessions = running_sessions()
    where = f"state directory {state_dir()} (${STATE_DIR_ENV_VAR})"
    if url is None:
        if len(sessions) == 1:
            return sessions[0]
        if not sessions:
            raise AccelflowError(f"no session cluster is running ({where}); start one with "
                                 "'accelflow cluster start'")
        raise AccelflowError("several session clusters are running; choose one with --cluster: "
                             + ", ".join(s.url for s in sessions))
    wanted = _normal_url(url)
    for s in sessions:
        if _normal_url(s.url) == wanted:
            return s
    known = ", ".join(s.url for s in sessions) or "none"
    raise AccelflowError(f"--cluster {url}: no session cluster of this user serves that URL "
                         f"(running: {known}; {where})")


def session_config(info: SessionInfo) -> dict[str, Any]:
    """The raw config keys the session cluster runs with (see the ``config`` message)."""
    conn = info.connect()
    try:
        conn.send(ConfigRequest())
        reply = conn.recv()
    finally:
        conn.close()
    if not isinstance(reply, ConfigReply):
        raise AccelflowError(f"unexpected answer from the session cluster at {info.url}: {reply!r}")
    return dict(reply.config)


def _normal_url(url: str) -> str:
    url = url.strip().split("?", 1)[0].rstrip("/")  # the UI link (``/?token=...``) names it too
    return url.replace("://localhost:", "://127.0.0.1:")


class SessionCluster:
    """The session cluster process: JobManager, TaskExecutors, REST server, submissions."""

    def __init__(self, config: Configuration) -> None:
        self.config = config
        self.launcher = make_launcher(config)
        self.jobmanager = JobManager(config, self.launcher)
        self.rest = RestServer(self.jobmanager, config)
        self.stopping = threading.Event()
        self.job_threads: list[threading.Thread] = []
        self.client_threads: list[threading.Thread] = []  # each tells its client how its job ended
        self.socket_dir = _socket_dir()
        self.authkey = secrets.token_bytes(32)
        self.listener: Listener | None = None
        self.info: SessionInfo | None = None

    def start(self, log_path: str) -> SessionInfo:
        self.jobmanager.start_dispatcher()
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
        _write_private(self.info.path, json.dumps(asdict(self.info)))
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
                overview = cluster_view(self.jobmanager)["overview"]
                conn.send(StatusReply(dict(overview, url=self.rest.url, pid=os.getpid())))
            elif isinstance(msg, ConfigRequest):
                conn.send(ConfigReply(self.jobmanager.config.to_raw_dict()))
            elif isinstance(msg, StopRequest):
                conn.send(Stopping())
                self.stopping.set()
            elif isinstance(msg, SubmitJob):
                self._submit(conn, msg.graph_blob, msg.config)
            elif isinstance(msg, TriggerSavepoint):
                conn.send(_savepoints.answer(self.jobmanager, msg))
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
            snapshot = self.jobmanager.progress(job.graph)
            if snapshot != last:
                conn.send(JobProgress(snapshot))
                last = snapshot
        thread.join()
        with self.jobmanager.lock:  # what a cancelled or failed job left to resume from
            retained = retained_checkpoint(job)
        conn.send(JobProgress(dict(self.jobmanager.progress(job.graph), retained_checkpoint=retained)))
        if "result" in outcome:
            conn.send(JobSucceeded(outcome["result"]))
        else:
            conn.send(JobFailed(encode_error(outcome["error"], with_traceback=True)))  # for -v


def _write_private(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` atomically, readable by this user only (0600)."""
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)
    except BaseException:
        tmp.unlink(missing_ok=True)
        raise


def main(argv: list[str] | None = None) -> int:
    """``python -m accelflow.runtime.service --log FILE [--conf FILE] [-D k=v ...]``."""
    parser = argparse.ArgumentParser(prog="accelflow-session")
    parser.add_argument("--log", required=True)
    parser.add_argument("--conf")
    parser.add_argument("-D", dest="definitions", action="append", default=[])
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        config = config_from(conf_file=args.conf, definitions=args.definitions)
        cluster = SessionCluster(config)
    except AccelflowError as exc:
        print(f"accelflow: error: {exc}", file=sys.stderr, flush=True)
        return 2 if isinstance(exc, ConfigError) else 1
    signal.signal(signal.SIGTERM, lambda *_: cluster.stopping.set())
    signal.signal(signal.SIGINT, lambda *_: cluster.stopping.set())
    signal.signal(signal.SIGHUP, signal.SIG_IGN)
    try:
        info = cluster.start(args.log)
        print(f"accelflow: session cluster ready (pid {info.pid}) at {info.url}", flush=True)
        while not cluster.stopping.wait(0.5):
            pass
        print("accelflow: stopping the session cluster", flush=True)
    except AccelflowError as exc:
        print(f"accelflow: error: {exc}", file=sys.stderr, flush=True)
        return 1
    finally:
        cluster.stop()
    print("accelflow: session cluster stopped", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
