"""Connecting to Ray (issue 17.2, 17.3): an unset ``ray.address`` starts a new local instance
whatever ``RAY_ADDRESS`` says, and a wrong one fails in bounded time naming the address.

Each case runs a job in a fresh Python process: the tests' own Ray connection
(``conftest.ray_cluster``) would otherwise be reused by the launcher."""

from __future__ import annotations

import glob
import os
import shutil
import socket
import subprocess
import sys
import tempfile
from collections.abc import Iterator
from typing import Any

import pytest

from accelflow._errors import DeploymentError
from accelflow.runtime.launchers._ray_connect import gcs_host_port, probe

JOB = """
import json, sys
from accelflow import Environment
conf = json.loads(sys.argv[1])
try:
    print("RESULT", sorted(Environment(conf).from_collection([3, 1, 2]).execute_and_collect()))
except Exception as exc:
    print("ERROR", type(exc).__name__, str(exc).splitlines()[0])
"""


def run_job(conf: dict[str, Any], env: dict[str, str], tmp: str) -> str:
    """The job's ``RESULT``/``ERROR`` line; its temporary files go to ``tmp``."""
    import json

    full_env = {**os.environ, **env, "TMPDIR": tmp, "RAY_TMPDIR": "/tmp"}  # short socket paths
    proc = subprocess.run([sys.executable, "-c", JOB, json.dumps(conf)], env=full_env,
                          capture_output=True, text=True, timeout=240)
    lines = [line for line in proc.stdout.splitlines() if line.startswith(("RESULT", "ERROR"))]
    assert lines, f"no outcome (rc {proc.returncode}):\n{proc.stdout}\n{proc.stderr[-3000:]}"
    return lines[-1]


@pytest.fixture
def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])  # nobody listens there once closed


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port that accepts connections and never answers (not a Ray GCS)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        s.listen(64)
        yield int(s.getsockname()[1])


@pytest.fixture
def private_tmp() -> Iterator[str]:
    """A short temporary directory of the job's own (Unix socket paths are short)."""
    path = tempfile.mkdtemp(prefix="af-", dir="/tmp")
    yield path
    shutil.rmtree(path, ignore_errors=True)


BASE = {"execution.target": "ray", "taskmanager.numberOfTaskSlots": 1, "ray.local.num-cpus": 2}


@pytest.mark.slow
def test_unset_address_starts_a_local_instance_even_with_ray_address_set(
    closed_port: int, private_tmp: str,
) -> None:
    line = run_job(BASE, {"RAY_ADDRESS": f"127.0.0.1:{closed_port}"}, private_tmp)
    assert line == "RESULT [1, 2, 3]"


def test_an_unreachable_address_fails_at_once_naming_it(closed_port: int, private_tmp: str) -> None:
    address = f"127.0.0.1:{closed_port}"
    line = run_job({**BASE, "ray.address": address}, {}, private_tmp)
    assert line.startswith(f"ERROR DeploymentError ray.address '{address}': no Ray cluster answers")
    assert "ray.connect-timeout" in line
    assert not glob.glob(os.path.join(private_tmp, "accelflow-*"))  # no empty work folder left


def test_an_address_that_never_answers_fails_after_the_connect_timeout(
    silent_port: int, private_tmp: str,
) -> None:
    address = f"127.0.0.1:{silent_port}"
    line = run_job({**BASE, "ray.address": address, "ray.connect-timeout": "2 s"}, {}, private_tmp)
    assert line == (f"ERROR DeploymentError ray.address '{address}': the Ray cluster did not "
                    "answer within 2 s (ray.connect-timeout). Check that it is a Ray head's GCS "
                    "address (ray status prints it) and that this host can reach it, or raise "
                    "ray.connect-timeout")
    assert not glob.glob(os.path.join(private_tmp, "accelflow-*"))


def test_probe_names_the_address_and_the_reason(closed_port: int) -> None:
    with pytest.raises(DeploymentError, match=rf"127\.0\.0\.1:{closed_port}.*\(Connection refused"):
        probe(f"ray://127.0.0.1:{closed_port}", 1.0)


@pytest.mark.parametrize(("address", "expected"), [
    ("10.0.0.5:6379", ("10.0.0.5", 6379)),
    ("ray://head:10001", ("head", 10001)),
    ("[::1]:6379", ("::1", 6379)),
    ("head", None),
])
def test_gcs_host_port_reads_the_usual_forms(address: str, expected: Any) -> None:
    assert gcs_host_port(address) == expected

