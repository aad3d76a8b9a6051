"""End-to-end images/s of the Fashion-MNIST inference job at parallelism 1 and 2, against a
plain NumPy loop over the same files in one process, measured in the same run.

    .venv/bin/python benchmarks/mnist.py [--data-dir DIR] [--repeat 3]

Both sides read the gzip IDX files, preprocess and classify; accelflow's figure includes
cluster start-up (a fresh embedded cluster per job, as `accelflow run` does) and is also
given without it (from the first record on).
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "examples"))

from fashion_mnist_inference import Classify, Preprocess  # noqa: E402
from fashion_mnist_model import DEFAULT_MODEL_PATH, load_model  # noqa: E402

from accelflow import Environment, IdxSource  # noqa: E402
from accelflow.io import find_fashion_mnist, read_labeled_pair  # noqa: E402


def numpy_baseline(images: Path, labels: Path) -> tuple[float, float]:
    started = time.perf_counter()
    x, y = read_labeled_pair(images, labels)
    model = load_model()
    predicted = model.predict(model.preprocess(x))
    elapsed = time.perf_counter() - started
    return len(y) / elapsed, float((predicted == y).mean())


def accelflow_run(images: Path, labels: Path, parallelism: int) -> tuple[float, float, float]:
    env = Environment({"taskmanager.numberOfTaskSlots": parallelism})
    model = str(DEFAULT_MODEL_PATH)
    started = time.perf_counter()
    pairs = (
        env.from_source(IdxSource(images, labels), parallelism=parallelism)
        .map_batches(Preprocess(model), parallelism=parallelism)
        .map_batches(Classify(model, None), parallelism=parallelism)
        .execute_and_collect("bench")
    )
    elapsed = time.perf_counter() - started
    startup = env.last_result.startup_s or 0.0
    accuracy = float(np.mean([p == t for p, t in pairs]))
    return len(pairs) / elapsed, len(pairs) / max(elapsed - startup, 1e-9), accuracy


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir")
    parser.add_argument("--repeat", type=int, default=3, help="best of N runs per figure")
    args = parser.parse_args()
    images, labels = find_fashion_mnist(args.data_dir, splits=("test",)).test
    base = max(numpy_baseline(images, labels) for _ in range(args.repeat))
    print(f"numpy, one process:       {base[0]:>10,.0f} images/s  (accuracy {base[1]:.4f})")
    for p in (1, 2):
        best = max(accelflow_run(images, labels, p) for _ in range(args.repeat))
        print(f"accelflow, parallelism {p}: {best[0]:>10,.0f} images/s  "
              f"ratio {best[0] / base[0]:.2f}x  (without start-up {best[1]:,.0f}/s, "
              f"{best[1] / base[0]:.2f}x; accuracy {best[2]:.4f})")
    return 0


if __name__ == "__main__":
    sys.exit(main())
