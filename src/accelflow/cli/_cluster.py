"""``accelflow cluster start|status|stop``: the session cluster, as Flink users know it.

``start`` launches the JobManager and TaskExecutors as a detached process (its own session,
``setsid``), returns once they have registered and prints the REST/UI URL with its token;
``status`` shows what runs; ``stop`` cancels every job, stops every TaskExecutor (devices
released) and waits until no process of the cluster is left. Each first removes stale state
files and the socket directories of clusters that died, and says so; ``stop`` signals a pid
only while its start time and command line match the state file.
"""

from __future__ import annotations

import argparse
import os
import signal
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import psutil

from accelflow._errors import AccelflowError
from accelflow.cli._common import add_config_options, conf_file, load_cli_config, say
from accelflow.config import keys as k
from accelflow.runtime import StatusRequest, StopRequest

_EXTRA_START_S = 30.0
_STOP_TIMEOUT_S = 60.0


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cluster", help="start, inspect or stop a session cluster",
        description="A session cluster runs in the background; submit jobs to it with "
        "'accelflow run --cluster URL job.py'.",
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a session cluster in the background")
    add_config_options(start)
    start.set_defaults(func=start_cluster)
    for name, func, text in (("status", status, "show a session cluster"),
                             ("stop", stop, "stop a session cluster and release its devices")):
        p = actions.add_parser(name, help=text)
        p.add_argument("--cluster", metavar="URL", help="which session (default: the only one)")
        p.set_defaults(func=func)



def start_cluster(args: argparse.Namespace) -> int:
    from accelflow.runtime import service
    from accelflow.runtime.service import state_dir, sweep_stale

    config = load_cli_config(args)  # one message for every problem, before anything starts
    sweep_stale(say)
    command = [sys.executable, "-m", service.__name__]
    conf = conf_file(args)
    if conf:
        command += ["--conf", str(Path(conf).absolute())]
    for definition in args.definitions:
        command += ["-D", definition]
    log = state_dir() / f"cluster-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # it shows the REST token
    with os.fdopen(fd, "ab") as out:
        proc = subprocess.Popen(
            [*command, "--log", str(log)], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True, cwd=os.getcwd(),
        )
    info = _await_ready(proc, log, config.get(k.STARTUP_TIMEOUT) + _EXTRA_START_S)
    print(f"session cluster started (pid {info.pid})")
    print(f"REST API and web UI: {info.url}")
    print(f"open the web UI at:  {info.ui_url}")
    print(f"REST token:          {info.token}")
    print(f"submit jobs with:    accelflow run --cluster {info.url} job.py")
    print(f"log:                 {log}")
    return 0


def _await_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> Any:
    from accelflow.runtime.service import running_sessions

    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        for info in running_sessions():
            if info.pid == proc.pid:
                return info
        if proc.poll() is not None:
            raise AccelflowError(f"the session cluster did not start (exit code {proc.returncode}):\n"
                                 + _tail(log))
        time.sleep(0.05)
    _terminate(proc.pid)
    raise AccelflowError(f"the session cluster was not ready within {timeout:g} s; stopped it. Its log:\n"
                         + _tail(log))


def status(args: argparse.Namespace) -> int:
    from accelflow.runtime.service import find_session, sweep_stale

    sweep_stale(say)
    info = find_session(args.cluster)
    with info.connect() as conn:
        conn.send(StatusRequest())
        overview = conn.recv().overview
    jobs = ", ".join(f"{n} {s.lower()}" for s, n in overview["jobs"].items() if n) or "no jobs"
    print(f"session cluster (pid {info.pid}) at {info.url}")
    print(f"  web UI: {info.ui_url}")
    print(f"  TaskExecutors: {overview['taskexecutors']}, slots {overview['slots']['free']} free "
          f"of {overview['slots']['total']}")
    for name, r in overview["resources"].items():
        print(f"  {name}: {r['free']['exact']} free of {r['total']['exact']} ({r['devices']} devices)")
    print(f"  jobs: {jobs}")
    return 0


def stop(args: argparse.Namespace) -> int:
    from accelflow.runtime.service import find_session, session_process, sweep_stale

    sweep_stale(say)
    info = find_session(args.cluster)
    root = session_process(info)  # checked again here: the pid must still be the cluster's
    if root is None:
        info.path.unlink(missing_ok=True)
        raise AccelflowError(f"the session cluster at {info.url} (pid {info.pid}) has gone; removed "
                             f"its stale state file {info.path}; nothing was signalled")
    try:
        processes = [root, *root.children(recursive=True)]
    except psutil.NoSuchProcess:
        processes = []
    try:
        with info.connect() as conn:
            conn.send(StopRequest())
            conn.recv()
    except (AccelflowError, EOFError, OSError):
        try:
            root.terminate()  # not answering: SIGTERM still stops it in order (psutil checks
        except psutil.NoSuchProcess:  # that the pid was not reused before signalling)
            pass
    _, alive = psutil.wait_procs(processes, timeout=_STOP_TIMEOUT_S)
    if alive:
        for p in alive:
            p.kill()
        raise AccelflowError(
            f"the session cluster at {info.url} did not stop within {_STOP_TIMEOUT_S:g} s; killed "
            f"{len(alive)} process(es) (pids {', '.join(str(p.pid) for p in alive)}); see {info.log}"
        )
    info.path.unlink(missing_ok=True)
    print(f"session cluster at {info.url} stopped; every device released")
    return 0


def _terminate(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGTERM)
    except ProcessLookupError:
        pass


def _tail(log: Path, lines: int = 20) -> str:
    """The cluster's own error lines from its log (else its last lines), and where the log is."""
    try:
        text = log.read_text(encoding="utf-8", errors="replace").splitlines()
    except OSError:
        return f"(no log at {log})"
    errors = [line for line in text if line.startswith("accelflow: error:")]
    shown = errors or text[-lines:] or ["(the log is empty)"]
    return "\n".join([*shown, f"(full log: {log})"])
