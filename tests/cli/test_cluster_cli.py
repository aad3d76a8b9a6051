"""``accelflow cluster start|status|stop`` and ``accelflow run --cluster``: the error paths
(the working paths run against real session clusters in tests/rest)."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest

from accelflow.testing import install_fake_nvidia_smi


@pytest.fixture(autouse=True)
def _own_tmpdir(tmp_path: Path) -> Iterator[None]:
    """Each test's clusters put their socket directories in a temp directory of their own (short:
    Unix socket paths are limited to 107 bytes), so that no sweep reports or removes the socket
    directory of a cluster another test killed meanwhile."""
    short = Path(tempfile.mkdtemp(prefix="afcli-"))
    (tmp_path / "TMPDIR").write_text(str(short), encoding="utf-8")
    yield
    shutil.rmtree(short, ignore_errors=True)


def _cli(tmp_path: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = dict(os.environ, ACCELFLOW_STATE_DIR=str(tmp_path / "state"),
               TMPDIR=(tmp_path / "TMPDIR").read_text(encoding="utf-8"))
    install_fake_nvidia_smi(tmp_path / "bin", 2, environ=env)  # the fake wins over a real GPU
    env.pop("ACCELFLOW_CONF", None)
    return subprocess.run([sys.executable, "-m", "accelflow", *args], env=env, capture_output=True,
                          text=True, timeout=60)


def _sessions(tmp_path: Path) -> list[psutil.Process]:
    """The session cluster processes (``python -P -m accelflow.runtime.service``) a test started:
    their log is in its state directory (other tests may run clusters meanwhile)."""
    return [p for p in psutil.process_iter(["cmdline"])
            if (p.info["cmdline"] or [])[1:4] == ["-P", "-m", "accelflow.runtime.service"]
            and any(arg.startswith(str(tmp_path / "state")) for arg in p.info["cmdline"])]


def test_status_and_stop_without_a_session_say_how_to_start_one(tmp_path: Path) -> None:
    for action in ("status", "stop"):
        out = _cli(tmp_path, "cluster", action)
        assert out.returncode == 1
        assert out.stderr == (
            f"accelflow: error: no session cluster is running (state directory {tmp_path / 'state'} "
            "($ACCELFLOW_STATE_DIR)); start one with 'accelflow cluster start'\n"
        )
    assert oct((tmp_path / "state").stat().st_mode & 0o777) == "0o700"


def test_run_with_an_unknown_cluster_url_fails_before_the_script_runs(tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    out = _cli(tmp_path, "run", "--cluster", "http://127.0.0.1:1/", str(script))
    assert out.returncode == 1
    assert out.stderr.startswith(
        "accelflow: error: --cluster http://127.0.0.1:1/: no session cluster of this user serves that URL (running: none;"
    )
    assert not (tmp_path / "ran").exists()


def test_start_with_a_bad_config_starts_nothing(tmp_path: Path) -> None:
    out = _cli(tmp_path, "cluster", "start", "-D", "rest.port=http")
    assert out.returncode == 2
    assert "rest.port" in out.stderr and "http" in out.stderr
    assert _sessions(tmp_path) == []
    assert not list(tmp_path.glob("state/session-*.json"))


def test_a_cluster_that_cannot_start_reports_its_log_and_leaves_no_process(tmp_path: Path) -> None:
    out = _cli(
        tmp_path, "cluster", "start", "-D", "rest.port=0", "-D", "external-resources=gpu",
        "-D", "external-resource.gpu.amount=3", "-D", "external-resource.gpu.driver-factory.class=gpu",
        "-D", f"external-resource.gpu.param.coordination-file={tmp_path / 'coordination.json'}",
    )
    assert out.returncode == 1, out.stderr
    assert out.stderr.startswith("accelflow: error: the session cluster did not start (exit code 1):")
    assert "taskexecutor-1 could not start" in out.stderr  # the TaskExecutor's own message, from the log
    assert _sessions(tmp_path) == []
    assert not list((tmp_path / "state").glob("session-*.json"))


def _stranger() -> subprocess.Popen[bytes]:
    """An unrelated process of this user: what a reused pid belongs to."""
    return subprocess.Popen([sys.executable, "-c", "import time; time.sleep(120)"])


def _plant(tmp_path: Path, pid: int, **fields: object) -> Path:
    """A state file left by a session cluster that died, naming ``pid``."""
    state = tmp_path / "state"
    state.mkdir(mode=0o700, exist_ok=True)
    path = state / f"session-{pid}.json"
    info = {"pid": pid, "url": "http://127.0.0.1:1/", "socket": str(tmp_path / "gone.sock"),
            "authkey": "00" * 32, "started": 0.0, "log": str(tmp_path / "log"), **fields}
    path.write_text(json.dumps(info), encoding="utf-8")
    path.chmod(0o600)
    return path


def test_stop_with_a_stale_state_file_signals_no_stranger(tmp_path: Path) -> None:
    session_cmdline = [sys.executable, "-m", "accelflow.runtime.service", "--log", str(tmp_path / "log")]
    stranger = _stranger()
    try:
        me = psutil.Process(stranger.pid)
        cases = {  # the pid was reused: another start time; or the same start time, another command
            "start time": {"create_time": me.create_time() - 1000, "cmdline": me.cmdline()},
            "command line": {"create_time": me.create_time(), "cmdline": session_cmdline},
        }
        for what, fields in cases.items():
            path = _plant(tmp_path, stranger.pid, token="t" * 32, **fields)
            out = _cli(tmp_path, "cluster", "stop")
            assert out.returncode == 1, what
            assert out.stderr.startswith(
                f"accelflow: removed the stale state file {path}: its session cluster at "
                f"http://127.0.0.1:1/ is gone (pid {stranger.pid} now belongs to another process ("
            ), (what, out.stderr)
            assert "nothing was signalled\n" in out.stderr
            assert "no session cluster is running" in out.stderr
            assert not path.exists()
            assert stranger.poll() is None and me.status() != psutil.STATUS_STOPPED, what
        # a state file of an older accelflow (no start time): ignored, never signalled
        path = _plant(tmp_path, stranger.pid)
        out = _cli(tmp_path, "cluster", "stop")
        assert out.returncode == 1
        assert f"accelflow: ignored {path}: not a session state file of this accelflow version" in out.stderr
        assert stranger.poll() is None
    finally:
        stranger.kill()
        stranger.wait()


def test_every_cluster_action_has_a_help_description(tmp_path: Path) -> None:
    for action, says in (("start", "Ctrl-C while it starts stops what was started"),
                         ("status", "free slots and device shares"),
                         ("stop", "wait until no process of the cluster is left")):
        out = _cli(tmp_path, "cluster", action, "--help")
        assert out.returncode == 0, out.stderr
        assert says in " ".join(out.stdout.split()), (action, out.stdout)
        assert "accelflow cluster start --conf conf/accelflow.yaml" in out.stdout  # the examples


SLOW_DISCOVERY = """\
#!/bin/sh
touch "$DISCOVERING"
exec sleep 120
"""


def test_ctrl_c_while_the_cluster_starts_stops_all_it_started(tmp_path: Path) -> None:
    """Ctrl-C once a TaskExecutor is running GPU discovery (a script that takes two minutes):
    the session process, its zygote, TaskExecutor, forkserver and the script all stop, and
    no state file is left; before, they all kept running (the GPUs held) and the command
    only said 'interrupted'."""
    script = tmp_path / "discover.sh"
    script.write_text(SLOW_DISCOVERY, encoding="utf-8")
    script.chmod(0o755)
    marker = tmp_path / "discovering"
    env = dict(os.environ, ACCELFLOW_STATE_DIR=str(tmp_path / "state"), DISCOVERING=str(marker))
    env.pop("ACCELFLOW_CONF", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelflow", "cluster", "start", "-D", "rest.port=0",
         "-D", "external-resources=gpu", "-D", "external-resource.gpu.amount=1",
         "-D", "external-resource.gpu.driver-factory.class=gpu",
         "-D", f"external-resource.gpu.param.discovery-script.path={script}",
         "-D", "external-resource.gpu.param.discovery-script.timeout=120 s"],
        env=env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    started: list[psutil.Process] = []
    try:
        deadline = time.monotonic() + 60
        while not marker.exists():
            assert proc.poll() is None and time.monotonic() < deadline, proc.communicate()
            time.sleep(0.02)
        (session,) = _sessions(tmp_path)
        started += [session, *session.children(recursive=True)]
        assert any(p.cmdline()[-2:] == ["sleep", "120"] for p in started)  # the TaskExecutor's script
        os.killpg(proc.pid, signal.SIGINT)  # Ctrl-C in the terminal
        stdout, stderr = proc.communicate(timeout=90)
        assert proc.returncode == 130, stderr
        assert stdout == ""
        log = next((tmp_path / "state").glob("cluster-*.log"))
        assert stderr.splitlines() == [
            f"accelflow: interrupted: stopping the session cluster that was starting (pid {session.pid})",
            f"accelflow: stopped it: no process of it is left (its log: {log})",
        ]
        _, alive = psutil.wait_procs(started, timeout=10)
        assert alive == [], [p.cmdline() for p in alive]
        assert not list((tmp_path / "state").glob("session-*.json"))
        assert "SIGTERM while starting: stopping the session cluster" in log.read_text(encoding="utf-8")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate()
        for p in started:  # what a failing run left running
            if p.is_running():
                p.kill()
