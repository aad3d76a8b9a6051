"""Rollback in place on GPUs (issues 27 and 28): a subtask started in a warm process of its
device is watched for hangs as a forked one is, and is failed over in place; a resident
model survives a rollback in place of the subtasks sharing it (it is not opened again).
Fake GPUs and a fake CuPy, real processes."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model, opens, published
from warm_jobs import Model as ResidentModel
from warm_jobs import use_fake_gpus_with_cupy, lines

from accelflow import Environment
from accelflow.connectors.files import FileSink

N = 600


@pytest.fixture
def gpu_env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One TaskExecutor with 2 fake GPUs, a fake CuPy and the warm marker module importable
    by every process; checkpoints every 100 ms, hangs found after 1 s."""
    gpu = use_fake_gpus_with_cupy(monkeypatch, tmp_path, 2)
    monkeypatch.setenv("WARM_MARKER_LOG", str(tmp_path / "marker.log"))
    monkeypatch.setenv("FAKE_CUPY_LOG", str(tmp_path / "cupy.log"))
    (tmp_path / "device").mkdir()
    monkeypatch.setenv("FAKE_CUPY_DEVICE", str(tmp_path / "device"))
    monkeypatch.setenv("FAKE_CUPY_MEMORY", str(64 << 20))
    return {
        **gpu,
        "external-resource.gpu.warm.framework": "cupy",
        "external-resource.gpu.warm.preload": "warm_marker",
        "taskmanager.numberOfTaskSlots": 4,
        "execution.checkpointing.interval": "100 ms",
        "restart-strategy.fixed-delay.delay": "0 s",
        "heartbeat.timeout": "1 s", "heartbeat.interval": "100 ms",
    }


def test_a_subtask_in_a_warm_process_is_found_hung_and_replaced_in_place(gpu_env: dict[str, Any],
                                                                         tmp_path: Path) -> None:
    """The first hang is that of the subtask started in the warm process spawned at the
    cluster's start; its replacement starts in the one spawned for its device meanwhile, and
    hangs too: the watchdog finds that one as well."""
    env = Environment(dict(gpu_env, **{"external-resource.gpu.amount": 1}))
    env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers", parallelism=1) \
        .map_batches(Model(tmp_path, fail="hang", at=200, at2=400), batch_size=10, name="model",
                     resources={"gpu": 1}, parallelism=1) \
        .sink_to(FileSink(tmp_path / "out"), name="files")
    client = env.execute_async("hangs twice")
    result = client.wait(60)
    assert published(tmp_path / "out") == list(range(N))  # exactly once
    failovers = client.jobmanager.jobs[result.job_id].failovers
    assert [f.path for f in failovers] == ["in-place", "in-place"] and all("is hung" in f.cause for f in failovers)
    hung = [int(line.split()[1]) for line in (tmp_path / "failure.log").read_text().splitlines()]
    warm = {int(line.split()[0]) for line in (tmp_path / "marker.log").read_text().splitlines()}
    assert hung[0] in warm and hung[1] in warm and hung[0] != hung[1]  # two warm processes
    assert len(opens(tmp_path)) == 3  # the first subtask, then each replacement


def test_a_resident_model_is_not_opened_again_by_a_rollback_in_place(gpu_env: dict[str, Any],
                                                                     tmp_path: Path) -> None:
    log = str(tmp_path / "resident.log")
    env = Environment(dict(gpu_env, **{"taskmanager.device-pool.size": 0, "external-resource.gpu.warm.framework": "none"}))
    env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers", parallelism=2) \
        .map_batches(ResidentModel(log, scale=1), batch_size=10, resident=True, resources={"gpu": 0.5},
                     name="resident", parallelism=2) \
        .map_batches(Model(tmp_path, fail="raise", at=400), batch_size=10, name="model", parallelism=2) \
        .sink_to(FileSink(tmp_path / "out"), name="files")
    client = env.execute_async("resident")
    result = client.wait(60)
    assert published(tmp_path / "out") == list(range(N))  # exactly once
    assert [f.path for f in client.jobmanager.jobs[result.job_id].failovers] == ["in-place"]
    devices = {o[2] for o in lines(log, "open")}
    assert len(lines(log, "open")) == len(devices)  # one open() per device: none after the rollback
