"""Issue 29's memory requests on a real NVIDIA GPU with real PyTorch (marked ``gpu``: skipped
where none exists; each test skips without PyTorch): PyTorch's own allocator holds a subtask to
its request, and a subtask that leaks past its request fails alone, naming itself. The same jobs
as ``test_torch_memory_limit.py``, which runs them on fake GPUs with the fake ``torch``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from torch_jobs import HeldTo, add_leak_job

from accelflow import DeviceMemoryExceeded, Environment

pytestmark = pytest.mark.gpu
GIB = 2**30


def _env() -> Environment:
    pytest.importorskip("torch")
    return Environment({
        "taskmanager.numberOfTaskSlots": 2,
        "external-resources": "gpu", "external-resource.gpu.amount": 1,
        "external-resource.gpu.driver-factory.class": "gpu",
        "restart-strategy": "none",
    })


@pytest.mark.parametrize("resources", [{"gpu": {"memory": "1Gi"}}, {"gpu": {"memory": "1Gi", "amount": 0.5}}],
                         ids=["request", "request-and-share"])
def test_real_torch_holds_a_subtask_to_its_request(tmp_path: Path, resources: Any) -> None:
    env = _env()
    env.from_sequence(1, 4).map(HeldTo(str(tmp_path), GIB), name="held", resources=resources).add_sink(
        lambda r: None)
    env.execute("held")
    row = json.loads((tmp_path / "held").read_text())
    assert row["fraction"] == pytest.approx(GIB / row["total"], rel=1e-9)  # of what CUDA sees
    assert row["more"] is False  # its 1 GiB was allocated, and not a byte more


def test_a_subtask_that_leaks_past_its_request_on_a_real_gpu_fails_alone() -> None:
    env = _env()
    add_leak_job(env)
    with pytest.raises(DeviceMemoryExceeded) as caught:
        env.execute("leak")
    error = caught.value
    assert (error.operator, error.requested) == ("leaky", GIB)
    assert error.used is not None and 0.75 * GIB <= error.used <= GIB
    assert "OutOfMemoryError" in str(error) and "steady" not in str(error).split(" failed")[1]
