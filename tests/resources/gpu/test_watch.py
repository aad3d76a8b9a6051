"""Issue 29.1: NVML fault events (Xid critical errors, double-bit ECC), registered and waited
for as the device plugin does, on the fake NVML; injected from another process too."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from accelflow.resources.gpu import GPUDevice
from accelflow.resources.gpu._nvml import open_nvml
from accelflow.resources.gpu._watch import NvmlEvent, NvmlEventWatcher, devices_hit
from accelflow.resources.gpu._xid import DOUBLE_BIT_ECC, xid_fault
from accelflow.testing import FakeGPU, inject_nvml_event, install_fake_nvml, use_fake_nvml
from accelflow.testing._nvidia_smi import fake_gpu_uuid

GPU0, GPU1, GPU2 = (fake_gpu_uuid(i) for i in range(3))


def test_xid_and_ecc_events_of_registered_gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvml(monkeypatch, tmp_path, 3)
    with open_nvml() as nvml, NvmlEventWatcher(nvml, [GPU0, GPU1]) as watcher:
        assert watcher.unwatched == {}
        assert watcher.wait(0.05) is None  # NVML_ERROR_TIMEOUT: no event
        inject_nvml_event(tmp_path, GPU2, xid=79)  # not registered: not reported
        inject_nvml_event(tmp_path, GPU1, xid=79)
        inject_nvml_event(tmp_path, GPU0, double_bit_ecc=True)
        assert watcher.wait(1.0) == NvmlEvent(GPU1, xid_fault(79))
        assert watcher.wait(1.0) == NvmlEvent(GPU0, DOUBLE_BIT_ECC)
        assert watcher.wait(0.05) is None


def test_a_lost_gpu_is_watched_by_probes_only(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvml(monkeypatch, tmp_path, [FakeGPU(index=0), FakeGPU(index=1, lost=True)])
    with open_nvml() as nvml, NvmlEventWatcher(nvml, [GPU0, GPU1]) as watcher:
        assert watcher.unwatched == {GPU1: "NVML: GPU is lost"}


def test_an_event_hits_its_gpu_or_every_mig_unit_of_it() -> None:
    whole = GPUDevice(index="0", uuid=GPU0)
    units = [GPUDevice(index=f"1:{n}", uuid=f"MIG-{n}", parent_index="1", parent_uuid=GPU1) for n in range(2)]
    assert devices_hit(NvmlEvent(GPU0, xid_fault(79)), [whole, *units]) == [whole]
    assert devices_hit(NvmlEvent(GPU1, xid_fault(79)), [whole, *units]) == units


def test_an_event_injected_from_another_process_reaches_a_watcher(tmp_path: Path) -> None:
    """A child imports the fake as ``pynvml`` (its folder on PYTHONPATH), discovers the GPUs
    through NVML and waits; this process injects Xid 79, as ``dcgmi test --inject`` would."""
    env = dict(os.environ)
    install_fake_nvml(tmp_path, 2, environ=env)
    child = (
        "import pynvml\n"
        "from accelflow.resources.gpu import discover_gpus\n"
        "from accelflow.resources.gpu._nvml import open_nvml\n"
        "from accelflow.resources.gpu._watch import NvmlEventWatcher\n"
        "print(pynvml.__name__, [d.uuid for d in discover_gpus()], flush=True)\n"
        "with open_nvml() as nvml, NvmlEventWatcher(nvml, [d.uuid for d in discover_gpus()]) as w:\n"
        "    print('ready', flush=True)\n"
        "    print(w.wait(30.0), flush=True)\n"
    )
    with subprocess.Popen([sys.executable, "-c", child], env=env, stdout=subprocess.PIPE, text=True) as process:
        assert process.stdout is not None
        first = process.stdout.readline()
        assert first.split(" ", 1) == ["accelflow.testing.fake_pynvml", f"['{GPU0}', '{GPU1}']\n"]
        assert process.stdout.readline() == "ready\n"
        inject_nvml_event(tmp_path, GPU1, xid=79)
        assert process.stdout.readline().startswith(f"NvmlEvent(uuid='{GPU1}', fault=Fault(reason='Xid 79")
        assert process.wait(timeout=30) == 0
