"""Issue 29.1/29.4: probing GPUs (reachable, pending retirement, temperature) and listing their
compute processes, through the fake ``nvidia-smi`` on PATH and the fake NVML, which agree."""

from __future__ import annotations

import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from accelflow import DiscoveryError
from accelflow.resources import ComputeProcess, DeviceRef, LeftoverCheck, ProbeResult
from accelflow.resources.gpu import GPUDevice
from accelflow.resources.gpu._nvml import open_nvml, query_gpus
from accelflow.resources.gpu._probe import (
    nvml_compute_processes,
    nvml_probe,
    smi_compute_processes,
    smi_probe,
)
from accelflow.testing import FakeComputeApp, FakeGPU, install_fake_nvidia_smi, use_fake_nvml
from accelflow.testing._nvidia_smi import FakeMIGDevice, fake_gpu_uuid

MIB = 2**20
HEALTHY = ProbeResult(True, False, False, 35.0)


@pytest.fixture
def sleeper() -> Iterator[subprocess.Popen[bytes]]:
    """A real process standing for a subtask's leftover on a GPU."""
    process = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(600)"])
    yield process
    process.kill()
    process.wait()


def fleet(pid: int = 4242) -> tuple[list[FakeGPU], list[FakeComputeApp]]:
    gpus = [
        FakeGPU(index=0),
        FakeGPU(index=1, temperature=95, retired_pages_pending=None, remapped_rows_pending=True),
        FakeGPU(index=2, lost=True),
        FakeGPU(index=3, temperature=None, mig_devices=(FakeMIGDevice(uuid="MIG-3a"),)),
    ]
    return gpus, [FakeComputeApp(pid=pid, gpu_uuid=fake_gpu_uuid(0), used_memory=2048),
                  FakeComputeApp(pid=7, gpu_uuid=fake_gpu_uuid(1), used_memory=None)]


def devices(gpus: list[FakeGPU]) -> list[GPUDevice]:
    out = [GPUDevice(index=str(g.index), uuid=g.uuid) for g in gpus[:3]]
    return out + [GPUDevice(index="3:0", uuid="MIG-3a", parent_index="3", parent_uuid=gpus[3].uuid)]


EXPECTED = {
    "0": HEALTHY,
    "1": ProbeResult(True, None, True, 95.0),
    "3:0": ProbeResult(True, False, False, None),  # a MIG unit: its GPU's health
}


def test_nvidia_smi_probes_each_device(tmp_path: Path) -> None:
    gpus, apps = fleet()
    executable = install_fake_nvidia_smi(tmp_path, gpus, compute_apps=apps)
    found = smi_probe(str(executable), devices(gpus))
    assert {k: v for k, v in found.items() if k != "2"} == EXPECTED
    lost = found["2"]
    assert lost.reachable is False
    assert "exit code 15: Unable to determine the device handle for GPU 00000000:12:00.0: GPU is lost" in lost.detail


def test_nvml_probes_each_device_as_nvidia_smi_does(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus, apps = fleet()
    use_fake_nvml(monkeypatch, tmp_path, gpus, compute_apps=apps)
    with open_nvml() as nvml:
        found = nvml_probe(nvml, devices(gpus))
    assert {k: v for k, v in found.items() if k != "2"} == EXPECTED
    assert found["2"] == ProbeResult(False, detail="NVML: GPU is lost")


def test_a_broken_or_missing_nvidia_smi(tmp_path: Path) -> None:
    gpus, _ = fleet()
    broken = install_fake_nvidia_smi(tmp_path, gpus[:1], exit_code=9, stderr="NVIDIA-SMI has failed")
    (result,) = smi_probe(str(broken), devices(gpus)[:1]).values()
    assert result.reachable is False and "NVIDIA-SMI has failed" in result.detail
    (unknown,) = smi_probe(str(tmp_path / "no-such-smi"), devices(gpus)[:1]).values()
    assert unknown.reachable is None and "cannot run" in unknown.detail  # unknown, not failing


def test_compute_processes_from_both_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    gpus, apps = fleet()
    executable = use_fake_nvml(monkeypatch, tmp_path, gpus, compute_apps=apps)
    expected = [ComputeProcess(4242, fake_gpu_uuid(0), 2048 * MIB), ComputeProcess(7, fake_gpu_uuid(1), None)]
    assert smi_compute_processes(str(executable)) == expected
    with open_nvml() as nvml:
        assert nvml_compute_processes(nvml, devices(gpus)[:2]) == expected
    install_fake_nvidia_smi(tmp_path, gpus[:1], exit_code=9, stderr="NVIDIA-SMI has failed")
    with pytest.raises(DiscoveryError, match="failed with exit code 9: NVIDIA-SMI has failed"):
        smi_compute_processes(str(executable))


def test_nvml_and_nvidia_smi_discover_the_same_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from accelflow.resources.gpu._smi import query_gpus as smi_gpus

    gpus = [FakeGPU(index=0), FakeGPU(index=1, memory_total=24576, mig_devices=(FakeMIGDevice(uuid="MIG-1a"),))]
    executable = use_fake_nvml(monkeypatch, tmp_path, gpus)
    with open_nvml() as nvml:
        by_nvml = query_gpus(nvml)
    by_smi = smi_gpus(str(executable))
    assert [(d.index, d.uuid, d.name.split(" MIG")[0] if d.name else None) for d in by_nvml] == [
        (d.index, d.uuid, d.name) for d in by_smi]
    assert by_nvml[0].memory_total_mib == 81920


def test_a_subtasks_leftover_is_killed_and_the_share_held_until_its_memory_is_free(
    tmp_path: Path, sleeper: subprocess.Popen[bytes]
) -> None:
    """A real process holds 2 GiB of GPU 0 after its subtask ended: the check names it to kill,
    keeps the share held, and lets it go once the process is gone; another user's process is
    reported but neither killed nor waited for."""
    gpus, apps = fleet(pid=sleeper.pid)
    executable = str(install_fake_nvidia_smi(tmp_path, gpus, compute_apps=apps))
    now = [0.0]
    check = LeftoverCheck(DeviceRef("gpu", "0", fake_gpu_uuid(0)), lambda pid: pid == sleeper.pid, 30.0,
                          clock=lambda: now[0])
    verdict = check.step(smi_compute_processes(executable))
    assert (verdict.free, verdict.kill) == (False, (sleeper.pid,))
    os.kill(verdict.kill[0], 9)
    sleeper.wait()
    install_fake_nvidia_smi(tmp_path, gpus, compute_apps=[*apps[1:], FakeComputeApp(pid=99, gpu_uuid=fake_gpu_uuid(0))])
    after = check.step(smi_compute_processes(executable))
    assert after.free and [p.pid for p in after.others] == [99]


def test_a_leftover_that_will_not_go_quarantines_the_device_naming_it() -> None:
    now = [0.0]
    check = LeftoverCheck(DeviceRef("gpu", "0", "GPU-1"), lambda pid: True, 30.0, clock=lambda: now[0])
    held = [ComputeProcess(41, "GPU-1", 6 * 2**30), ComputeProcess(42, "GPU-1", None), ComputeProcess(43, "GPU-2")]
    assert check.step(held).fault is None
    now[0] = 45.0
    verdict: Any = check.step(held)
    assert verdict.kill == (41, 42)
    assert verdict.fault.reason == "memory still held 45 s after its subtasks ended: pid 41 (6 GiB), pid 42 (memory unknown)"
    assert (verdict.fault.kind, verdict.fault.fail_subtasks, verdict.fault.needs_reset) == ("hardware", False, True)
