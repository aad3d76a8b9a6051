"""``map_batches(device="cuda")`` and the GPU resource on a real NVIDIA GPU, with real CuPy and
PyTorch (each test skips without its library). Marked ``gpu``: skipped where no GPU exists."""

from __future__ import annotations

import os
from typing import Any

import numpy as np
import pytest

from accelflow import Environment, RuntimeContext

pytestmark = pytest.mark.gpu

GPU_CONF = {
    "external-resources": "gpu",
    "external-resource.gpu.amount": 1,
    "external-resource.gpu.driver-factory.class": "gpu",
}


class Project:
    """``x @ W`` on the device; fails unless the batch arrived as a device array."""

    def __init__(self, backend: str, w: np.ndarray[Any, Any]) -> None:
        self.backend, self.w = backend, w

    def open(self, ctx: RuntimeContext) -> None:
        self.xp = __import__(self.backend)
        if self.backend == "torch":
            self.w_dev = self.xp.from_numpy(self.w).cuda()
        else:
            self.w_dev = self.xp.asarray(self.w)

    def map_batch(self, x: Any) -> Any:
        if self.backend == "torch":
            assert isinstance(x, self.xp.Tensor) and x.is_cuda, type(x)
        else:
            assert isinstance(x, self.xp.ndarray), type(x)
        return x @ self.w_dev


@pytest.mark.parametrize("backend", ["cupy", "torch"])
@pytest.mark.parametrize("prefetch", [1, 3])
def test_batches_on_the_gpu_give_what_numpy_gives_in_order(backend: str, prefetch: int) -> None:
    pytest.importorskip(backend)
    rng = np.random.default_rng(7)
    x = rng.standard_normal((20_000, 32)).astype(np.float32)
    w = rng.standard_normal((32, 4)).astype(np.float32)
    env = Environment({"parallelism.default": 1})
    out = env.from_collection(x).map_batches(Project(backend, w), batch_size=1000, device="cuda",
                                             prefetch=prefetch, device_backend=backend)
    got = out.execute_and_collect_batch()
    assert isinstance(got, np.ndarray) and got.shape == (20_000, 4)
    expected = x.astype(np.float64) @ w.astype(np.float64)
    assert np.linalg.norm(got - expected) / np.linalg.norm(expected) < 1e-3  # tf32 at worst


@pytest.mark.parametrize("backend", ["cupy", "torch"])
def test_tuple_batches_move_their_numbers_to_the_gpu_and_keep_their_strings(backend: str) -> None:
    pytest.importorskip(backend)

    def double(batch: Any) -> Any:
        numbers, names = batch
        assert not isinstance(numbers, np.ndarray) and isinstance(names, np.ndarray)
        return numbers * 2, names

    env = Environment({"parallelism.default": 1})
    source = [(i, f"n{i}") for i in range(5000)]  # batches of two columns: int64 and str
    got = env.from_collection(source).map_batches(double, batch_size=512, device="cuda",
                                                  device_backend=backend).execute_and_collect()
    assert sorted(got) == [(2 * i, f"n{i}") for i in range(5000)]


class WhichGpu:
    """Each subtask reports its assigned GPU's UUID and the UUID of the CUDA device it sees."""

    def open(self, ctx: RuntimeContext) -> None:
        import torch

        (info,) = ctx.get_external_resource_infos("gpu")
        self.assigned = info.get_property("uuid") or ""
        self.seen = str(torch.cuda.get_device_properties(0).uuid)
        self.visible = os.environ.get("CUDA_VISIBLE_DEVICES", "")
        self.subtask = ctx.index_of_this_subtask

    def map_batch(self, x: Any) -> Any:
        return [(self.subtask, self.assigned, self.seen, self.visible, int(v)) for v in x.cpu()]


def test_each_subtask_computes_on_the_gpu_the_scheduler_assigned_it() -> None:
    pytest.importorskip("torch")
    env = Environment(dict(GPU_CONF, **{"taskmanager.numberOfTaskSlots": 2}))
    out = env.from_sequence(0, 3999, parallelism=2).map_batches(
        WhichGpu(), batch_size=100, parallelism=2, device="cuda", device_backend="torch",
        resources={"gpu": 0.5})
    rows = out.execute_and_collect()
    assert sorted(r[-1] for r in rows) == list(range(4000))
    reports = {r[:4] for r in rows}
    assert {r[0] for r in reports} == {0, 1}  # both subtasks, sharing the one GPU half each
    for _, assigned, seen, visible in reports:
        assert assigned.startswith(("GPU-", "MIG-")), assigned
        assert assigned.removeprefix("GPU-").lower() == seen.lower().removeprefix("gpu-")
        assert visible, "the subtask's CUDA_VISIBLE_DEVICES names its GPU"
    assert set(env.last_result.devices.values()) == {"taskexecutor-1 gpu 0 (0.5)"}
