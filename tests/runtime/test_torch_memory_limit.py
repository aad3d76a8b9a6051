"""PyTorch holds a subtask to its device memory (issue 29, item 3), with real processes on fake
GPUs and the fake ``torch`` of ``accelflow.testing`` (which enforces
``set_per_process_memory_fraction`` as PyTorch's allocator does): a request of 1 GiB on an
8 GiB GPU is a fraction of 1/8, exactly 1 GiB where the driver reserves part of the GPU, a share
is that share; a subtask that leaks past its request fails alone, naming its operator, its
request and what it held."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from torch_jobs import HeldTo, add_leak_job

from accelflow import DeviceMemoryExceeded, Environment
from accelflow.testing import FakeGPU, use_fake_nvidia_smi, use_fake_torch

pytestmark = pytest.mark.slow
GIB, MIB = 2**30, 2**20


def _env(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserved: int = 0) -> Environment:
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", [FakeGPU(index=0, memory_total=8192, memory_reserved=reserved)])
    use_fake_torch(monkeypatch, tmp_path)
    return Environment({
        "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2,
        "external-resources": "gpu", "external-resource.gpu.amount": 1,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp_path / "coordination.json"),
        "restart-strategy": "none",
    })


@pytest.mark.parametrize(("reserved", "resources", "fraction", "held"), [
    (0, {"gpu": {"memory": "1Gi"}}, 1 / 8, GIB),  # 1 GiB of 8
    (512, {"gpu": {"memory": "1Gi"}}, GIB / (7680 * MIB), GIB),  # CUDA sees 7.5 GiB: still 1 GiB
    (512, {"gpu": 0.5}, 0.5, 3840 * MIB),  # a share: half of what CUDA sees
], ids=["request", "request-with-reserve", "share"])
def test_torch_holds_a_subtask_to_its_request_or_share(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch, reserved: int, resources: Any, fraction: float,
        held: int) -> None:
    env = _env(tmp_path, monkeypatch, reserved)
    env.from_sequence(1, 4).map(HeldTo(str(tmp_path), held), name="held", resources=resources).add_sink(lambda r: None)
    env.execute("held")
    row = json.loads((tmp_path / "held").read_text())
    assert row["total"] == (8192 - reserved) * MIB
    assert row["fraction"] == pytest.approx(fraction, rel=1e-12)
    assert row["more"] is False  # exactly its part: held, and not a byte more


def test_a_subtask_that_leaks_past_its_request_fails_alone_naming_it(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    env = _env(tmp_path, monkeypatch)
    add_leak_job(env)
    with pytest.raises(DeviceMemoryExceeded) as caught:
        env.execute("leak")
    error = caught.value
    assert (error.operator, error.requested, error.used) == ("leaky", GIB, GIB)
    assert "operator 'leaky' asked for gpu: 1 GiB of memory (a limit of 1 GiB on gpu 0); it held 1 GiB when it " \
           "asked for more: OutOfMemoryError: CUDA out of memory. Tried to allocate 256.00 MiB. GPU 0 has a total " \
           "capacity of 8.00 GiB" in str(error)
    assert "steady" not in str(error).split(" failed")[1]
