"""A session cluster's state on disk, and finding a running one (the client's side).

``accelflow cluster start`` runs the session cluster (:mod:`._session`) as a detached process
(``setsid``). When the cluster is ready it writes a *state file* ``session-<pid>.json`` (mode
0600) into the per-user state directory (``$ACCELFLOW_STATE_DIR``, default
``$XDG_STATE_HOME/accelflow`` or ``~/.local/state/accelflow``, mode 0700). The file maps the
REST URL to the *submission channel*: a ``multiprocessing.connection`` Unix socket in a
private 0700 directory, guarded by the random authentication key stored in the same file.
Only the user who can read the file can submit code; the REST API cannot (see
:mod:`accelflow.runtime.service._rest`). The file also holds the REST token, and the cluster
process's start time and command line: a pid is only believed while both still match, so a
stale file whose pid was reused by another process is removed and nothing is signalled
(:func:`session_process`). The socket directory (``$TMPDIR/accelflow-session-*``) names its
owner the same way in its ``owner`` file (pid and start time; the directory name stays short:
Unix socket paths are limited to 107 bytes), so the directory of a SIGKILLed cluster is
removed by the next ``accelflow cluster start|status|stop`` (:func:`sweep_stale`).
"""

from __future__ import annotations

import json
import os
import re
import shutil
import stat
import tempfile
from collections.abc import Callable
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection
from pathlib import Path
from typing import Any

import psutil

from accelflow._errors import AccelflowError
from accelflow.config.keys import STATE_DIR_ENV_VAR
from accelflow.runtime import ConfigReply, ConfigRequest

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


def socket_dir() -> Path:
    """A private (0700) directory whose ``owner`` file records this process's pid and start time."""
    path = Path(tempfile.mkdtemp(prefix=_SOCKET_PREFIX))
    write_private(path / "owner", f"{os.getpid()} {psutil.Process().create_time():.3f}\n")
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


def write_private(path: Path, text: str) -> None:
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
