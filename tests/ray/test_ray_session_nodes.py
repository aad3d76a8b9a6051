"""A session cluster on a two-node Ray cluster loses a node (issue 17.6): the session logs the
lost TaskExecutor, refuses a job that needs its slots naming it, and replaces it once the
node is back; the job then runs.

The nodes are started as in :mod:`test_ray_multinode` (namespaces of their own, the second
with a private ``/tmp``); the session cluster is started with ``accelflow cluster start`` and
jobs are submitted with ``accelflow run --cluster URL``, as users do.
"""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
from ray_jobs import wait_until
from test_ray_multinode import (
    CPUS_PER_NODE, Cluster, _alive_nodes, _free_port, _start_node, _stop, head_command,
    require_namespaces,
    second_node_command,
)

pytestmark = [pytest.mark.slow, pytest.mark.multinode]

JOB = """
from accelflow import Environment
env = Environment({"parallelism.default": 4})
print("RESULT", sorted(env.from_sequence(0, 39).map(lambda i: i + 1).execute_and_collect()))
"""



def _second(cluster: Cluster) -> subprocess.Popen[bytes]:
    return _start_node("second", second_node_command(cluster.address), cluster.tmpdir,
                       Path(cluster.tmpdir, f"second-{len(cluster.nodes)}.log"))


@pytest.fixture
def nodes() -> Iterator[Cluster]:
    require_namespaces()
    tmpdir = tempfile.mkdtemp(prefix="afsn-", dir="/tmp")  # short: Unix socket paths
    port = _free_port()
    cluster = Cluster(f"127.0.0.1:{port}", tmpdir, [])
    try:
        cluster.nodes.append(_start_node("head", head_command(port), tmpdir, Path(tmpdir, "head.log")))
        cluster.nodes.append(_second(cluster))
        deadline = time.monotonic() + 120
        while _alive_nodes(cluster.env(), cluster.address) < 2:
            if any(n.poll() is not None for n in cluster.nodes) or time.monotonic() > deadline:
                pytest.skip("a two-node Ray cluster could not start here")
            time.sleep(1)
        yield cluster
    finally:
        for node in reversed(cluster.nodes):
            _stop(node)
        shutil.rmtree(tmpdir, ignore_errors=True)


def _cli(env: dict[str, str], *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-m", "accelflow", *args], env=env, capture_output=True,
                          text=True, timeout=300)


def test_a_session_replaces_a_taskexecutor_lost_with_its_node(nodes: Cluster, tmp_path: Path) -> None:
    env = {**nodes.env(), "ACCELFLOW_STATE_DIR": str(tmp_path / "state")}
    env.pop("RAY_ADDRESS", None)
    job = tmp_path / "job.py"
    job.write_text(JOB)
    keys = {"execution.target": "ray", "ray.address": nodes.address, "ray.number-taskmanager": 2,
            "taskmanager.numberOfTaskSlots": CPUS_PER_NODE, "ray.placement-timeout": "10 s"}
    out = _cli(env, "cluster", "start", *[a for kv in keys.items() for a in ("-D", f"{kv[0]}={kv[1]}")])
    assert out.returncode == 0, out.stderr
    fields = {ln.split(":", 1)[0]: ln.split()[-1] for ln in out.stdout.splitlines() if ":" in ln}
    url, log = fields["REST API and web UI"], Path(fields["log"])
    try:
        _stop(nodes.nodes.pop())  # the second node, with one of the two TaskExecutors
        lost = wait_until(lambda: re.search(r"(taskexecutor-\d) was lost \(its process, Ray actor or node "
                                             r"died\); starting a replacement", log.read_text()),
                           "the session to log the loss", 120).group(1)
        refused = _cli(env, "run", "--cluster", url, str(job))
        assert refused.returncode != 0
        assert "no free slot for" in refused.stderr, refused.stderr[-3000:]
        assert "(1 TaskExecutor(s) lost and not replaced yet):" in refused.stderr
        assert f"{lost} was lost (its process, Ray actor or node died) at " in refused.stderr
        nodes.nodes.append(_second(nodes))  # the node comes back: the replacement lands there
        wait_until(lambda: "replaced lost TaskExecutor(s); 2 registered" in log.read_text(),
                    "the replacement to register", 240)
        ran = _cli(env, "run", "--cluster", url, str(job))
        assert ran.returncode == 0, ran.stderr[-3000:]
        assert f"RESULT {list(range(1, 41))}" in ran.stdout
        assert log.read_text().count(f"{lost} was lost") == 1
    finally:
        _cli(env, "cluster", "stop", "--cluster", url)
