"""Resident models meet warm processes (issue 27: GPU memory for N resident sharers = one
model): a subtask whose chain's device operators are all resident ships its batches to the
device's host and needs no device context of its own, so the TaskExecutor forks it, never
starts it in a warm process of the device (which makes a CUDA context), and does not count it
in the device's warm pool; a chain with a non-resident device operator still starts warm.

One TaskExecutor with 1 fake GPU, a fake CuPy (which logs ``Device.use`` in each process that
makes the device's context), ``warm.preload: warm_marker``, real processes. The TaskExecutor's
trace (``$ACCELFLOW_STARTUP_TRACE``) says how each subtask started.
"""

from __future__ import annotations

import json
import re
import time
import urllib.request
from pathlib import Path
from typing import Any

import pytest
from warm_jobs import Model, UntilFile, WhereAmI, lines, use_fake_gpus_with_cupy

from accelflow import Environment


@pytest.fixture
def conf(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    gpu = use_fake_gpus_with_cupy(monkeypatch, tmp_path, 1)
    monkeypatch.setenv("WARM_MARKER_LOG", str(tmp_path / "marker.log"))
    monkeypatch.setenv("FAKE_CUPY_LOG", str(tmp_path / "cupy.log"))
    monkeypatch.setenv("ACCELFLOW_STARTUP_TRACE", str(tmp_path / "trace.log"))
    return {
        **gpu,
        "external-resource.gpu.warm.framework": "cupy",
        "external-resource.gpu.warm.preload": "warm_marker",
        "taskmanager.device-pool.size": 1,
        "taskmanager.numberOfTaskSlots": 8,
        "restart-strategy": "none",
    }


def _starts(tmp: Path, chain: int) -> dict[int, list[str]]:
    """How the TaskExecutor started each subtask of ``chain`` (attempt 0): index → its trace
    events, e.g. ``{0: ["subtask forked"]}``."""
    path = tmp / "trace.log"
    found: dict[int, list[str]] = {}
    for line in path.read_text().splitlines() if path.exists() else []:
        start = re.fullmatch(rf"\S+ \d+ (subtask .*) SubtaskKey\(.*attempt=0, chain={chain}, index=(\d+)\)", line)
        if start:
            found.setdefault(int(start[2]), []).append(start[1])
    return found


def _contexts(tmp: Path) -> set[int]:
    """The processes that made the fake GPU's context."""
    path = tmp / "cupy.log"
    return {int(w[0]) for w in (line.split() for line in path.read_text().splitlines()) if w[1:] == ["Device.use"]} \
        if path.exists() else set()


def test_resident_sharers_are_forked_and_only_the_device_host_makes_a_context(conf: dict[str, Any],
                                                                              tmp_path: Path) -> None:
    """Two sharers at ``{"gpu": 0.5}`` of one resident model: both forked (never warm), and no
    warm process is spawned for them: one process made the device's context, the host that
    ran every batch (before: each sharer ran in a warm process with a context of its own)."""
    log = str(tmp_path / "model.log")
    env = Environment(conf)
    out = env.from_sequence(0, 399, parallelism=2).map_batches(
        Model(log), batch_size=50, resident=True, resources={"gpu": 0.5}, parallelism=2, name="shared")
    assert sorted(int(x) for x in out.execute_and_collect()) == [10 * x for x in range(400)]
    assert _starts(tmp_path, 1) == {0: ["subtask forked"], 1: ["subtask forked"]}
    hosts = {int(b[0]) for b in lines(log, "batch")}
    assert len(hosts) == 1 and _contexts(tmp_path) == hosts


def _pools(client: Any) -> list[dict[str, Any]]:
    """The warm pools the embedded cluster's REST API shows (``/v1/overview``)."""
    request = urllib.request.Request(client.rest.url + "v1/overview",
                                     headers={"Authorization": f"Bearer {client.rest.token}"})
    with urllib.request.urlopen(request, timeout=10) as response:
        return list(json.load(response)["device_pools"])


def _chain_ids(client: Any) -> dict[str, int]:
    (job,) = client.jobmanager.jobs.values()
    return {chain.name: chain.id for chain in job.graph.chains}


def test_a_mixed_chain_starts_warm_and_resident_sharers_leave_the_pool_at_its_size(
        conf: dict[str, Any], tmp_path: Path) -> None:
    """One GPU: two resident sharers at 0.25 (forked) and a chain of a resident model and a
    non-resident map at 0.5 (warm: the map computes on the device). The device's pool keeps
    ``taskmanager.device-pool.size`` (1) processes, as for the one warm subtask alone (before:
    the sharers counted, 3)."""
    stop = tmp_path / "stop"
    env = Environment(dict(conf, **{"rest.enabled": True, "rest.port": 0}))
    source = env.from_source(UntilFile(str(stop)), parallelism=2, name="numbers")
    source.map_batches(Model(str(tmp_path / "shared.log")), resident=True, resources={"gpu": 0.25},
                       parallelism=2, name="shared").add_sink(lambda r: None, name="out")
    source.map_batches(Model(str(tmp_path / "mixed.log"), scale=1), resident=True, resources={"gpu": 0.5},
                       parallelism=1, name="model") \
        .map(WhereAmI(str(tmp_path / "where.log"), fail_first=False), resources={"gpu": 0.5}, name="where") \
        .add_sink(lambda r: None, name="sink")
    client = env.execute_async("mixed")
    try:
        deadline = time.monotonic() + 90
        while client.rest is None or not client.jobmanager.jobs:
            assert time.monotonic() < deadline, "the job was never submitted"
            time.sleep(0.05)
        chains = _chain_ids(client)
        shared, mixed = chains["shared -> out"], chains["model -> where -> sink"]
        while not (len(_starts(tmp_path, shared)) == 2 and "subtask warm" in _starts(tmp_path, mixed).get(0, [])
                   and lines(tmp_path / "where.log", "where")
                   and (pools := _pools(client)) and all(p["ready"] == p["size"] for p in pools)):
            assert time.monotonic() < deadline and client.status() == "RUNNING", (client.status(), _starts(
                tmp_path, shared), _starts(tmp_path, mixed))
            time.sleep(0.1)
        assert _starts(tmp_path, shared) == {0: ["subtask forked"], 1: ["subtask forked"]}
        (where,) = lines(tmp_path / "where.log", "where")
        assert where[5] == "warm_marker,cupy"  # the mixed chain ran in a warm process of the GPU
        assert [(p["resource"], p["address"], p["size"]) for p in pools] == [("gpu", "0", 1)]
    finally:
        stop.touch()
    assert client.wait(60).status == "FINISHED"
