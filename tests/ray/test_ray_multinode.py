"""Issue 17 on a real two-node Ray cluster started on this machine.

The head (``--node-ip-address=127.0.0.1``) shares this machine's filesystem with the client;
the second node runs in a mount namespace of its own with a private ``/tmp``, like a separate
machine. Each node runs in a PID namespace of its own too, so stopping it (``ray stop --force``
inside it, then ending the namespace) touches no other Ray instance on this machine, and a
``RAY_TMPDIR`` of the cluster's own keeps its address file away from other users' ``ray.init()``.
Needs root (``unshare``) and the ``ray`` command; skipped with the reason otherwise.

Every job runs in a fresh client process: the tests' own Ray connection (conftest) would
otherwise be reused by the launcher.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

pytestmark = [pytest.mark.slow, pytest.mark.multinode]

RAY = Path(sys.executable).with_name("ray")
CPUS_PER_NODE = 2


@dataclass
class Cluster:
    address: str
    tmpdir: str
    nodes: list[subprocess.Popen[bytes]]

    def env(self) -> dict[str, str]:
        """The environment of a client process of this cluster."""
        return {**os.environ, "RAY_TMPDIR": self.tmpdir, "RAY_AUTH_MODE": "disabled"}


def _private_tmp() -> str:
    """Shell commands that give this mount namespace an empty ``/tmp`` of its own, like a
    separate machine's, keeping the code visible as a machine with it installed would: a
    checkout or virtual environment that lives under ``/tmp`` is bound back in place."""
    keep = sorted({str(p) for p in (Path(__file__).resolve().parents[2], Path(sys.prefix).resolve())
                   if str(p).startswith("/tmp/")})
    steps = []
    for i, path in enumerate(keep):
        steps.append(f"mkdir -p /run/afmn-keep-{i} && mount --bind {path} /run/afmn-keep-{i}")
    steps.append("mount -t tmpfs tmpfs /tmp")
    for i, path in enumerate(keep):
        steps.append(f"mkdir -p {path} && mount --bind /run/afmn-keep-{i} {path}")
    return " && ".join(steps)


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _start_node(name: str, command: str, tmpdir: str, log: Path) -> subprocess.Popen[bytes]:
    env = {**os.environ, "RAY_TMPDIR": tmpdir, "RAY_AUTH_MODE": "disabled", "AF_NODE": name}
    env.pop("RAY_ADDRESS", None)
    with open(log, "wb") as out:
        return subprocess.Popen(
            ["unshare", "--kill-child=SIGKILL", "--mount", "--pid", "--fork", "--mount-proc",
             "sh", "-c", command], env=env, stdout=out, stderr=subprocess.STDOUT,
            start_new_session=True,
        )


def _alive_nodes(cluster_env: dict[str, str], address: str) -> int:
    probe = ("import ray, sys; ray.init(address=sys.argv[1], log_to_driver=False); "
             "print('NODES', sum(1 for n in ray.nodes() if n['Alive']))")
    try:
        proc = subprocess.run([sys.executable, "-c", probe, address], env=cluster_env,
                              capture_output=True, text=True, timeout=60)
    except subprocess.TimeoutExpired:
        return 0
    lines = [line for line in proc.stdout.splitlines() if line.startswith("NODES ")]
    return int(lines[-1].split()[1]) if lines else 0


def _stop(node: subprocess.Popen[bytes]) -> None:
    """``ray stop --force`` inside the node's namespaces, then end them (by the pid we started)."""
    try:
        import psutil

        inner = psutil.Process(node.pid).children()
        if inner:
            subprocess.run(["nsenter", "-t", str(inner[0].pid), "-m", "-p", str(RAY), "stop", "--force"],
                           capture_output=True, timeout=60)
    except Exception:
        pass
    if node.poll() is None:
        node.send_signal(signal.SIGTERM)  # unshare then SIGKILLs the namespace's first process
        try:
            node.wait(30)
        except subprocess.TimeoutExpired:
            node.kill()
            node.wait(30)


#: the flags every node of the tests' clusters starts with
NODE_FLAGS = f"--node-ip-address=127.0.0.1 --num-cpus={CPUS_PER_NODE} --disable-usage-stats --block"


