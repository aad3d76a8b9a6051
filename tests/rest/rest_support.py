"""A real session cluster for the REST contract tests: started with ``accelflow cluster start``
(a detached process with real TaskExecutor processes), fake GPUs from an honest fake
``nvidia-smi`` first on ``PATH``, and its own state directory; stopped with ``accelflow
cluster stop``, after which no process of it may remain.
"""

from __future__ import annotations

import http.client
import json
import os
import subprocess
import sys
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable
from pathlib import Path
from typing import Any

import psutil

from accelflow.testing import install_fake_nvidia_smi

HERE = Path(__file__).parent
if str(HERE) not in sys.path:  # rest_jobs, for jobs submitted from the tests
    sys.path.insert(0, str(HERE))


class Session:
    """A running session cluster and a small HTTP client for its REST API."""

    def __init__(self, env: dict[str, str], tmp: Path, definitions: dict[str, Any],
                 preexec: Callable[[], None] | None = None) -> None:
        self.env, self.tmp = env, tmp
        self.coordination = Path(definitions["external-resource.gpu.param.coordination-file"])
        args = [a for key, value in definitions.items() for a in ("-D", f"{key}={value}")]
        out = cli(env, "cluster", "start", *args, preexec=preexec)
        assert out.returncode == 0, out.stderr
        line = {ln.split(":", 1)[0]: ln.split()[-1] for ln in out.stdout.splitlines() if ":" in ln}
        self.url = line["REST API and web UI"]
        self.ui_url = line["open the web UI at"]
        self.token: str = line["REST token"]
        self.log = Path(line["log"])
        self.pid = int(out.stdout.split("(pid ")[1].split(")")[0])
        assert self.ui_url == f"{self.url}?token={self.token}"
        assert self.token == definitions.get("rest.token", self.token)

    def request(self, path: str, method: str = "GET", token: str | None = None) -> tuple[int, Any]:
        """(status, parsed JSON or text) of one request; sends the session's token if any."""
        token = token if token is not None else self.token
        req = urllib.request.Request(self.url.rstrip("/") + path, method=method)
        if token:
            req.add_header("Authorization", f"Bearer {token}")
        try:
            with urllib.request.urlopen(req, timeout=10) as resp:
                status, body, ctype = resp.status, resp.read(), resp.headers["Content-Type"]
        except urllib.error.HTTPError as err:
            status, body, ctype = err.code, err.read(), err.headers["Content-Type"]
            err.close()
        return status, json.loads(body) if ctype == "application/json" else body.decode()

    def raw(self, path: str, method: str = "GET", headers: dict[str, str] | None = None,
            body: bytes | None = None) -> tuple[int, Any]:
        """One request with exactly these headers (``Host`` too, when given; no token unless
        given): what a browser or an attacker sends."""
        where = urllib.parse.urlsplit(self.url)
        conn = http.client.HTTPConnection(where.hostname or "", where.port, timeout=10)
        try:
            conn.request(method, path, body=body, headers=headers or {})
            resp = conn.getresponse()
            data, ctype = resp.read(), resp.headers["Content-Type"]
            return resp.status, json.loads(data) if ctype == "application/json" else data.decode()
        finally:
            conn.close()

    def get(self, path: str) -> Any:
        status, body = self.request(path)
        assert status == 200, (path, body)
        return body

    def devices(self, resource: str = "gpu") -> dict[str, dict[str, Any]]:
        """``"taskexecutor-1/0"`` → device of ``GET /v1/taskexecutors``."""
        return {
            f"{te['id']}/{d['address']}": d
            for te in self.get("/v1/taskexecutors")["taskexecutors"]
            for r in te["resources"] if r["name"] == resource for d in r["devices"]
        }

    def processes(self) -> list[psutil.Process]:
        root = psutil.Process(self.pid)
        return [root, *root.children(recursive=True)]

    def stop(self) -> None:
        out = cli(self.env, "cluster", "stop", "--cluster", self.url)
        assert out.returncode == 0, out.stderr


def cli(env: dict[str, str], *args: str, timeout: float = 60,
        preexec: Callable[[], None] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelflow", *args], env=env, capture_output=True,
                          text=True, timeout=timeout, preexec_fn=preexec)


def wait_until(condition: Callable[[], Any], what: str, timeout: float = 20) -> Any:
    deadline = time.monotonic() + timeout
    while True:
        value = condition()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.05)


def _environment(tmp: Path, gpus: int) -> dict[str, str]:
    env = dict(os.environ)
    install_fake_nvidia_smi(tmp / "bin", gpus, environ=env)  # the fake wins over a real GPU
    env["ACCELFLOW_STATE_DIR"] = str(tmp / "state")
    env["PYTHONPATH"] = os.pathsep.join([str(HERE), *[p for p in sys.path if p]])
    for var in ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER", "ACCELFLOW_CONF"):
        env.pop(var, None)
    return env


def gpu_definitions(tmp: Path, **extra: Any) -> dict[str, Any]:
    return {
        "external-resources": "gpu",
        "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp / "gpu-coordination.json"),
        "taskmanager.numberOfTaskSlots": 4,
        "rest.port": 0,
        **extra,
    }


def start_session(tmp: Path, gpus: int = 2, **extra: Any) -> Session:
    return Session(_environment(tmp, gpus), tmp, gpu_definitions(tmp, **extra))


def start_session_hiding(tmp: Path, *modules: str) -> Session:
    """A session whose processes cannot import ``modules``, as on an install without them:
    a directory first on ``PYTHONPATH`` holds a package of each name that raises ImportError."""
    env = _environment(tmp, 2)
    hidden = tmp / "hidden-modules"
    for name in modules:
        (hidden / name).mkdir(parents=True)
        (hidden / name / "__init__.py").write_text(
            f"raise ImportError({name + ' is not installed (hidden by the test)'!r})\n", encoding="utf-8")
    env["PYTHONPATH"] = os.pathsep.join([str(hidden), env["PYTHONPATH"]])
    return Session(env, tmp, gpu_definitions(tmp))


def start_session_with(tmp: Path, preexec: Callable[[], None]) -> Session:
    """A session whose ``accelflow cluster start`` runs ``preexec`` first (e.g. a lower limit)."""
    return Session(_environment(tmp, 2), tmp, gpu_definitions(tmp), preexec)


def stop_and_check(session: Session) -> None:
    """``accelflow cluster stop`` leaves no process and no GPU held on the host."""
    processes = session.processes()
    assert len(processes) >= 3  # the session, its TaskExecutor, the forkserver
    session.stop()
    gone, alive = psutil.wait_procs(processes, timeout=10)
    assert alive == [], [p.cmdline() for p in alive]
    if session.coordination.exists():  # absent when discovery failed before taking any GPU
        assert json.loads(session.coordination.read_text(encoding="utf-8"))["allocations"] == []
    assert not list((session.tmp / "state").glob("session-*.json"))
