"""Start-up on an existing Ray cluster against the local target, phase by phase, in one run.

    .venv/bin/python benchmarks/ray_startup.py [--repeat 3] [--taskexecutors 2]

Starts a one-node Ray cluster first (``ray start --head`` with a private ``RAY_TMPDIR``, in a
PID namespace of its own where ``unshare`` is allowed, so stopping it touches no other Ray on
this machine), then runs the same small job, ``from_sequence(1, 8).map(f).print()``, in fresh
interpreters (``import accelflow`` done before the clock starts) with ``ray.address`` set to
that cluster, and with the local target. ``$ACCELFLOW_STARTUP_TRACE`` is set, so the client,
the launcher, each TaskExecutor (process or actor) and ``f`` append time stamps to one file.
Phases are seconds since ``execute()``, the median of the repetitions (min - max); first
occurrence for the client-side and first-record phases, last for the TaskExecutors':

* ``ray connect`` / ``ray connected``: ``ray.init`` (after ``import ray``, which the first
  phase includes);
* ``actor create`` / ``actor ping``: the first actor asked for, the last one pinged;
* ``te process created``: the TaskExecutor's process (a Ray worker) exists;
* ``te imports started`` / ``te imports done``: the actor module's imports (before them: Ray's
  worker start-up);
* ``te forkserver started``, ``te drivers done``, ``actor registered`` (``te registered`` on
  the local target);
* ``deploy received``, ``subtask forked``, ``first record``; ``done``: ``execute()`` returned.

Then the same job goes ``--repeat`` times to a session cluster started on that Ray cluster
(``accelflow cluster start -D execution.target=ray``; its actors start once, with the
session) with ``accelflow run --cluster URL``: ``execute``, ``first record`` and ``done`` only
(the actors started before the job, with a trace file of their own).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from startup import phase_times  # benchmarks/ is this script's directory

PHASES = [
    "launcher popen", "ray connect", "ray connected", "actor create", "actor ping",
    "te process created", "te imports started", "te imports done", "te forkserver started",
    "te drivers done", "actor registered", "te registered", "deploy received", "subtask forked",
    "first record", "done",
]
_FIRST = {"launcher popen", "ray connect", "ray connected", "actor create", "deploy received",
          "subtask forked", "first record"}
RAY = Path(sys.executable).with_name("ray")


def _one(trace_path: str, conf: dict[str, Any]) -> None:
    """One repetition, in this (fresh) interpreter."""
    os.environ["ACCELFLOW_STARTUP_TRACE"] = trace_path
    from accelflow import Environment
    from accelflow.runtime.taskexecutor import trace

    def stamp(x: int, _seen: list[bool] = []) -> int:  # noqa: B006 - once per subtask
        if not _seen:
            _seen.append(True)
            os.environ["ACCELFLOW_STARTUP_TRACE"] = trace_path  # where no actor env carries it
            trace("first record")
        return x * 2

    env = Environment(conf)
    env.from_sequence(1, 8).map(stamp).print()
    trace("execute")
    env.execute("startup")
    trace("done")


def phases(trace_text: str) -> dict[str, float]:
    """Seconds since ``execute`` for each phase of one repetition's trace."""
    events = [(float(s), e) for s, _pid, e in (line.split(" ", 2) for line in trace_text.splitlines())]
    return phase_times(events, PHASES, _FIRST)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def start_head(tmpdir: str, cpus: int) -> tuple[subprocess.Popen[bytes], str]:
    """A Ray head with ``cpus`` CPUs (its own PID namespace where allowed) and its address."""
    port = _free_port()
    command = [str(RAY), "start", "--head", f"--port={port}", "--include-dashboard=false",
               "--node-ip-address=127.0.0.1", f"--num-cpus={cpus}", "--disable-usage-stats", "--block"]
    if os.geteuid() == 0 and shutil.which("unshare"):
        command = ["unshare", "--kill-child=SIGKILL", "--mount", "--pid", "--fork", "--mount-proc", *command]
    env = {**os.environ, "RAY_TMPDIR": tmpdir, "RAY_AUTH_MODE": "disabled"}
    env.pop("RAY_ADDRESS", None)
    with open(os.path.join(tmpdir, "head.log"), "wb") as log:
        head = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    address = f"127.0.0.1:{port}"
    probe = "import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); print('UP')"
    deadline = time.monotonic() + 90
    while time.monotonic() < deadline and head.poll() is None:
        up = subprocess.run([sys.executable, "-c", probe, address], env=env, capture_output=True, text=True)
        if "UP" in up.stdout:
            return head, address
        time.sleep(1)
    stop_head(head)
    raise SystemExit("ray start --head failed: " + Path(tmpdir, "head.log").read_text(errors="replace")[-2000:])