def require_namespaces() -> None:
    """Skip (saying why) where a second node with a private /tmp cannot start."""
    if os.geteuid() != 0 or shutil.which("unshare") is None or shutil.which("nsenter") is None:
        pytest.skip("a second Ray node needs root and unshare/nsenter (a private /tmp)")
    if not RAY.exists():
        pytest.skip(f"no ray command at {RAY}")


def head_command(port: int) -> str:
    return f"exec {RAY} start --head --port={port} --include-dashboard=false {NODE_FLAGS}"


def second_node_command(address: str) -> str:
    return f"{_private_tmp()} && exec {RAY} start --address={address} {NODE_FLAGS}"


def start_head(prefix: str) -> tuple[Cluster, float]:
    """A head node in its own namespace, alive (the test skips, saying why, when it cannot
    start here); and the deadline the cluster's start-up keeps to. The caller stops it."""
    require_namespaces()
    tmpdir = tempfile.mkdtemp(prefix=prefix, dir="/tmp")  # short: Unix socket paths
    port = _free_port()
    address = f"127.0.0.1:{port}"
    nodes = [_start_node("head", head_command(port), tmpdir, Path(tmpdir, "head.log"))]
    cluster = Cluster(address, tmpdir, nodes)
    deadline = time.monotonic() + 90
    while _alive_nodes(cluster.env(), address) < 1:
        if nodes[0].poll() is not None or time.monotonic() > deadline:
            log = Path(tmpdir, "head.log").read_text(errors="replace")[-2000:]
            stop_cluster(cluster)
            pytest.skip("ray start --head failed here: " + log)
        time.sleep(1)
    return cluster, deadline


def stop_cluster(cluster: Cluster) -> None:
    for node in reversed(cluster.nodes):
        _stop(node)
    shutil.rmtree(cluster.tmpdir, ignore_errors=True)


@pytest.fixture(scope="module")
def two_nodes() -> Iterator[Cluster]:
    cluster, deadline = start_head("afmn-")
    nodes, tmpdir, address = cluster.nodes, cluster.tmpdir, cluster.address
    try:
        nodes.append(_start_node(
            "second", second_node_command(address),
            tmpdir, Path(tmpdir, "second.log"),
        ))
        while _alive_nodes(cluster.env(), address) < 2:
            if nodes[1].poll() is not None or time.monotonic() > deadline:
                pytest.skip("a second Ray node with a private /tmp could not start here: "
                            + Path(tmpdir, "second.log").read_text(errors="replace")[-2000:])
            time.sleep(1)
        yield cluster
    finally:
        stop_cluster(cluster)


JOB = """
import json, os, sys
from accelflow import Environment
conf, target = json.loads(sys.argv[1]), sys.argv[2]
env = Environment({**conf, "parallelism.default": 4})
(env.from_sequence(0, 99)
    .map(lambda i: json.dumps([i, os.environ.get("AF_NODE"),
                               os.path.exists(os.path.join(os.environ["RAY_TMPDIR"], "head.log"))]))
    .sink_to_file(target))
env.execute("two-nodes")
print("DONE")
"""


