"""Flink's ``MatrixVectorMul`` example, ported: random vectors times a fixed matrix on the GPU
each subtask was assigned, every result checked against NumPy.

    accelflow run examples/matrix_vector_mul.py [--vectors N] [--dim D] [--parallelism P]
    accelflow run --conf conf/accelflow.yaml examples/matrix_vector_mul.py

Unlike Flink's version (which takes ``iterator().next()`` of the TaskManager's whole GPU set, so
all subtasks pile onto one GPU), each subtask uses exactly the GPU it was assigned.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import Environment, RichMapFunction, RuntimeContext

sys.path.insert(0, str(Path(__file__).resolve().parent))
from gpu_backend import pick_backend, to_numpy  # noqa: E402


def make_matrix(dim: int, seed: int = 7) -> np.ndarray[Any, Any]:
    return np.random.default_rng(seed).standard_normal((dim, dim)).astype(np.float32)


class Multiply(RichMapFunction[Any, Any]):
    """``matrix @ vector`` on the assigned device; returns (vector, product)."""

    def __init__(self, dim: int, resource: str | None) -> None:
        self.dim, self.resource = dim, resource

    def open(self, ctx: RuntimeContext) -> None:
        gpus = sorted(ctx.get_external_resource_infos(self.resource)) if self.resource else []
        self.xp, how = pick_backend(gpus[0] if gpus else None, self.resource)
        print(f"[{ctx.operator_name} ({ctx.index_of_this_subtask + 1}/"
              f"{ctx.number_of_parallel_subtasks})] {how}", flush=True)
        self.matrix = self.xp.asarray(make_matrix(self.dim))

    def map(self, vector: Any) -> Any:
        return vector, to_numpy(self.matrix @ self.xp.asarray(vector))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--vectors", type=int, default=1000)
    parser.add_argument("--dim", type=int, default=64)
    parser.add_argument("--parallelism", type=int, default=1)
    args = parser.parse_args(argv)
    for name in ("vectors", "dim", "parallelism"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer")
    env = Environment({"taskmanager.numberOfTaskSlots": args.parallelism})
    resource = "gpu" if "gpu" in env.config.external_resources else None
    vectors = np.random.default_rng(1).standard_normal((args.vectors, args.dim)).astype(np.float32)
    results = (
        env.from_collection(vectors, name="vectors")
        .map(Multiply(args.dim, resource), name="multiply", parallelism=args.parallelism,
             resources={resource: 1} if resource else None)
        .execute_and_collect("matrix-vector-mul")
    )
    matrix = make_matrix(args.dim)
    worst = max(float(np.max(np.abs(product - matrix @ v))) for v, product in results)
    ok = len(results) == args.vectors and worst < 1e-3
    print(f"{len(results)} products checked against NumPy: max abs error {worst:.2e}")
    for subtask, devices in sorted(env.last_result.devices.items()):
        print(f"  {subtask}: {devices}")
    print("OK" if ok else "MISMATCH")
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