def stop_head(head: subprocess.Popen[bytes]) -> None:
    """End the head's process group (the namespace goes with its first process)."""
    try:
        os.killpg(head.pid, signal.SIGTERM)
        head.wait(30)
    except (ProcessLookupError, subprocess.TimeoutExpired):
        try:
            os.killpg(head.pid, signal.SIGKILL)
        except ProcessLookupError:
            pass
        head.wait(30)


def run(target: str, conf: dict[str, Any], repeat: int, tmp: str, env: dict[str, str]) -> list[dict[str, float]]:
    runs = []
    for i in range(repeat):
        path = os.path.join(tmp, f"{target}{i}.txt")
        subprocess.run([sys.executable, __file__, "--one", path, "--conf", json.dumps(conf)], env=env,
                       check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        with open(path, encoding="utf-8") as f:
            runs.append(phases(f.read()))
        time.sleep(0.5)
    return runs


def run_session(address: str, tes: int, repeat: int, tmp: str, env: dict[str, str]) -> list[dict[str, float]]:
    """The same job submitted ``repeat`` times (``accelflow run --cluster``) to a session
    cluster on the Ray cluster at ``address``: its actors start once, with the session."""
    accelflow = str(Path(sys.executable).with_name("accelflow"))
    env = {**env, "XDG_STATE_HOME": tmp}  # the session's state file, found by run and stop
    started = subprocess.run(
        [accelflow, "cluster", "start", "-D", "execution.target=ray", "-D", f"ray.address={address}",
         "-D", f"ray.number-taskmanager={tes}", "-D", "taskmanager.numberOfTaskSlots=1"],
        env=env, capture_output=True, text=True)
    if started.returncode:
        raise SystemExit(f"accelflow cluster start failed:\n{started.stdout}{started.stderr}")
    url = next(line.split()[-1] for line in started.stdout.splitlines() if line.startswith("REST API"))
    runs = []
    try:
        for i in range(repeat):
            path = os.path.join(tmp, f"session{i}.txt")
            subprocess.run([accelflow, "run", "--cluster", url, __file__, "--one", path, "--conf", "{}"],
                           env=env, check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
            with open(path, encoding="utf-8") as f:
                runs.append(phases(f.read()))
            time.sleep(0.5)
    finally:
        subprocess.run([accelflow, "cluster", "stop", "--cluster", url], env=env, capture_output=True)
    return runs


def report(title: str, runs: list[dict[str, float]]) -> None:
    print(f"## {title}")
    for phase in PHASES:
        values = [r[phase] for r in runs if phase in r]
        if values:
            print(f"  {phase:<22} {statistics.median(values):6.3f} s   ({min(values):.3f} - {max(values):.3f})")


def main() -> None:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--taskexecutors", type=int, default=2)
    parser.add_argument("--one", help=argparse.SUPPRESS)
    parser.add_argument("--conf", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args.one, json.loads(args.conf))
        return
    tes = args.taskexecutors
    tmp = tempfile.mkdtemp(prefix="afrs-", dir="/tmp")  # short: Unix socket paths
    head, address = start_head(tmp, cpus=tes)
    try:
        env = {**os.environ, "RAY_TMPDIR": tmp, "RAY_AUTH_MODE": "disabled"}
        ray_conf = {"execution.target": "ray", "ray.address": address, "ray.number-taskmanager": tes,
                    "taskmanager.numberOfTaskSlots": 1}
        local_conf = {"local.number-taskmanager": tes, "taskmanager.numberOfTaskSlots": 1}
        ray_runs = run("ray", ray_conf, args.repeat, tmp, env)
        session_runs = run_session(address, tes, args.repeat, tmp, env)
        local_runs = run("local", local_conf, args.repeat, tmp, env)
    finally:
        stop_head(head)
        shutil.rmtree(tmp, ignore_errors=True)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# {platform.platform()}, Python {platform.python_version()}, {cores} cores, "
          f"load average {os.getloadavg()[0]:.1f}")
    print(f"# from_sequence(1, 8).map(f).print(), {tes} TaskExecutor(s) of 1 slot; seconds since "
          f"execute(), median of {args.repeat} fresh interpreters (min - max)")
    report(f"ray: an existing 1-node cluster (ray start --head --num-cpus={tes}), ray.address set", ray_runs)
    report("ray: a session cluster on that Ray cluster (accelflow cluster start -D execution.target=ray), "
           "jobs submitted with accelflow run --cluster", session_runs)
    report("local target", local_runs)


if __name__ == "__main__":
    main()