def run_client(cluster: Cluster, conf: dict[str, Any], target: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run([sys.executable, "-c", JOB, json.dumps(conf), str(target)], env=cluster.env(),
                          capture_output=True, text=True, timeout=300)


def test_subtasks_land_on_both_nodes_and_the_sink_output_is_complete(two_nodes: Cluster) -> None:
    out_dir = Path(tempfile.mkdtemp(prefix="afout-", dir="/tmp"))  # exists on the head only
    try:
        conf = {"execution.target": "ray", "ray.address": two_nodes.address,
                "ray.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": CPUS_PER_NODE}
        proc = run_client(two_nodes, conf, out_dir / "out.jsonl")
        assert "DONE" in proc.stdout, proc.stderr[-4000:]
        rows = [json.loads(line) for line in (out_dir / "out.jsonl").read_text().splitlines()]
        assert sorted(r[0] for r in rows) == list(range(100))  # complete, no duplicates
        assert {r[1] for r in rows} == {"head", "second"}  # source subtasks on both nodes
        assert {(r[1], r[2]) for r in rows} == {("head", True), ("second", False)}  # a private /tmp
        left = sorted(p.name for p in out_dir.iterdir() if not p.name.endswith(".accelflow-lock"))
        assert left == ["out.jsonl"]  # no part file left behind
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


MODULE_JOB = """
import json, sys
sys.path.insert(0, sys.argv[2])
import af17_helper
from accelflow import Environment
conf = json.loads(sys.argv[1])
env = Environment({**conf, "parallelism.default": 4})
print("RESULT", json.dumps(sorted(env.from_sequence(0, 39).map(af17_helper.tag).execute_and_collect())))
"""


def test_a_working_dir_ships_the_jobs_modules_to_the_other_node(two_nodes: Cluster) -> None:
    job_dir = Path(tempfile.mkdtemp(prefix="afwd-", dir="/tmp"))  # exists on the head only
    try:
        (job_dir / "af17_helper.py").write_text(
            "import os\n\ndef tag(i):\n    return [i, os.environ.get('AF_NODE'), os.environ.get('AF_VAR')]\n")
        conf = {"execution.target": "ray", "ray.address": two_nodes.address,
                "ray.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": CPUS_PER_NODE,
                "ray.runtime-env.working-dir": str(job_dir), "ray.runtime-env.env-vars": "AF_VAR=set"}
        proc = subprocess.run([sys.executable, "-c", MODULE_JOB, json.dumps(conf), str(job_dir)],
                              env=two_nodes.env(), capture_output=True, text=True, timeout=300)
        lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
        assert lines, proc.stderr[-4000:]
        rows = json.loads(lines[-1][len("RESULT "):])
        assert sorted(r[0] for r in rows) == list(range(40))
        assert {(r[1], r[2]) for r in rows} == {("head", "set"), ("second", "set")}
    finally:
        shutil.rmtree(job_dir, ignore_errors=True)


def test_an_unset_address_starts_a_local_instance_beside_the_running_cluster(two_nodes: Cluster) -> None:
    out_dir = Path(tempfile.mkdtemp(prefix="afout-", dir="/tmp"))
    try:
        # the cluster's RAY_TMPDIR holds its address file: plain ray.init() would join it
        conf = {"execution.target": "ray", "ray.number-taskmanager": 1,
                "taskmanager.numberOfTaskSlots": 4, "ray.local.num-cpus": 4}
        proc = run_client(two_nodes, conf, out_dir / "out.jsonl")
        assert "DONE" in proc.stdout, proc.stderr[-4000:]
        rows = [json.loads(line) for line in (out_dir / "out.jsonl").read_text().splitlines()]
        assert sorted(r[0] for r in rows) == list(range(100))
        assert {r[1] for r in rows} == {None}  # on neither node of the cluster
    finally:
        shutil.rmtree(out_dir, ignore_errors=True)


NUMPY_JOB = """
import json, os, sys
import numpy as np
from accelflow import Environment
conf = json.loads(sys.argv[1])
env = Environment({**conf, "parallelism.default": 4})
data = np.arange(30_000, dtype=np.int64) * 3
rows = env.from_collection(data, parallelism=4).map(lambda x: [int(x), os.environ.get("AF_NODE")]).execute_and_collect()
print("RESULT", json.dumps(rows))
"""


def test_a_numpy_source_read_on_the_other_node_comes_through_the_object_store(two_nodes: Cluster) -> None:
    # the client's memfd (/proc/<client pid>/fd/N) does not exist on the second node: its
    # source subtasks read the array from Ray's object store, through their actor
    conf = {"execution.target": "ray", "ray.address": two_nodes.address,
            "ray.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": CPUS_PER_NODE}
    proc = subprocess.run([sys.executable, "-c", NUMPY_JOB, json.dumps(conf)], env=two_nodes.env(),
                          capture_output=True, text=True, timeout=300)
    lines = [line for line in proc.stdout.splitlines() if line.startswith("RESULT ")]
    assert lines, proc.stderr[-4000:]
    rows = json.loads(lines[-1][len("RESULT "):])
    assert sorted(r[0] for r in rows) == [3 * i for i in range(30_000)]  # complete, exact
    assert {r[1] for r in rows} == {"head", "second"}  # source subtasks on both nodes
