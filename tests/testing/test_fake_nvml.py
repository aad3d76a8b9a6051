"""Issue 29.3: the fakes behave like the real tools: the fake NVML's errors and values are
nvidia-ml-py's, and the fake nvidia-smi answers the health, remapped-rows and compute-apps
queries with nvidia-smi's formats."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest

from accelflow.testing import FakeComputeApp, FakeGPU, fake_pynvml, install_fake_nvidia_smi, use_fake_nvml
from accelflow.testing._nvidia_smi import fake_gpu_uuid


def smi(executable: Path, *args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(executable), *args], capture_output=True, text=True, check=False)


def test_nvml_errors_are_nvidia_ml_pys(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    error = fake_pynvml.NVMLError(fake_pynvml.NVML_ERROR_TIMEOUT)
    assert isinstance(error, fake_pynvml.NVMLError_Timeout) and error.value == 10 and str(error) == "Timeout"
    assert fake_pynvml.NVMLError_GpuIsLost().value == fake_pynvml.NVML_ERROR_GPU_IS_LOST
    monkeypatch.delenv(fake_pynvml.STATE_ENV_VAR, raising=False)
    with pytest.raises(fake_pynvml.NVMLError_LibraryNotFound):
        fake_pynvml.nvmlInit()  # no fake GPUs anywhere: as a host without the driver
    use_fake_nvml(monkeypatch, tmp_path, 1)
    with pytest.raises(fake_pynvml.NVMLError_Uninitialized):
        fake_pynvml.nvmlDeviceGetCount()
    install_fake_nvidia_smi(tmp_path, 1, exit_code=9)
    with pytest.raises(fake_pynvml.NVMLError_DriverNotLoaded):
        fake_pynvml.nvmlInit()


def test_nvml_reads_the_state_the_test_changes(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvml(monkeypatch, tmp_path, [FakeGPU(index=0, memory_used=1024)],
                  compute_apps=[FakeComputeApp(pid=5, gpu_uuid=fake_gpu_uuid(0), used_memory=2048)])
    fake_pynvml.nvmlInit()
    try:
        handle = fake_pynvml.nvmlDeviceGetHandleByIndex(0)
        assert fake_pynvml.nvmlDeviceGetMemoryInfo(handle).used == 3072 * 2**20
        assert fake_pynvml.nvmlDeviceGetTemperature(handle, fake_pynvml.NVML_TEMPERATURE_GPU) == 35
        install_fake_nvidia_smi(tmp_path, [FakeGPU(index=0, temperature=None, lost=False)])
        with pytest.raises(fake_pynvml.NVMLError_NotSupported):
            fake_pynvml.nvmlDeviceGetTemperature(handle, fake_pynvml.NVML_TEMPERATURE_GPU)
        install_fake_nvidia_smi(tmp_path, [FakeGPU(index=0, lost=True)])
        with pytest.raises(fake_pynvml.NVMLError_GpuIsLost):
            fake_pynvml.nvmlDeviceGetUUID(handle)
    finally:
        fake_pynvml.nvmlShutdown()


def test_nvidia_smi_answers_health_queries_with_units(tmp_path: Path) -> None:
    executable = install_fake_nvidia_smi(
        tmp_path, [FakeGPU(index=0, memory_used=1024), FakeGPU(index=1, retired_pages_pending=None, temperature=None)],
        compute_apps=[FakeComputeApp(pid=5, gpu_uuid=fake_gpu_uuid(0), used_memory=2048)])
    done = smi(executable, "--query-gpu=index,temperature.gpu,retired_pages.pending,memory.used,memory.free",
               "--format=csv")
    assert done.stdout.splitlines() == [
        "index, temperature.gpu, retired_pages.pending, memory.used [MiB], memory.free [MiB]",
        "0, 35, No, 3072 MiB, 78848 MiB",
        "1, [N/A], [N/A], 0 MiB, 81920 MiB",
    ]
    rows = smi(executable, "--query-remapped-rows=gpu_uuid,remapped_rows.pending", "--format=csv,noheader")
    assert rows.stdout.splitlines() == [f"{fake_gpu_uuid(0)}, 0", f"{fake_gpu_uuid(1)}, 0"]
    apps = smi(executable, "--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")
    assert apps.stdout.splitlines() == [f"5, 2048, {fake_gpu_uuid(0)}"]
    bad = smi(executable, "--query-compute-apps=pid,colour", "--format=csv")
    assert (bad.returncode, bad.stderr.strip()) == (2, 'Field "colour" is not a valid field to query.')


def test_a_lost_gpu_fails_nvidia_smi_queries_as_the_real_one(tmp_path: Path) -> None:
    executable = install_fake_nvidia_smi(tmp_path, [FakeGPU(index=0), FakeGPU(index=1, lost=True)])
    done = smi(executable, "--query-gpu=index,uuid", "--format=csv,noheader")
    assert done.returncode == 15
    assert done.stdout.splitlines()[1].startswith(
        "Unable to determine the device handle for GPU 00000000:11:00.0: GPU is lost")
