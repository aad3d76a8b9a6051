"""``accelflow cluster start`` when a session cluster of the user's already listens on that
rest.port: refused before anything is spawned (review finding 8)."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from urllib.parse import urlsplit

import psutil

from accelflow.testing import install_fake_nvidia_smi


def _cli(tmp_path: Path, tmpdir: Path, *args: str) -> subprocess.CompletedProcess[str]:
    """The real command (the venv's ``accelflow``), with its own state and temp directories."""
    env = dict(os.environ, ACCELFLOW_STATE_DIR=str(tmp_path / "state"), TMPDIR=str(tmpdir))
    install_fake_nvidia_smi(tmp_path / "bin", 2, environ=env)  # the fake wins over a real GPU
    env.pop("ACCELFLOW_CONF", None)
    accelflow = Path(sys.executable).with_name("accelflow")
    return subprocess.run([str(accelflow), *args], env=env, capture_output=True, text=True, timeout=120)


def _dead_pid() -> int:
    proc = subprocess.Popen([sys.executable, "-c", "pass"])
    proc.wait()
    return proc.pid


def test_a_second_start_on_a_taken_port_is_refused_naming_the_running_cluster(tmp_path: Path) -> None:
    """Before: it spawned a second cluster that failed with 'cannot listen on ...: Address
    already in use' and left one more cluster-*.log per try."""
    tmpdir = Path(tempfile.mkdtemp(prefix="afport-"))  # short: Unix socket paths are limited
    state = tmp_path / "state"
    first = _cli(tmp_path, tmpdir, "cluster", "start", "-D", "rest.port=0",
                 "-D", "local.number-taskmanager=1")
    try:
        assert first.returncode == 0, first.stderr
        (info,) = [json.loads(p.read_text(encoding="utf-8")) for p in state.glob("session-*.json")]
        port = urlsplit(info["url"]).port
        stale = state / f"session-{_dead_pid()}.json"  # a cluster that died: swept as before
        stale.write_text(json.dumps(dict(info, pid=int(stale.stem[8:]))), encoding="utf-8")
        logs = sorted(state.glob("cluster-*.log"))

        second = _cli(tmp_path, tmpdir, "cluster", "start", "-D", f"rest.port={port}")

        assert second.returncode == 1, second.stderr
        assert second.stderr.splitlines() == [
            f"accelflow: removed the stale state file {stale}: its session cluster at {info['url']} is "
            f"gone (pid {stale.stem[8:]} has exited); nothing was signalled",
            f"accelflow: error: a session cluster of yours already runs at {info['url']} (pid "
            f"{info['pid']}), on rest.port {port}; stop it (accelflow cluster stop --cluster "
            f"{info['url']}), or start another with -D rest.port=0 (a free port) or another rest.port",
        ]
        assert sorted(state.glob("cluster-*.log")) == logs  # nothing was spawned
        assert [p.name for p in state.glob("session-*.json")] == [f"session-{info['pid']}.json"]
    finally:
        stop = _cli(tmp_path, tmpdir, "cluster", "stop")
        shutil.rmtree(tmpdir, ignore_errors=True)
    assert stop.returncode == 0, stop.stderr
    assert not psutil.pid_exists(info["pid"]) or psutil.Process(info["pid"]).status() == psutil.STATUS_ZOMBIE
