"""A whole TaskExecutor's death (issue 29, item 4), on fake GPUs with real processes: a subtask
starts a helper that computes on its GPU (in a session of its own, deaf to SIGTERM), its
TaskExecutor is SIGKILLed; the subtask dies with it (the parent-death signal), the helper does
not. The replacement TaskExecutor takes the same GPU and kills the helper before it registers,
so the restarted subtask never opens on a GPU still full of it; when its memory stays, the GPU
is quarantined with a reason naming the helper and the dead TaskExecutor."""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path
from typing import Any

import pytest
from health_jobs import LeavesAnOrphan, alive
from runtime_jobs import CommitLog, Paced, published

from accelflow import Environment, JobClient
from accelflow.scheduling import DeviceKey
from accelflow.testing import use_fake_nvidia_smi

pytestmark = pytest.mark.slow
TE = "taskexecutor-1"


def _run_and_kill(tmp_path: Path, gpus: int, *, stays: bool, **conf: Any) -> tuple[JobClient, int, int]:
    """Start the job, SIGKILL its TaskExecutor once the helper runs; the client, the dead
    TaskExecutor's pid and the helper's."""
    bin_dir = tmp_path / "bin"
    (tmp_path / "out").mkdir()
    env = Environment({
        "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2,
        "external-resources": "gpu", "external-resource.gpu.amount": gpus,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp_path / "coordination.json"),
        "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 3,
        "restart-strategy.fixed-delay.delay": "0 s", **conf,
    })
    (env.from_source(Paced(300, chunk=10, delay=0.02), name="numbers")
        .map(LeavesAnOrphan(str(tmp_path), str(bin_dir), gpus, stays), name="orphans", resources={"gpu": 1})
        .sink_to(CommitLog(str(tmp_path / "out")), name="log"))
    client = env.execute_async("orphan")
    helper_file = tmp_path / "helper.pid"
    deadline = time.monotonic() + 60
    while not helper_file.exists():
        assert time.monotonic() < deadline and client.status() not in ("FAILED", "FINISHED"), client.status()
        time.sleep(0.02)
    te = client.jobmanager.taskexecutors[TE].registration.pid
    os.kill(te, signal.SIGKILL)
    return client, te, int(helper_file.read_text())


def _stop(pid: int) -> None:
    try:
        os.kill(pid, signal.SIGKILL)
    except ProcessLookupError:
        pass


def test_a_dead_taskexecutor_s_leftover_is_killed_before_its_replacement_uses_the_gpu(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 1)
    client, dead, helper = _run_and_kill(tmp_path, 1, stays=False)
    try:
        result = client.wait(120)
        assert result.attempts == 2
        assert (tmp_path / "seen-1").read_text() == "gone"  # killed before attempt 1 opened on the GPU
        assert not alive(helper)
        assert not alive(int((tmp_path / "subtask.pid").read_text()))  # died with its TaskExecutor
        assert client.jobmanager.taskexecutors[TE].registration.pid != dead
        assert client.jobmanager.ledger.quarantined() == {}
        assert sorted(x for x, _, attempt in published(tmp_path / "out") if attempt == 1) == list(range(300))
    finally:
        _stop(helper)


def test_a_dead_taskexecutor_s_leftover_whose_memory_stays_quarantines_the_gpu_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", 2)
    client, dead, helper = _run_and_kill(
        tmp_path, 2, stays=True, **{"external-resource.gpu.param.health.memory-release-timeout": "500 ms"})
    try:
        client.wait(120)
        gpu = (tmp_path / "gpu").read_text()
        quarantined = client.jobmanager.ledger.quarantined()
        assert list(quarantined) == [DeviceKey(TE, "gpu", gpu)]
        reason = quarantined[DeviceKey(TE, "gpu", gpu)]
        assert reason.startswith("memory still held ")
        assert f"s after the TaskExecutor that ran them died: pid {helper} (6 GiB) " in reason
        assert reason.endswith(f"(left by the subtasks of TaskExecutor pid {dead})")
        assert not alive(helper)  # killed; the fake nvidia-smi lists its memory for ever
        records = published(tmp_path / "out")
        last = max(attempt for _, _, attempt in records)
        assert last >= 1 and {g for _, g, attempt in records if attempt == last} == {"1" if gpu == "0" else "0"}
        assert sorted(x for x, _, attempt in records if attempt == last) == list(range(300))
    finally:
        _stop(helper)
