"""Records/s of a one-layer classifier over MNIST-like records: accelflow against NumPy.

    .venv/bin/python benchmarks/pipeline.py [--records 200000] [--repeat 3] [--target local|ray]

200,000 records of 784 float32 each (seeded random, MNIST-sized) go through
``argmax(x @ W)`` with ``W`` 784x10, in one run:

* plain NumPy in one process over the whole array: the practical ceiling;
* accelflow, ``map_batches`` at parallelism 1 and 2 (batches of ``pipeline.batch-size``);
* accelflow, a per-record ``map`` at parallelism 2.

Every accelflow job feeds the array with ``env.from_collection(array)`` (read by the source
subtasks chunk by chunk straight out of this process's memory, ``pipeline.array-sharing:
auto``; see ``benchmarks/dataplane.py`` for ``copy``), collects the predictions
with ``execute_and_collect_batch`` (one array) and is checked against NumPy's predictions. Each job starts a
fresh embedded cluster (one TaskExecutor with one slot per subtask), as ``accelflow run``
does. For each job the script prints:

* ``end-to-end``: records / wall time of ``execute_and_collect_batch``, cluster start and stop
  included;
* ``running``: records / (``JobResult.duration_s`` - ``JobResult.startup_s``), the rate once
  the first record is out, which is what the 0.8x target compares with NumPy;
* ``start-up``: ``JobResult.startup_s``, submission to the first record out of a source
  (cluster start, sharing the array, deploying the subtasks).

``--target ray`` runs every accelflow job on the Ray target too (``execution.target: ray``,
one TaskExecutor actor per job), beside the local one in the same run, and prints the
overhead of Ray against local per job. One local Ray instance is started once for the run
(as a running cluster behind ``ray.address`` would be); each job still starts its own
TaskExecutor actor, which counts in its start-up. Ray's worker processes get the BLAS thread
count of the Ray instance's start (``cores // 2``), not the per-job count the local target
gets, since Ray workers do not inherit the client's environment.

Figures are the best of ``--repeat`` runs (the machine may be shared); the median start-up
is printed too.

Threads (the fair choice): every configuration may use every core, and no more.
NumPy's BLAS gets ``cores`` threads in the one NumPy process; an accelflow job at
parallelism *p* gives each subtask ``max(1, cores // p)`` BLAS threads (set through
``OMP_NUM_THREADS``/``OPENBLAS_NUM_THREADS``/``MKL_NUM_THREADS`` before the job's
TaskExecutor starts, which its subtasks inherit). NumPy with one thread is printed too,
from a child process, for reference.
"""

from __future__ import annotations

import os
import sys

_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")
CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def _set_threads(n: int) -> None:
    for var in _THREAD_VARS:
        os.environ[var] = str(n)


if __name__ == "__main__":
    _set_threads(int(os.environ.get("PIPELINE_NUMPY_THREADS", CORES)))  # before NumPy loads BLAS

import argparse  # noqa: E402
import platform  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import time  # noqa: E402
from collections.abc import Callable  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402

from accelflow import Environment  # noqa: E402

FEATURES, CLASSES = 784, 10
TARGET_BATCHES_RATIO = 0.8
TARGET_PER_RECORD = 100_000
TARGET_STARTUP_S = 1.5


def make_data(records: int, seed: int = 0) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
    """MNIST-like inputs (pixels in [0, 1)) and the classifier's weights, seeded."""
    rng = np.random.default_rng(seed)
    x = rng.random((records, FEATURES), dtype=np.float32)
    w = rng.standard_normal((FEATURES, CLASSES), dtype=np.float32)
    return x, w


def numpy_rate(x: np.ndarray[Any, Any], w: np.ndarray[Any, Any], repeat: int) -> tuple[float, np.ndarray[Any, Any]]:
    """Best records/s of ``argmax(x @ w)`` over the whole array in this process."""
    best, predictions = float("inf"), np.empty(0)
    for _ in range(repeat):
        started = time.perf_counter()
        predictions = np.argmax(x @ w, axis=1)
        best = min(best, time.perf_counter() - started)
    return len(x) / best, predictions


def numpy_one_thread_rate(records: int, repeat: int) -> float:
    """The same in a child process whose BLAS has one thread."""
    env = dict(os.environ, PIPELINE_NUMPY_THREADS="1")
    out = subprocess.run(
        [sys.executable, __file__, "--numpy-only", "--records", str(records), "--repeat", str(repeat)],
        env=env, check=True, capture_output=True, text=True,
    )
    return float(out.stdout.strip())


