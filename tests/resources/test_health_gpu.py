"""Issue 29 on a real NVIDIA GPU (marked ``gpu``: skipped where none exists): real NVML event
registration works, real probes agree with nvidia-smi, and the compute-process query sees a
real process holding device memory (needs ``nvidia-ml-py``; the last test CuPy or PyTorch)."""

from __future__ import annotations

import shutil
import subprocess
import sys
import time

import pytest

from accelflow.resources.gpu import discover_gpus
from accelflow.resources.gpu._nvml import open_nvml, query_gpus
from accelflow.resources.gpu._probe import nvml_compute_processes, nvml_probe, smi_compute_processes, smi_probe
from accelflow.resources.gpu._watch import NvmlEventWatcher

pytestmark = pytest.mark.gpu
ALLOC_MIB = 512
HOLDER = {
    "cupy": f"import cupy, time; x = cupy.zeros({ALLOC_MIB} * 2**20, dtype=cupy.uint8); print('up', flush=True); time.sleep(60)",
    "torch": f"import torch, time; x = torch.zeros({ALLOC_MIB} * 2**20, dtype=torch.uint8, device='cuda'); print('up', flush=True); time.sleep(60)",
}


def test_real_nvml_registers_fault_events_and_probes_agree_with_nvidia_smi() -> None:
    pytest.importorskip("pynvml")
    smi = shutil.which("nvidia-smi")
    assert smi is not None
    with open_nvml() as nvml:
        gpus = [g for g in query_gpus(nvml) if not g.is_mig]
        with NvmlEventWatcher(nvml, [g.uuid for g in gpus if g.uuid]) as watcher:
            assert watcher.unwatched == {}, watcher.unwatched
            assert watcher.wait(0.2) is None  # a healthy GPU: NVML_ERROR_TIMEOUT, no event
        by_nvml = nvml_probe(nvml, gpus)
    by_smi = smi_probe(smi, gpus)
    for gpu in gpus:
        assert by_nvml[gpu.index].reachable is True and by_smi[gpu.index].reachable is True
        assert by_nvml[gpu.index].temperature is not None and by_smi[gpu.index].temperature is not None
        assert abs(by_nvml[gpu.index].temperature - by_smi[gpu.index].temperature) <= 10  # type: ignore[operator]
        assert by_nvml[gpu.index].pending == by_smi[gpu.index].pending or None in (
            by_nvml[gpu.index].pending, by_smi[gpu.index].pending)


@pytest.mark.parametrize("backend", ["cupy", "torch"])
def test_the_compute_process_query_sees_a_real_process_holding_memory(backend: str) -> None:
    pytest.importorskip(backend)
    smi = shutil.which("nvidia-smi")
    assert smi is not None
    (gpu, *_) = discover_gpus()
    with subprocess.Popen([sys.executable, "-c", HOLDER[backend]], stdout=subprocess.PIPE, text=True) as holder:
        try:
            assert holder.stdout is not None and holder.stdout.readline() == "up\n"
            deadline = time.monotonic() + 30
            while True:
                found = [p for p in smi_compute_processes(smi) if p.device_uuid == gpu.uuid]
                if any(p.used_memory and p.used_memory >= ALLOC_MIB * 2**20 for p in found) or time.monotonic() > deadline:
                    break
                time.sleep(0.5)
            assert any(p.used_memory and p.used_memory >= ALLOC_MIB * 2**20 for p in found), found
            assert holder.pid in [p.pid for p in found], (holder.pid, found)  # same PID namespace here
            pynvml = pytest.importorskip("pynvml")
            assert pynvml is not None
            with open_nvml() as nvml:
                assert holder.pid in [p.pid for p in nvml_compute_processes(nvml, [gpu])]
        finally:
            holder.kill()
