"""Device memory requests end to end (issue 29 phase 2), with real processes on fake GPUs: the
TaskExecutors register their GPUs' memory, placement packs requests by it across a mixed fleet
(80 GiB and 24 GiB), each subtask is held to its request (CuPy's pool limit: the fake CuPy of
``test_device_stage`` honours it as CuPy does), and a subtask that exceeds it fails alone with
an error naming its operator, its request and what it held."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import pytest
import test_device_stage

from accelflow import AllocationError, DeviceMemoryExceeded, Environment, RichMapFunction, RuntimeContext
from accelflow.testing import FakeGPU, use_fake_nvidia_smi

pytestmark = pytest.mark.slow
GIB, MIB = 2**30, 2**20
fake_cupy = test_device_stage.fake_cupy  # the fixture, shared


class WhereAmI(RichMapFunction[int, int]):
    """Writes ``[operator, its GPU, the GPU's memory in MiB, its CuPy limit]`` to a file of its
    own in ``folder`` when it opens."""

    def __init__(self, folder: str) -> None:
        self.folder = folder

    def open(self, ctx: RuntimeContext) -> None:
        [gpu] = ctx.get_external_resource_infos("gpu")
        row = [ctx.operator_name, gpu.address, int(gpu.get_property("memory_total") or 0),
               os.environ.get("CUPY_GPU_MEMORY_LIMIT", "")]
        Path(self.folder, f"{ctx.operator_name}-{ctx.index_of_this_subtask}").write_text(json.dumps(row))

    def map(self, value: int) -> int:
        return value


class Allocates(RichMapFunction[int, int]):
    """Allocates 256 KiB on the GPU per record; ``keep``: keeps every array (a leak)."""

    def __init__(self, keep: bool) -> None:
        self.keep = keep

    def open(self, ctx: RuntimeContext) -> None:
        self.kept: list[Any] = []

    def map(self, value: int) -> int:
        import cupy

        array = cupy.empty((256 * 1024,), dtype="uint8")
        if self.keep:
            self.kept.append(array)
        return value


def _conf(tmp_path: Path, slots: int = 4) -> dict[str, Any]:
    return {
        "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": slots,
        "external-resources": "gpu", "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp_path / "coordination.json"),
        "restart-strategy": "none",
    }


@pytest.fixture
def mixed_fleet(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    use_fake_nvidia_smi(monkeypatch, tmp_path / "bin", [
        FakeGPU(index=0, memory_total=81920), FakeGPU(index=1, name="NVIDIA L4", memory_total=24576)])


def test_memory_requests_are_packed_by_each_gpu_s_memory_and_held_to(tmp_path: Path, mixed_fleet: None) -> None:
    env = Environment(_conf(tmp_path))
    rows_in = tmp_path / "rows"
    rows_in.mkdir()
    numbers = env.from_sequence(1, 40, parallelism=1)
    numbers.rebalance().map(WhereAmI(str(rows_in)), name="big", parallelism=1,
                            resources={"gpu": {"memory": "60Gi"}}).add_sink(lambda r: None)
    numbers.rebalance().map(WhereAmI(str(rows_in)), name="small", parallelism=2,
                            resources={"gpu": {"memory": "20Gi"}}).add_sink(lambda r: None)
    env.execute("mixed fleet")
    rows = [json.loads(p.read_text()) for p in sorted(rows_in.iterdir())]
    assert len(rows) == 3
    by_gpu: dict[str, int] = {}
    for operator, gpu, memory_mib, limit in rows:
        asked = {"big": 60 * GIB, "small": 20 * GIB}[operator]
        assert int(limit) == asked  # the subtask is held to what it asked for
        by_gpu[gpu] = by_gpu.get(gpu, 0) + asked
        assert (gpu, memory_mib) in {("0", 81920), ("1", 24576)}
    # the one packing there is: 60 + 20 GiB on the 80 GiB GPU, 20 GiB on the 24 GiB one
    assert by_gpu == {"0": 80 * GIB, "1": 20 * GIB}
    assert {(op, gpu) for op, gpu, _, _ in rows} == {("big", "0"), ("small", "0"), ("small", "1")}


def test_a_request_larger_than_every_gpu_is_refused_at_once_naming_the_largest(
        tmp_path: Path, mixed_fleet: None) -> None:
    env = Environment(_conf(tmp_path))
    env.from_sequence(1, 4).map(WhereAmI(str(tmp_path)), name="huge", resources={"gpu": {"memory": "100Gi"}}).add_sink(lambda r: None)
    with pytest.raises(AllocationError, match=r"no gpu has 100 GiB of memory: the largest is taskexecutor-1: gpu 0 "
                                              r"with 80 GiB") as caught:
        env.execute("too big")
    assert "taskexecutor-1: gpu 1 has 24 GiB free of 24 GiB, 100 GiB needed" in caught.value.reasons


def test_a_subtask_that_exceeds_its_memory_request_fails_alone_naming_it(
        tmp_path: Path, mixed_fleet: None, fake_cupy: Path) -> None:
    env = Environment(_conf(tmp_path))
    numbers = env.from_sequence(1, 400, parallelism=1)
    numbers.rebalance().map(Allocates(keep=False), name="steady", parallelism=1,
                            resources={"gpu": {"memory": "1Mi"}}).add_sink(lambda r: None)
    numbers.rebalance().map(Allocates(keep=True), name="leaky", parallelism=1,
                            resources={"gpu": {"memory": "1Mi"}}).add_sink(lambda r: None)
    with pytest.raises(DeviceMemoryExceeded) as caught:
        env.execute("leak")
    error = caught.value
    assert (error.operator, error.requested, error.used) == ("leaky", MIB, MIB)
    assert "operator 'leaky' asked for gpu: 1 MiB of memory (a limit of 1 MiB on gpu " in str(error)
    assert "it held 1 MiB when it asked for more: OutOfMemoryError: Out of memory allocating 262,144 bytes" in str(error)
    assert "steady" not in str(error).split(" failed")[1]
