"""``accelflow cluster start|status|stop|inject-fault``: the session cluster, as Flink users know
it (``inject-fault``, a fault drill: :mod:`._inject_fault`).

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
import time
from pathlib import Path
from typing import Any

import psutil

from accelflow._errors import AccelflowError
from accelflow.cli import _inject_fault
from accelflow.cli._common import add_config_options, conf_file, load_cli_config, say
from accelflow.cli._status import status_lines
from accelflow.config import keys as k
from accelflow.runtime import StatusRequest, StopRequest, python_command

_EXTRA_START_S = 30.0
_STOP_TIMEOUT_S = 60.0


_START = """\
Start a session cluster in the background (like Flink's start-cluster.sh): a JobManager and
local.number-taskmanager TaskExecutors in a detached process with the REST API and web UI.
Returns once every TaskExecutor has registered and prints the REST URL, the web UI's link with
its token, and the log. Ctrl-C while it starts stops what was started."""

_STATUS = """\
Show a running session cluster: its URL, web UI link, TaskExecutors, free slots and device
shares, and its jobs by state."""

_STOP = """\
Stop a session cluster: cancel every job, stop every TaskExecutor (each gives its devices
back) and wait until no process of the cluster is left; one that does not stop within
60 s is killed, and the command says so."""

_EPILOG = """\
examples:
  accelflow cluster start --conf conf/accelflow.yaml -D rest.port=0
  accelflow run --cluster http://127.0.0.1:8081 job.py
  accelflow cluster status
  accelflow cluster inject-fault --taskexecutor taskexecutor-1 --device 0 --xid 79
  accelflow cluster stop --cluster http://127.0.0.1:8081"""


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "cluster", help="start, inspect or stop a session cluster",
        description="A session cluster runs in the background; submit jobs to it with "
        "'accelflow run --cluster URL job.py'.", epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    actions = parser.add_subparsers(dest="action", metavar="ACTION", required=True)
    start = actions.add_parser("start", help="start a session cluster in the background",
                               description=_START, epilog=_EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
    add_config_options(start)
    start.set_defaults(func=start_cluster)
    for name, func, text, description in (
            ("status", status, "show a session cluster", _STATUS),
            ("stop", stop, "stop a session cluster and release its devices", _STOP)):
        p = actions.add_parser(name, help=text, description=description, epilog=_EPILOG,
                               formatter_class=argparse.RawDescriptionHelpFormatter)
        p.add_argument("--cluster", metavar="URL", help="which session (default: the only one)")
        p.set_defaults(func=func)
    _inject_fault.add_parser(actions)


def start_cluster(args: argparse.Namespace) -> int:
    from accelflow.runtime import service
    from accelflow.config import state_dir
    from accelflow.runtime.client import refuse_taken_port, sweep_stale

    config = load_cli_config(args)  # one message for every problem, before anything starts
    sweep_stale(say)
    refuse_taken_port(config.get(k.REST_ADDRESS), config.get(k.REST_PORT))  # before its log is made
    command = python_command("-m", service.__name__)
    conf = conf_file(args)
    if conf:
        command += ["--conf", str(Path(conf).absolute())]
    for definition in args.definitions:
        command += ["-D", definition]
    log = state_dir() / f"cluster-{time.strftime('%Y%m%d-%H%M%S')}-{os.getpid()}.log"
    fd = os.open(log, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)  # it shows the REST token
    # Ctrl-C waits until the process exists (and is ours to stop); the session unblocks it
    signal.pthread_sigmask(signal.SIG_BLOCK, {signal.SIGINT})
    try:
        with os.fdopen(fd, "ab") as out:
            proc = subprocess.Popen(
                [*command, "--log", str(log)], stdin=subprocess.DEVNULL, stdout=out, stderr=subprocess.STDOUT,
                start_new_session=True, cwd=os.getcwd(),
            )
    except BaseException:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})
        raise
    try:
        signal.pthread_sigmask(signal.SIG_UNBLOCK, {signal.SIGINT})  # a Ctrl-C since lands here
        info = _await_ready(proc, log, config.get(k.STARTUP_TIMEOUT) + _EXTRA_START_S)
    except KeyboardInterrupt:
        return _stop_starting(proc, log)
    print(f"session cluster started (pid {info.pid})")
    print(f"REST API and web UI: {info.url}")
    print(f"open the web UI at:  {info.ui_url}")
    print(f"REST token:          {info.token}")
    print(f"submit jobs with:    accelflow run --cluster {info.url} job.py")
    print(f"log:                 {log}")
    return 0


