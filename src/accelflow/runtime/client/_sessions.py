"""Finding a running session cluster from the client's side: its state file (written by
the session process, see :mod:`accelflow.runtime._statefile`), stale ones swept away, and the
config it runs with."""

from __future__ import annotations

import json
from collections.abc import Callable
from typing import Any
from urllib.parse import urlsplit

import psutil

from accelflow._errors import AccelflowError
from accelflow.config import state_dir
from accelflow.config.keys import STATE_DIR_ENV_VAR
from accelflow.runtime import (
    SOCKET_PREFIX, ConfigReply, ConfigRequest, SessionInfo, session_process, sweep_work_dirs,
)


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
    """Remove stale state files and the work directories of clusters that died (SIGKILL),
    saying so through ``report`` for session clusters' socket directories (the others are
    logged at debug level); see :func:`accelflow.runtime.sweep_work_dirs`."""
    running_sessions(report)
    for path, pid in sweep_work_dirs():
        if path.name.startswith(SOCKET_PREFIX):
            report(f"removed the socket directory {path} of a session cluster that died (pid {pid})")


def refuse_taken_port(address: str, port: int) -> None:
    """Refuse to start a session cluster on ``address:port`` (``rest.address``, ``rest.port``)
    when one of this user's running session clusters already listens there (``port`` 0 picks
    a free one: never taken). Call it after :func:`sweep_stale`, before spawning anything.

    Raises:
        AccelflowError: names the running cluster's URL and pid, and the two ways out.

    Example:
        >>> refuse_taken_port("127.0.0.1", 0)  # a free port is picked: nothing to refuse
    """
    if port == 0:
        return
    for info in running_sessions():
        host, _, taken = urlsplit(info.url).netloc.rpartition(":")
        if taken == str(port) and _same_host(host.strip("[]"), address):
            raise AccelflowError(
                f"a session cluster of yours already runs at {info.url} (pid {info.pid}), on "
                f"rest.port {port}; stop it (accelflow cluster stop --cluster {info.url}), or start "
                "another with -D rest.port=0 (a free port) or another rest.port")


def _same_host(host: str, address: str) -> bool:
    """Whether a server bound to ``host`` keeps one on ``address`` from binding the same port
    (the same address, or either is a wildcard)."""
    wildcard, loopback = ("", "0.0.0.0", "::"), {"127.0.0.1", "localhost"}
    return host in wildcard or address in wildcard or host == address or {host, address} <= loopback


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


