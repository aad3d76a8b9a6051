"""The data plane against the bare single-process loop: images through ``map_batches``.

    .venv/bin/python benchmarks/dataplane.py [--million] [--repeat 2] [--skip-channels]

400,000 (``--million``: also 1,000,000) images of 784 uint8 (seeded random, Fashion-MNIST
sized) go through a one-layer NumPy classifier (``argmax(batch @ W)``, W 784x10 float32) in
batches of ``pipeline.batch-size`` (1024), in one run:

* the bare loop: one process, the same function over the same batches of the same array;
* accelflow at parallelism 1 and 2 (``from_collection(images).map_batches(...)`` at the same
  parallelism, so source and classifier chain into one subtask each; results collected).

For each accelflow job it prints:

* ``whole``: images / wall time from ``execute_and_collect_batch()`` to the predictions in
  hand as one array, as the bare loop's
  (cluster start, sharing the array, deploying, running, stopping), and its ratio to the bare
  loop;
* ``running``: images / (``duration_s`` - ``startup_s``), the rate once the first image is out;
* ``start-up``: ``JobResult.startup_s``, submission to the first record out of a source;
  the best job's, and the first job's of this parallelism (its BLAS thread count is new to
  this client, so the job starts a zygote for it: see ``local.start-method``);
* ``peak``: the peak memory of the whole job (client, TaskExecutors, forkservers, subtasks),
  in one more run of its own (reading smaps costs CPU, so that run is not timed), sampled
  every 20 ms as the sum of PSS (proportional set size: a page shared by k processes
  counts 1/k in each, so shared memory is counted once) and as the sum of RSS (shared pages
  counted once per process), against the size of the source array; and once more with the
  images in an ``np.memmap`` (a file in ``/dev/shm``), which subtasks map by its file instead
  of the one copy a plain array costs.

Threads: every process gets one BLAS thread per core it may use (the bare loop all cores,
a subtask at parallelism p ``cores // p``).

The channel micro-benchmark (``--skip-channels`` to leave it out) sends array batches between
two processes over one Unix socket: pickled on the socket (the path before the rings) against
the shared-memory ring of ``accelflow.runtime.subtask._shm`` (the socket carries only offsets).
"""

from __future__ import annotations

import os

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _set_threads(n: int) -> None:
    for var in _THREAD_VARS:
        os.environ[var] = str(n)


if __name__ == "__main__":
    _set_threads(CORES)  # before NumPy loads BLAS

import argparse  # noqa: E402
import multiprocessing  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import sys  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from multiprocessing.connection import Client, Listener  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from accelflow import Environment  # noqa: E402
from accelflow.runtime.subtask._shm import ShmReceiver, ShmSender  # noqa: E402

FEATURES, CLASSES, BATCH = 784, 10, 1024


