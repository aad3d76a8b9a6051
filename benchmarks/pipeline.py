"""Pipeline throughput: MNIST-like records (784 float32) through a one-layer classifier
(argmax of x @ W), in one run: accelflow map_batches at parallelism 1 and 2, per-record map,
and plain NumPy in one process (the practical ceiling). Prints records/s, the ratio to NumPy
and cluster start-up to first record.

    OPENBLAS_NUM_THREADS=1 .venv/bin/python benchmarks/pipeline.py [--records 200000]
"""

from __future__ import annotations

import argparse
import os
import sys
import time

os.environ.setdefault("OPENBLAS_NUM_THREADS", "1")  # one BLAS thread per process, both sides
os.environ.setdefault("OMP_NUM_THREADS", "1")

import numpy as np  # noqa: E402

from accelflow import Environment  # noqa: E402

W = np.random.default_rng(0).standard_normal((784, 10)).astype(np.float32)


def classify_batch(x: np.ndarray) -> np.ndarray:  # type: ignore[type-arg]
    return np.argmax(x @ W, axis=1)


def classify_one(x: np.ndarray) -> int:  # type: ignore[type-arg]
    return int(np.argmax(x @ W))


def run(data: np.ndarray, parallelism: int, batched: bool) -> tuple[float, float]:  # type: ignore[type-arg]
    env = Environment({"taskmanager.numberOfTaskSlots": parallelism})
    stream = env.from_collection(data, parallelism=parallelism)
    out = (stream.map_batches(classify_batch, parallelism=parallelism, batch_size=4096)
           if batched else stream.map(classify_one, parallelism=parallelism))
    started = time.perf_counter()
    results = out.execute_and_collect("pipeline")
    elapsed = time.perf_counter() - started
    assert len(results) == len(data)
    return len(data) / elapsed, env.last_result.startup_s or 0.0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000)
    args = parser.parse_args()
    data = np.random.default_rng(1).standard_normal((args.records, 784)).astype(np.float32)
    started = time.perf_counter()
    classify_batch(data)
    numpy_rate = args.records / (time.perf_counter() - started)
    print(f"numpy one process:          {numpy_rate:>12,.0f} records/s")
    for label, p, batched in (("map_batches p=1", 1, True), ("map_batches p=2", 2, True),
                              ("per-record map p=1", 1, False)):
        rate, startup = run(data, p, batched)
        print(f"accelflow {label:<18} {rate:>12,.0f} records/s  {rate / numpy_rate:5.2f}x numpy"
              f"  start-up to first record {startup:.2f} s")
    return 0


if __name__ == "__main__":
    sys.exit(main())