class Classifier:
    """``argmax(batch @ w)``: a batch of rows in, one class per row out."""

    def __init__(self, w: np.ndarray[Any, Any]) -> None:
        self.w = w

    def __call__(self, batch: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        classes: np.ndarray[Any, Any] = np.argmax(batch @ self.w, axis=1)
        return classes


class ClassifyOne:
    """``argmax(x @ w)`` for one record, as a Python int."""

    def __init__(self, w: np.ndarray[Any, Any]) -> None:
        self.w = w

    def __call__(self, x: np.ndarray[Any, Any]) -> int:
        return int(np.argmax(x @ self.w))


@dataclass
class Run:
    end_to_end: float  # records/s, cluster start and stop included
    running: float  # records/s from the first record on
    startup_s: float
    agreement: float  # share of predictions equal to NumPy's


def accelflow_run(x: np.ndarray[Any, Any], expected: np.ndarray[Any, Any], parallelism: int,
                  build: Callable[[Any], Any], target: str = "local") -> Run:
    _set_threads(max(1, CORES // parallelism))  # inherited by the TaskExecutor and subtasks
    try:
        env = Environment({"taskmanager.numberOfTaskSlots": parallelism, "execution.target": target})
        started = time.perf_counter()
        predictions = build(env.from_collection(x, parallelism=parallelism)).execute_and_collect_batch("pipeline")
        elapsed = time.perf_counter() - started
    finally:
        _set_threads(CORES)
    result = env.last_result
    startup = result.startup_s if result.startup_s is not None else result.duration_s
    agreement = float(np.mean(np.asarray(predictions) == expected)) if len(predictions) == len(x) else 0.0
    return Run(len(x) / elapsed, len(x) / max(result.duration_s - startup, 1e-9), startup, agreement)


def best_of(runs: list[Run]) -> tuple[Run, float]:
    best = Run(
        max(r.end_to_end for r in runs), max(r.running for r in runs),
        min(r.startup_s for r in runs), min(r.agreement for r in runs),
    )
    return best, statistics.median(r.startup_s for r in runs)


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--records", type=int, default=200_000, help="records to classify (default 200,000)")
    parser.add_argument("--repeat", type=int, default=5, help="best of N runs per figure (default 5)")
    parser.add_argument("--target", choices=("local", "ray"), default="local",
                        help="'ray': run every job on the Ray target too, beside local (default local)")
    parser.add_argument("--numpy-only", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.records < 1 or args.repeat < 1:
        parser.error("--records and --repeat must be positive")
    x, w = make_data(args.records)
    base, expected = numpy_rate(x, w, max(args.repeat, 5))
    if args.numpy_only:
        print(base)
        return 0
    one_thread = numpy_one_thread_rate(args.records, max(args.repeat, 5))
    print(f"pipeline: {args.records:,} records x {FEATURES} float32 -> argmax(x @ W), W {FEATURES}x{CLASSES}; "
          f"{CORES} cores, Python {platform.python_version()}, NumPy {np.__version__}; best of {args.repeat}")
    print(f"numpy, one process, {CORES} BLAS threads:   {base:>12,.0f} records/s  (the ceiling; ratios below are to it)")
    print(f"numpy, one process, 1 BLAS thread:    {one_thread:>12,.0f} records/s  ({one_thread / base:.2f}x)")
    jobs: list[tuple[str, int, Callable[[Any], Any]]] = [
        ("map_batches, parallelism 1", 1, lambda s: s.map_batches(Classifier(w), parallelism=1)),
        ("map_batches, parallelism 2", 2, lambda s: s.map_batches(Classifier(w), parallelism=2)),
        ("per-record map, parallelism 2", 2, lambda s: s.map(ClassifyOne(w), parallelism=2)),
    ]
    figures: dict[str, Run] = {}
    ray_figures: dict[str, Run] = {}
    targets = ["local"] if args.target == "local" else ["local", "ray"]
    if "ray" in targets:
        _start_ray()
    try:
        for label, parallelism, build in jobs:
            for target in targets:
                best, median_startup = best_of(
                    [accelflow_run(x, expected, parallelism, build, target) for _ in range(args.repeat)]
                )
                (figures if target == "local" else ray_figures)[label] = best
                name = "accelflow," if target == "local" else "accelflow on ray,"
                print(f"{name:<17} {label:<30} running {best.running:>12,.0f} records/s ({best.running / base:.2f}x)  "
                      f"end-to-end {best.end_to_end:>10,.0f} records/s ({best.end_to_end / base:.2f}x)  "
                      f"start-up {best.startup_s:.2f} s (median {median_startup:.2f} s)  "
                      f"agreement with numpy {best.agreement:.4%}")
    finally:
        if "ray" in targets:
            import ray

            ray.shutdown()
    print(_targets(figures, base))
    if ray_figures:
        print(_overhead(figures, ray_figures))
    every = list(figures.values()) + list(ray_figures.values())
    return 0 if all(r.agreement >= 0.999 for r in every) else 1


def _start_ray() -> None:
    """One local Ray instance for the whole run; the Ray launcher joins it."""
    import ray

    _set_threads(max(1, CORES // 2))  # what Ray's worker processes inherit
    try:
        ray.init(num_cpus=max(CORES, 2), include_dashboard=False, log_to_driver=False)
    finally:
        _set_threads(CORES)


def _overhead(local: dict[str, Run], ray: dict[str, Run]) -> str:
    lines = ["ray overhead (ray against local, same job):"]
    for label, r in ray.items():
        loc = local[label]
        lines.append(
            f"  {label:<30} running {r.running / loc.running:.2f}x  end-to-end "
            f"{r.end_to_end / loc.end_to_end:.2f}x  start-up {r.startup_s - loc.startup_s:+.2f} s"
        )
    return "\n".join(lines)


def _targets(figures: dict[str, Run], base: float) -> str:
    batches = figures["map_batches, parallelism 2"]
    per_record = figures["per-record map, parallelism 2"]
    startup = min(r.startup_s for r in figures.values())
    checks = [
        (f"map_batches p=2 running >= {TARGET_BATCHES_RATIO}x numpy", batches.running / base >= TARGET_BATCHES_RATIO,
         f"{batches.running / base:.2f}x"),
        (f"per-record map >= {TARGET_PER_RECORD:,} records/s (running)", per_record.running >= TARGET_PER_RECORD,
         f"{per_record.running:,.0f}/s"),
        (f"per-record map >= {TARGET_PER_RECORD:,} records/s (end-to-end)", per_record.end_to_end >= TARGET_PER_RECORD,
         f"{per_record.end_to_end:,.0f}/s"),
        (f"start-up to first record < {TARGET_STARTUP_S} s", startup < TARGET_STARTUP_S, f"{startup:.2f} s"),
    ]
    return "targets:\n" + "\n".join(f"  {'met   ' if ok else 'MISSED'} {name}: {value}" for name, ok, value in checks)


if __name__ == "__main__":
    sys.exit(main())