class Classifier:
    """``argmax(batch @ w)`` over uint8 images."""

    def __init__(self, w: np.ndarray[Any, Any]) -> None:
        self.w = w

    def __call__(self, batch: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        out: np.ndarray[Any, Any] = np.argmax(batch.astype(np.float32) @ self.w, axis=1)
        return out


def bare_loop(images: np.ndarray[Any, Any], fn: Classifier) -> tuple[float, np.ndarray[Any, Any]]:
    started = time.perf_counter()
    out = np.concatenate([fn(images[i:i + BATCH]) for i in range(0, len(images), BATCH)])
    return time.perf_counter() - started, out


class MemorySampler:
    """Peak sum of PSS and of RSS over this process and its descendants."""

    def __init__(self) -> None:
        self.peak_pss = self.peak_rss = 0
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        me = psutil.Process()
        while not self._stop.wait(0.02):
            pss = rss = 0
            for proc in [me, *me.children(recursive=True)]:
                try:
                    info = proc.memory_full_info()
                except (psutil.NoSuchProcess, psutil.AccessDenied, psutil.ZombieProcess):
                    continue
                pss += getattr(info, "pss", info.rss)
                rss += info.rss
            self.peak_pss, self.peak_rss = max(self.peak_pss, pss), max(self.peak_rss, rss)


def accelflow_job(images: np.ndarray[Any, Any], fn: Classifier, p: int,
                  expected: np.ndarray[Any, Any], memory: MemorySampler | None = None) -> dict[str, float]:
    """One job; timed, or with ``memory`` sampled (reading every process's smaps each 20 ms
    costs CPU: a sampled run is not timed)."""
    _set_threads(max(1, CORES // p))  # inherited by the TaskExecutor and its subtasks
    try:
        env = Environment({"taskmanager.numberOfTaskSlots": p})
        if memory is not None:
            memory.start()
        started = time.perf_counter()
        out = env.from_collection(images, parallelism=p).map_batches(fn, parallelism=p).execute_and_collect_batch()
        whole = time.perf_counter() - started
    finally:
        if memory is not None:
            memory.stop()
        _set_threads(CORES)
    result = env.last_result
    assert result is not None and result.startup_s is not None
    if not np.array_equal(out, expected):  # subtask order is the array's order
        raise SystemExit(f"p={p}: predictions differ from the bare loop")
    return {"whole": whole, "running": result.duration_s - result.startup_s, "startup": result.startup_s}


def _receive(address: str, count: int) -> None:
    conn = Client(address, "AF_UNIX", authkey=b"bench")
    receiver = ShmReceiver()
    while receiver.recv(conn) is not None:
        pass


def channel_rate(batch: np.ndarray[Any, Any], ring: bool, count: int) -> float:
    """GB/s of ``count`` batches from this process to a child over one channel."""
    address = f"/tmp/accelflow-bench-{os.getpid()}.sock"
    with Listener(address, "AF_UNIX", authkey=b"bench") as listener:
        child = multiprocessing.get_context("fork").Process(target=_receive, args=(address, count))
        child.start()
        sender = ShmSender(listener.accept(), min_batch=0 if ring else 2**62)
        started = time.perf_counter()
        for _ in range(count):
            sender.send(batch)
        sender.send(None)
        child.join()
        elapsed = time.perf_counter() - started
        sender.close()
    return count * batch.nbytes / elapsed / 1e9


def channels(repeat: int) -> None:
    print("\nchannel micro-benchmark: one producer, one consumer process, best of", repeat)
    for rows, dtype in ((1024, np.uint8), (1024, np.float32), (4096, np.uint8), (4096, np.float32)):
        batch = np.ones((rows, FEATURES), dtype)
        count = max(50, int(400e6 // batch.nbytes))
        pickled = max(channel_rate(batch, False, count) for _ in range(repeat))
        ring = max(channel_rate(batch, True, count) for _ in range(repeat))
        print(f"  {rows:5d} x 784 {np.dtype(dtype).name:7s} ({batch.nbytes / 1e6:5.2f} MB): "
              f"pickled on the socket {pickled:5.2f} GB/s, shared-memory ring {ring:5.2f} GB/s "
              f"({ring / pickled:4.1f}x)")


def images_run(n: int, repeat: int) -> None:
    rng = np.random.default_rng(0)
    images = rng.integers(0, 256, size=(n, FEATURES), dtype=np.uint8)
    fn = Classifier(rng.standard_normal((FEATURES, CLASSES), dtype=np.float32))
    bare_s, expected = min((bare_loop(images, fn) for _ in range(repeat)), key=lambda r: r[0])
    print(f"\n{n:,} images x 784 uint8 ({images.nbytes / 1e6:.0f} MB), batch {BATCH}; best of {repeat}")
    print(f"  bare loop, 1 process, {CORES} BLAS threads: {n / bare_s / 1e3:8.1f}k img/s")
    for p in (1, 2):
        runs = [accelflow_job(images, fn, p, expected) for _ in range(repeat)]
        best = min(runs, key=lambda r: r["whole"])
        running = min(r["running"] for r in runs)
        print(f"  accelflow p={p}: whole {n / best['whole'] / 1e3:8.1f}k img/s ({bare_s / best['whole']:.2f}x)"
              f"  running {n / running / 1e3:8.1f}k img/s ({bare_s / running:.2f}x)"
              f"  start-up {min(r['startup'] for r in runs):.2f} s"
              f" (first job {runs[0]['startup']:.2f} s: it starts the zygote)")
        memory = MemorySampler()
        accelflow_job(images, fn, p, expected, memory)  # one more run, sampled, not timed
        print_memory(memory, images.nbytes, "the client held the array before the job")
    with tempfile.NamedTemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as f:
        images.tofile(f.name)
        np.save(f.name + ".w.npy", fn.w)
        try:  # a fresh client that holds the mapping only (this one holds the plain array too)
            line = subprocess.run([sys.executable, __file__, "--memmap-job", f.name, str(len(images))],
                                  check=True, capture_output=True, text=True).stdout.split()
        finally:
            os.remove(f.name + ".w.npy")
        print("  accelflow p=1, the same images in an np.memmap (shared by its file, never copied), "
              "in a fresh client:")
        memory = MemorySampler()
        memory.peak_pss, memory.peak_rss = int(line[0]), int(line[1])
        print_memory(memory, images.nbytes, "the client held the mapping before the job")


def memmap_job(path: str, n: int) -> None:
    """``--memmap-job``: one sampled p=1 job over the images in the file at ``path`` (it exits
    with an error if the predictions differ from the bare loop's); prints peak PSS and RSS."""
    images = np.memmap(path, dtype=np.uint8, mode="r", shape=(n, FEATURES))
    fn = Classifier(np.load(path + ".w.npy"))
    _, expected = bare_loop(images, fn)
    memory = MemorySampler()
    accelflow_job(images, fn, 1, expected, memory)
    print(memory.peak_pss, memory.peak_rss)


def print_memory(memory: MemorySampler, nbytes: int, note: str) -> None:
    print(f"      peak memory of the whole job: PSS {memory.peak_pss / 1e6:6.0f} MB "
          f"({memory.peak_pss / nbytes:.2f}x the array), RSS {memory.peak_rss / 1e6:6.0f} MB "
          f"({memory.peak_rss / nbytes:.2f}x); {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true", help="also 1,000,000 images")
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-channels", action="store_true")
    parser.add_argument("--memmap-job", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memmap_job:
        memmap_job(args.memmap_job[0], int(args.memmap_job[1]))
        return
    print(f"# {platform.platform()}, Python {platform.python_version()}, {CORES} cores, "
          f"NumPy {np.__version__}")
    if not args.skip_channels:
        channels(args.repeat)
    for n in (400_000, 1_000_000) if args.million else (400_000,):
        images_run(n, args.repeat)


if __name__ == "__main__":
    main()
