"""The embedded cluster serves the REST API and UI for the life of its job (``rest.enabled``);
its 401 says where that job's token is (not ``accelflow cluster ...``: issue 25, item 12)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from rest_support import wait_until
from rest_jobs import Slowly, discard, identity

from accelflow import Environment, JobCancelledError
from accelflow.runtime.rest._rest import UNAUTHORIZED_CONFIGURED, UNAUTHORIZED_EMBEDDED

FPGA = {
    "external-resources": "fpga",
    "external-resource.fpga.amount": 2,
    "external-resource.fpga.driver-factory.class": "accelflow.testing:StaticDriverFactory",
    "external-resource.fpga.param.addresses": "0,1",
    "rest.enabled": True,
    "rest.port": 0,
}


def _get(url: str, token: str = "") -> Any:
    request = urllib.request.Request(url, headers={"Authorization": f"Bearer {token}"})
    with urllib.request.urlopen(request, timeout=10) as resp:
        return json.loads(resp.read())


def _unauthorized(url: str) -> str:
    """The error text of a request without the token (a 401)."""
    with pytest.raises(urllib.error.HTTPError) as info:
        _get(url)
    with info.value as err:
        assert err.code == 401
        return str(json.loads(err.read())["error"])


def test_the_embedded_cluster_serves_rest_while_its_job_runs(capsys: pytest.CaptureFixture[str]) -> None:
    env = Environment(FPGA)
    env.from_source(Slowly()).map(identity, name="infer", resources={"fpga": 1}).add_sink(discard)
    client = env.execute_async("embedded")
    try:
        wait_until(lambda: client.rest is not None and client.status() == "RUNNING", "the REST server")
        url, token = client.rest.url, client.rest.token
        error = _unauthorized(url + "v1/jobs")  # a token even when none is configured
        assert error == UNAUTHORIZED_EMBEDDED.format(url=url)
        assert "the link the job printed on its standard error" in error and f"at {url}?token=...'" in error
        assert "cluster start" not in error and "cluster status" not in error
        held = wait_until(lambda: [
            (d["address"], h["subtask"], h["share"]["exact"])
            for te in _get(url + "v1/taskexecutors", token)["taskexecutors"]
            for r in te["resources"] for d in r["devices"] for h in d["holders"]
        ], "a holder")
        assert held == [("0", "infer -> sink (1/1)", "1")]
        assert _get(url + "v1/jobs", token)["jobs"][0]["state"] == "RUNNING"
        assert f"accelflow: REST API and web UI at {url}?token={token}\n" in capsys.readouterr().err
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)
    with pytest.raises(urllib.error.URLError):  # gone with the cluster
        _get(url + "v1/overview")


def test_a_job_with_a_configured_token_names_rest_token_in_its_401() -> None:
    env = Environment({**FPGA, "rest.token": "s3cret"})
    env.from_source(Slowly()).map(identity, name="infer").add_sink(discard)
    client = env.execute_async("embedded with a token")
    try:
        wait_until(lambda: client.rest is not None and client.status() == "RUNNING", "the REST server")
        url = client.rest.url
        error = _unauthorized(url + "metrics")
        assert error == UNAUTHORIZED_CONFIGURED.format(url=url)
        assert "the value of rest.token" in error and "cluster" not in error
        assert _get(url + "v1/jobs", "s3cret")["jobs"][0]["name"] == "embedded with a token"
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)


def test_a_busy_port_is_a_config_error_naming_rest_port() -> None:
    import socket

    from accelflow import ConfigError
    from accelflow.config import config_from
    from accelflow.runtime.rest._rest import RestServer

    with socket.socket() as busy:
        busy.bind(("127.0.0.1", 0))
        busy.listen()
        port = busy.getsockname()[1]
        server = RestServer(None, config_from(values={"rest.port": port}))  # type: ignore[arg-type]
        with pytest.raises(ConfigError, match=rf"rest.port: cannot listen on 127.0.0.1:{port}: .*choose another rest.port \(0 picks a free one\)"):
            server.start()


def test_a_non_loopback_address_prints_a_warning() -> None:
    from accelflow.config import config_from
    from accelflow.runtime.rest._rest import RestServer

    lines: list[str] = []
    server = RestServer(None, config_from(values={"rest.port": 0, "rest.address": "0.0.0.0"}))  # type: ignore[arg-type]
    server.start(announce=lines.append)
    try:
        assert lines[0] == ("accelflow: warning: the REST API listens on 0.0.0.0 (rest.address), reachable "
                            "from other machines; it is plain HTTP: put it behind TLS or use an SSH tunnel")
        assert lines[1] == f"accelflow: REST API and web UI at {server.url}?token={server.token}"
    finally:
        server.stop()


STOPPABLE = """\
import sys
from rest_checkpoint_jobs import CommitLog, Paced, double
from accelflow import Environment
env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "100 ms",
                   "execution.checkpointing.dir": sys.argv[1], "rest.enabled": True, "rest.port": 0})
env.from_source(Paced(10**6, chunk=20, delay=0.01, bounded=False), name="numbers") \\
    .map(double, name="double").sink_to(CommitLog(sys.argv[2]), name="log")
env.execute("numbers")
"""


def test_accelflow_run_of_an_embedded_job_stopped_with_a_savepoint_says_where_and_how_to_resume(
        tmp_path: Path) -> None:
    """Stopped through its REST API (``POST /v1/jobs/{id}/stop``), the job ends FINISHED and
    ``accelflow run`` exits 0; it says where the savepoint is and how to resume from it
    (before, it said nothing at all)."""
    script = tmp_path / "job.py"
    script.write_text(STOPPABLE, encoding="utf-8")
    (tmp_path / "out").mkdir()
    env = {k: v for k, v in os.environ.items() if k != "ACCELFLOW_CONF"}
    env["PYTHONPATH"] = os.pathsep.join([str(Path(__file__).parent), *[p for p in sys.path if p]])
    args = [str(script), str(tmp_path / "checkpoints"), str(tmp_path / "out")]
    proc = subprocess.Popen([sys.executable, "-m", "accelflow", "run", *args], cwd=tmp_path, env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        assert proc.stderr is not None
        announced = proc.stderr.readline()  # accelflow: REST API and web UI at URL?token=TOKEN
        url, token = announced.split()[-1].split("?token=")
        wait_until(lambda: list((tmp_path / "checkpoints").glob("*/chk-*/_metadata")), "a checkpoint", 60)
        body = json.dumps({"targetDirectory": str(tmp_path / "sp")}).encode()
        request = urllib.request.Request(url + "v1/jobs/job-1/stop", data=body, method="POST", headers={
            "Authorization": f"Bearer {token}", "Content-Type": "application/json"})
        with urllib.request.urlopen(request, timeout=10) as resp:
            assert resp.status == 202
        rest = proc.stderr.read()
        assert proc.wait(60) == 0, rest
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    (savepoint,) = (tmp_path / "sp").iterdir()
    assert rest.splitlines() == [
        f"accelflow: job-1 (numbers) was stopped with a savepoint at {savepoint}",
        f"accelflow: resume with: accelflow run -s {savepoint} {' '.join(args)}",
    ]
