"""A session cluster's state on disk: written by the session process (:mod:`.service`), read
by its clients (:mod:`.client`, which finds and sweeps them).

``accelflow cluster start`` runs the session cluster (:mod:`._session`) as a detached process
(``setsid``). When the cluster is ready it writes a *state file* ``session-<pid>.json`` (mode
0600) into the per-user state directory (``$ACCELFLOW_STATE_DIR``, default
``$XDG_STATE_HOME/accelflow`` or ``~/.local/state/accelflow``, mode 0700). The file maps the
REST URL to the *submission channel*: a ``multiprocessing.connection`` Unix socket in a
private 0700 directory, guarded by the random authentication key stored in the same file.
Only the user who can read the file can submit code; the REST API cannot (see
:mod:`accelflow.runtime.rest._rest`). The file also holds the REST token, and the cluster
process's start time and command line: a pid is only believed while both still match, so a
stale file whose pid was reused by another process is removed and nothing is signalled
(:func:`session_process`). The socket directory (``$TMPDIR/accelflow-session-*``) names its
owner the same way in its ``owner`` file (pid and start time; the directory name stays short:
Unix socket paths are limited to 107 bytes), so the directory of a SIGKILLed cluster is
removed by the next ``accelflow cluster start|status|stop`` (:func:`sweep_stale`) or the next
start of any cluster (:mod:`._workdirs`).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass, field
from multiprocessing.connection import Client, Connection
from pathlib import Path

import psutil

from accelflow._errors import AccelflowError
from accelflow.config import state_dir

SOCKET_PREFIX = "accelflow-session-"
OWNER = re.compile(r"^(?P<pid>[0-9]{1,10}) (?P<start>[0-9]{1,12}(?:\.[0-9]{1,6})?)\n?$")
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


def session_process(info: SessionInfo) -> psutil.Process | None:
    """The cluster's process, or None when ``info.pid`` has exited or now belongs to another
    process (start time or command line differ): then signal nothing."""
    return same_process(info.pid, info.create_time, info.cmdline)


def same_process(pid: int, create_time: float, cmdline: list[str] | None) -> psutil.Process | None:
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