def _stop_starting(proc: subprocess.Popen[bytes], log: Path) -> int:
    """Ctrl-C while the session cluster starts: SIGTERM it (it stops the TaskExecutors it has
    started and removes its state file), wait until no process of it is left, and say so; when
    that does not happen in time, or Ctrl-C comes again, say how to stop it. Returns 130."""
    from accelflow.config import state_dir

    say(f"interrupted: stopping the session cluster that was starting (pid {proc.pid})")
    processes = _family(proc.pid)
    proc.terminate()  # our child, not waited for yet: the pid is still its own
    deadline = time.monotonic() + _STOP_TIMEOUT_S
    alive: list[psutil.Process] = []
    try:
        while proc.poll() is None and time.monotonic() < deadline:
            processes |= _family(proc.pid)  # TaskExecutors it started meanwhile
            time.sleep(0.05)
        _, alive = psutil.wait_procs(processes, timeout=max(0.0, deadline - time.monotonic()))
    except KeyboardInterrupt:
        alive = [p for p in processes if p.is_running()]
    if proc.poll() is None:
        say(f"the session cluster (pid {proc.pid}) is still starting or stopping; stop it with "
            f"'kill {proc.pid}' (it then stops its TaskExecutors), or with 'accelflow cluster stop' "
            f"once it is ready; its log: {log}")
        return 130
    if alive:
        say(f"the session cluster (pid {proc.pid}) has stopped, but some of its processes still run "
            f"(pids {', '.join(str(p.pid) for p in alive)}); stop them with 'kill PID'; its log: {log}")
        return 130
    (state_dir() / f"session-{proc.pid}.json").unlink(missing_ok=True)  # gone with its process
    say(f"stopped it: no process of it is left (its log: {log})")
    return 130


def _family(pid: int) -> set[psutil.Process]:
    """The process ``pid`` and its descendants (none when it has exited)."""
    try:
        root = psutil.Process(pid)
        return {root, *root.children(recursive=True)}
    except psutil.NoSuchProcess:
        return set()


def _await_ready(proc: subprocess.Popen[bytes], log: Path, timeout: float) -> Any:
    from accelflow.runtime.client import running_sessions

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
    from accelflow.runtime.client import find_session, sweep_stale

    sweep_stale(say)
    info = find_session(args.cluster)
    with info.connect() as conn:
        conn.send(StatusRequest())
        overview = conn.recv().overview
    print(f"session cluster (pid {info.pid}) at {info.url}")
    for line in [f"web UI: {info.ui_url}", *status_lines(overview)]:
        print(f"  {line}")
    return 0


def stop(args: argparse.Namespace) -> int:
    from accelflow.runtime import session_process
    from accelflow.runtime.client import find_session, sweep_stale

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
    alive = _wait_ended(processes, _STOP_TIMEOUT_S)
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


def _wait_ended(processes: list[psutil.Process], timeout: float) -> list[psutil.Process]:
    """Those of ``processes`` still running after ``timeout`` seconds. An exited process that
    its parent has not reaped yet (a zombie: the cluster's processes re-parented to a child
    subreaper, such as a container's init or a test runner, that reaps late) has ended: its
    device and memory are free, and only its parent can remove it."""
    deadline = time.monotonic() + timeout
    while True:
        alive = [p for p in processes if not _ended(p)]
        if not alive or time.monotonic() >= deadline:
            return alive
        time.sleep(0.05)


def _ended(process: psutil.Process) -> bool:
    try:
        return not process.is_running() or process.status() == psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return True


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
