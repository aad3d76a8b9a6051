"""Device health wired end to end (issue 29 phase 2), on fake GPUs with real processes: a
hardware Xid quarantines the device under a running subtask, which restarts from the latest
checkpoint on the healthy GPU with an exactly-once sink complete and without duplicates; an
application Xid from NVML (the fake's events) restarts it and the device stays (both in place,
the other subtasks rolled back in their processes: issue 28); a crashed
subtask's leftover process is killed before its GPU goes to the replacement."""

from __future__ import annotations

import logging
import sys
import time
from pathlib import Path
from typing import Any

import pytest
from health_jobs import LeavesALeftover, Tagged
from runtime_jobs import CommitLog, Paced, published

from accelflow import Environment, JobClient
from accelflow.testing import fake_gpu_uuid, inject_nvml_event, install_fake_nvml, use_fake_nvidia_smi
from accelflow.scheduling import DeviceKey

pytestmark = pytest.mark.slow
TE = "taskexecutor-1"
N = 4000


def _conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "parallelism.default": 1, "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2,
        "external-resources": "gpu", "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp_path / "coordination.json"),
        "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "restart-strategy.fixed-delay.delay": "0 s",
        **extra,
    }


def _tagged_job(tmp_path: Path, conf: dict[str, Any]) -> tuple[JobClient, Path]:
    out = tmp_path / "out"
    out.mkdir()
    env = Environment(conf)
    (env.from_source(Paced(N, chunk=20, delay=0.01), name="numbers")
        .map(Tagged(), name="tag", resources={"gpu": 1})
        .sink_to(CommitLog(str(out)), name="log"))
    return env.execute_async("tagged"), out


def _running_on(client: JobClient, checkpoints: int = 2) -> str:
    """The GPU the tagging subtask holds once ``checkpoints`` checkpoints completed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = next(iter(client.jobmanager.jobs.values()), None)
        held = [r["address"] for r in client.jobmanager.ledger.statistics() if r["holders"]]
        if job is not None and job.checkpoints.completed >= checkpoints and len(held) == 1:
            return held[0]
        assert client.status() not in ("FAILED", "FINISHED"), client.status()
        time.sleep(0.02)
    raise AssertionError("the job did not run and checkpoint in time")


def _by_attempt(records: list[Any]) -> dict[int, set[str]]:
    gpus: dict[int, set[str]] = {}
    for _, gpu, attempt in records:
        gpus.setdefault(attempt, set()).add(gpu)
    return gpus


def test_a_hardware_xid_moves_the_subtask_to_a_healthy_gpu_exactly_once(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture) -> None:
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 2)
    client, out = _tagged_job(tmp_path, _conf(tmp_path))
    gpu = _running_on(client)
    with caplog.at_level(logging.WARNING, logger="accelflow.runtime"):
        client.jobmanager.inject_fault(TE, gpu, 79)  # the drill: the path of an NVML event
        result = client.wait(120)
    records = published(out)
    assert sorted(x for x, _, _ in records) == list(range(N))  # none lost, none twice
    other = {"0": "1", "1": "0"}[gpu]
    assert result.attempts == 2 and _by_attempt(records) == {0: {gpu}, 1: {other}}
    assert client.jobmanager.ledger.quarantined() == {
        DeviceKey(TE, "gpu", gpu): "Xid 79 (GPU has fallen off the bus)"}
    health = client.jobmanager.state.health[DeviceKey(TE, "gpu", gpu)]
    assert health["state"] == "quarantined" and health["xid_counts"] == {"79": 1}
    assert (f"failed: gpu {gpu} ({fake_gpu_uuid(int(gpu))}) failed: Xid 79 (GPU has fallen off the bus); "
            "quarantined") in caplog.text
    job = next(iter(client.jobmanager.jobs.values()))
    restored = job.checkpoints.restored
    assert restored is not None and restored["id"] >= 2
    # rolled back in place (docs/failover.md): only the subtask of the quarantined GPU moved
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.replaced == ["tag -> log (1/1)"]


def test_an_application_xid_from_nvml_restarts_the_subtask_and_the_gpu_stays(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env: dict[str, str] = {"PATH": str(Path(sys.executable).parent) + ":/usr/bin:/bin"}
    shim = install_fake_nvml(tmp_path / "gpus", 2, environ=env)
    for name in ("PATH", "PYTHONPATH", "ACCELFLOW_FAKE_NVML", "ACCELFLOW_GPU_DISCOVERY"):
        if name in env:
            monkeypatch.setenv(name, env[name] if name != "PYTHONPATH" else f"{shim}")
    monkeypatch.syspath_prepend(str(shim))
    monkeypatch.delitem(sys.modules, "pynvml", raising=False)
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    client, out = _tagged_job(tmp_path, _conf(tmp_path))
    gpu = _running_on(client)
    inject_nvml_event(tmp_path / "gpus", fake_gpu_uuid(int(gpu)), xid=13)  # "Graphics Engine Exception"
    result = client.wait(120)
    records = published(out)
    assert sorted(x for x, _, _ in records) == list(range(N))
    assert result.attempts == 2 and client.jobmanager.ledger.quarantined() == {}
    # restarted alone, in place, on the same GPU
    assert [f.path for f in next(iter(client.jobmanager.jobs.values())).failovers] == ["in-place"]
    assert _by_attempt(records) == {0: {gpu}, 1: {gpu}}
    health = client.jobmanager.state.health[DeviceKey(TE, "gpu", gpu)]
    assert health["state"] == "healthy" and [h["xid"] for h in health["history"]] == [13]


def test_a_crashed_subtask_s_leftover_is_killed_before_its_gpu_goes_to_the_replacement(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bin_dir = tmp_path / "bin"
    use_fake_nvidia_smi(monkeypatch, bin_dir, 1)
    (tmp_path / "out").mkdir()
    env = Environment(_conf(tmp_path, **{"external-resource.gpu.amount": 1,
                                         "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 1}))
    (env.from_source(Paced(200, chunk=10, delay=0.01), name="numbers")
        .map(LeavesALeftover(str(tmp_path), str(bin_dir)), name="crashes", resources={"gpu": 1})
        .sink_to(CommitLog(str(tmp_path / "out")), name="log"))
    result = env.execute_async("leftover").wait(120)
    assert result.attempts == 2
    assert (tmp_path / "seen").read_text() == "gone"  # killed, and the GPU waited for it
