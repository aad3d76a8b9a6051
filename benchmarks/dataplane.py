"""The data plane against the bare single-process loop: images through ``map_batches``.

    .venv/bin/python benchmarks/dataplane.py [--million] [--repeat 3] [--skip-channels]

400,000 (``--million``: also 1,000,000) images of 784 uint8 (seeded random, Fashion-MNIST
sized) go through a one-layer NumPy classifier (``argmax(batch @ W)``, W 784x10 float32) in
batches of ``pipeline.batch-size`` (1024), in one run:

* the bare loop: one process, the same function over the same batches of the same array;
* accelflow at parallelism 1 and 2 (``from_collection(images).map_batches(...)`` at the same
  parallelism, so source and classifier chain into one subtask each; results collected),
  each with ``pipeline.array-sharing`` ``auto`` (subtasks read the client's array straight
  out of its memory, a copy per chunk) and ``copy`` (the array copied once into shared
  memory at the start, chunks are views of it).

The bare loop and the jobs take turns, ``--repeat`` rounds, and each figure is the best of
its rounds: this machine's speed drifts from minute to minute.

For each accelflow job it prints:

* ``whole``: images / wall time from ``execute_and_collect_batch()`` to the predictions in
  hand as one array, as the bare loop's
  (cluster start, sharing the array, deploying, running, stopping), and its ratio to the bare
  loop;
* ``running``: images / (``duration_s`` - ``startup_s``), the rate once the first image is out;
* ``start-up``: ``JobResult.startup_s``, submission to the first record out of a source;
  the best job's, and the first job's of this parallelism (its BLAS thread count is new to
  this client, so its Environment starts a zygote for it just before: see
  ``local.start-method``);
* ``peak``: the peak memory of the whole job (client, TaskExecutors, forkservers, subtasks),
  in one more run of its own in a fresh client that holds just the images and the classifier
  (reading smaps costs CPU, so that run is not timed), sampled
  every 20 ms as the sum of PSS (proportional set size: a page shared by k processes
  counts 1/k in each, so shared memory is counted once) and as the sum of RSS (shared pages
  counted once per process), against the size of the source array; and once more with the
  images in an ``np.memmap`` (a file in ``/dev/shm``), which subtasks map by its file.

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
                  expected: np.ndarray[Any, Any], memory: MemorySampler | None = None,
                  sharing: str = "auto") -> dict[str, float]:
    """One job (``sharing``: ``pipeline.array-sharing``); timed, or with ``memory`` sampled
    (reading every process's smaps each 20 ms costs CPU: a sampled run is not timed)."""
    _set_threads(max(1, CORES // p))  # inherited by the TaskExecutor and its subtasks
    try:
        env = Environment({"taskmanager.numberOfTaskSlots": p, "pipeline.array-sharing": sharing})
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
    expected = bare_loop(images, fn)[1]
    variants = [(p, sharing) for p in (1, 2) for sharing in ("auto", "copy")]
    bare_runs: list[float] = []
    runs: dict[tuple[int, str], list[dict[str, float]]] = {v: [] for v in variants}
    for _ in range(repeat):  # interleaved: this machine's speed drifts from minute to minute
        bare_runs.append(bare_loop(images, fn)[0])
        for p, sharing in variants:
            runs[p, sharing].append(accelflow_job(images, fn, p, expected, sharing=sharing))
    bare_s = min(bare_runs)
    print(f"\n{n:,} images x 784 uint8 ({images.nbytes / 1e6:.0f} MB), batch {BATCH}; best of {repeat}, "
          "interleaved")
    print(f"  bare loop, 1 process, {CORES} BLAS threads: {n / bare_s / 1e3:8.1f}k img/s "
          f"(slowest run {n / max(bare_runs) / 1e3:.1f}k)")
    for (p, sharing), done in runs.items():
        best = min(done, key=lambda r: r["whole"])
        running = min(r["running"] for r in done)
        print(f"  accelflow p={p}, array-sharing {sharing}: whole {n / best['whole'] / 1e3:8.1f}k img/s "
              f"({bare_s / best['whole']:.2f}x)  running {n / running / 1e3:8.1f}k img/s "
              f"({bare_s / running:.2f}x)  start-up {min(r['startup'] for r in done):.2f} s"
              + (f" (first job {done[0]['startup']:.2f} s: a new zygote)" if sharing == "auto" else ""))
    print("  peak memory of a whole job (one more run each, sampled, not timed), in a fresh client "
          "that loaded the images from a file:")
    with tempfile.NamedTemporaryFile(dir="/dev/shm" if os.path.isdir("/dev/shm") else None) as f:
        images.tofile(f.name)
        np.save(f.name + ".w.npy", fn.w)
        try:
            for kind, p, sharing in [("array", 1, "auto"), ("array", 1, "copy"), ("array", 2, "auto"),
                                     ("array", 2, "copy"), ("memmap", 1, "auto")]:
                line = subprocess.run(
                    [sys.executable, __file__, "--memory-job", f.name, str(n), kind, str(p), sharing],
                    check=True, capture_output=True, text=True).stdout.split()
                memory = MemorySampler()
                memory.peak_pss, memory.peak_rss = int(line[0]), int(line[1])
                held = (f"a plain array, array-sharing {sharing}" if kind == "array"
                        else "an np.memmap in /dev/shm, mapped by its file")
                print_memory(memory, images.nbytes, f"p={p}, {held}")
        finally:
            os.remove(f.name + ".w.npy")


def memory_job(path: str, n: int, kind: str, p: int, sharing: str) -> None:
    """``--memory-job``: one sampled job over the images in the file at ``path``, read into a
    plain array or mapped (``kind``: ``array`` or ``memmap``); it exits with an error if the
    predictions differ from the bare loop's. Prints peak PSS and RSS."""
    images = (np.fromfile(path, dtype=np.uint8).reshape(n, FEATURES) if kind == "array"
              else np.memmap(path, dtype=np.uint8, mode="r", shape=(n, FEATURES)))
    fn = Classifier(np.load(path + ".w.npy"))
    _, expected = bare_loop(images, fn)
    memory = MemorySampler()
    accelflow_job(images, fn, p, expected, memory, sharing=sharing)
    print(memory.peak_pss, memory.peak_rss)


def print_memory(memory: MemorySampler, nbytes: int, note: str) -> None:
    print(f"      peak memory of the whole job: PSS {memory.peak_pss / 1e6:6.0f} MB "
          f"({memory.peak_pss / nbytes:.2f}x the array), RSS {memory.peak_rss / 1e6:6.0f} MB "
          f"({memory.peak_rss / nbytes:.2f}x); {note}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--million", action="store_true", help="also 1,000,000 images")
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--skip-channels", action="store_true")
    parser.add_argument("--memory-job", nargs=5, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.memory_job:
        path, n, kind, p, sharing = args.memory_job
        memory_job(path, int(n), kind, int(p), sharing)
        return
    print(f"# {platform.platform()}, Python {platform.python_version()}, {CORES} cores, "
          f"NumPy {np.__version__}")
    if not args.skip_channels:
        channels(args.repeat)
    for n in (400_000, 1_000_000) if args.million else (400_000,):
        images_run(n, args.repeat)


if __name__ == "__main__":
    main()
