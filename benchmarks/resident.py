"""How a resident operator's batches reach its device host, a CPU proxy (issue 27, item 3).

    .venv/bin/python benchmarks/resident.py [--images 300000] [--repeat 3] [--rounds 20]

On an H100, two subtasks at ``{"gpu": 0.5}`` with ``resident=True`` ran at 0.44x of a bare
torch loop, below the same two not resident (0.74x): each 4096x784 uint8 batch (3.2 MB) went
subtask -> host over the connection (``runtime/_oob.py``, 2.2 ms a round trip), as long in
total as the whole bare loop. Two measurements, on this machine's CPU:

* ``round trip``: a 4096x784 uint8 batch from one process to another, and back either whole
  (an echo) or as its 4096 labels (what a classifier returns: a few KiB, pickled either way),
  through the connection as before (``send_chunk``/``recv_chunk``: pickle protocol 5, buffers
  out of band) and through the shared-memory rings resident requests and replies use now
  (``SharedChunks``: one copy into the sender's ring, the receiver gets a view and copies its
  reply into its own ring, the first process copies the reply out), best of ``--rounds``,
  the ways interleaved;
* ``job``: ``--images`` 28x28 uint8 images through ``map_batches(Linear(),
  batch_size=4096)`` on the local cluster with one fake GPU (``accelflow.testing``'s fake
  ``nvidia-smi``): two subtasks at half the GPU each, ``resident=True`` (one instance in
  the device host) and not (each subtask its own), against a bare loop calling the same model
  in this process. ``Linear`` is a NumPy stand-in for a model (images to float32, a 784x10
  matmul, argmax: about 3 ms a batch here on one thread, as the H100's bare torch loop takes
  2.3 ms a batch): the job's transport is what differs. Every process of the run computes on
  one thread (``OMP_NUM_THREADS=1`` and the like, unless set): as a GPU's compute, the model
  leaves the other core to the transport (BLAS threads spinning on 2 shared cores would
  measure their contention instead). A ratio is the bare loop's seconds over a job's
  running time (its duration less its start-up) in the same round; ways run in turns,
  ``--repeat`` rounds; printed: the medians and the spread (min - max) over the rounds of the
  running time, the ratio and the CPU seconds of the processes that ran the model, all their
  threads, from their first batch to their last (the bare loop's process; each subtask; the
  device host, whose receiving threads do the transport: the figure contention moves least),
  and the resident job's running time over the not resident one's of the same round.

``jobs()`` and ``report()`` use only the public API, so they also measure an older accelflow
(``benchmarks/results/resident.txt`` has both), from the repository's root:
``PYTHONPATH=<its src> .venv/bin/python -c "import sys; sys.path.insert(0, 'benchmarks'); import
resident; resident.report(resident.jobs(500_000, 5))"``.

The machine's 2 cores are shared: figures are noisy, compare the ways of one run.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):  # before NumPy loads
    os.environ.setdefault(_threads, "1")  # and for every process of the cluster, which inherit it

import numpy as np

BATCH = 4096
WAYS = ("bare loop", "p=2 at 0.5, not resident", "p=2 at 0.5, resident")


class Linear:
    """A NumPy stand-in for a model: 28x28 uint8 images -> 10 scores -> the best one's index;
    with ``log``, each batch appends ``<pid> <CPU seconds of its process before> <after>``."""

    def __init__(self, log: str | None = None) -> None:
        self.weights = np.random.default_rng(0).standard_normal((784, 10)).astype(np.float32)
        self.log = log

    def map_batch(self, images: Any) -> Any:
        before = time.process_time()
        x = np.asarray(images).reshape(len(images), 784).astype(np.float32)
        out = (x @ self.weights).argmax(1).astype(np.uint8)
        if self.log is not None:
            with open(self.log, "a", encoding="ascii") as f:
                f.write(f"{os.getpid()} {before} {time.process_time()}\n")
        return out


def cpu_seconds(log: str) -> float:
    """The CPU seconds the processes that ran :class:`Linear` spent (all their threads: the
    device host's receiving ones too) from their first batch's start to their last one's end."""
    spans: dict[str, tuple[float, float]] = {}
    with open(log, encoding="ascii") as f:
        for line in f:
            pid, before, after = line.split()
            first, _ = spans.get(pid, (float(before), 0.0))
            spans[pid] = (first, float(after))
    return sum(last - first for first, last in spans.values())


# -- the round trip of one batch -------------------------------------------------------------------
def round_trip(rounds: int) -> dict[tuple[str, str], float]:
    """Best seconds for a 4096x784 uint8 batch to go to another process and come back (whole,
    or its labels), per ``(reply, way)``."""
    batch = np.random.default_rng(0).integers(0, 256, (BATCH, 784), dtype=np.uint8)
    ends = {}
    for reply in ("batch", "labels"):
        for way in ("connection", "shared memory"):
            parent, child = multiprocessing.Pipe()
            echo = multiprocessing.get_context("fork").Process(target=_echo, args=(child, way, reply), daemon=True)
            echo.start()
            ends[reply, way] = (parent, echo, _Way(way))
    best = dict.fromkeys(ends, float("inf"))
    for _ in range(rounds):
        for (reply, way), (conn, _, end) in ends.items():
            started = time.perf_counter()
            back = end.round_trip(conn, batch)
            best[reply, way] = min(best[reply, way], time.perf_counter() - started)
            assert np.array_equal(back, batch if reply == "batch" else batch[:, 0])
    for conn, echo, end in ends.values():
        end.stop(conn)
        echo.join()
    return best


class _Way:
    """One end of a resident connection, sending requests the old way or the new one."""

    def __init__(self, way: str) -> None:
        from accelflow.runtime.subtask import WINDOW, SharedChunks

        self.shared = SharedChunks(WINDOW) if way == "shared memory" else None
        self.seq = 0

    def round_trip(self, conn: Any, batch: Any) -> Any:
        from accelflow.runtime import ResidentRequest, recv_chunk, send_chunk

        self.seq += 1
        if self.shared is None:
            send_chunk(conn, ResidentRequest(self.seq, len(batch)), batch)
            return recv_chunk(conn)[1]
        request = ResidentRequest(self.seq, len(batch), shared=self.shared.share(batch, self.seq), read=self.seq - 1)
        self.shared.send(conn, request, batch)
        _, back = self.shared.recv(conn, copy=True)
        self.shared.release(self.seq)
        return back

    def stop(self, conn: Any) -> None:
        from accelflow.runtime import send_chunk

        send_chunk(conn, None, None)


def _echo(conn: Any, way: str, reply: str) -> None:
    """The host's side: each request's records back as its reply (a view of the ring, copied
    into the reply ring, or the received copy pickled back), or their first column."""
    from accelflow.runtime import ResidentReply, recv_chunk, send_chunk
    from accelflow.runtime.subtask import WINDOW, SharedChunks

    shared = SharedChunks(WINDOW)
    while True:
        request, chunk = shared.recv(conn, copy=False) if way == "shared memory" else recv_chunk(conn)
        if request is None:
            return
        if reply == "labels":
            chunk = chunk[:, 0].copy()
        if way == "connection":
            send_chunk(conn, ResidentReply(request.seq), chunk)
            continue
        shared.release(request.read)
        shared.send(conn, ResidentReply(request.seq, shared=shared.share(chunk, request.seq)), chunk)


# -- whole jobs ------------------------------------------------------------------------------------
def bare_loop(images: np.ndarray[Any, Any]) -> tuple[float, float, np.ndarray[Any, Any]]:
    """Seconds and CPU seconds of the loop, and its outputs."""
    model, out = Linear(), []
    started, cpu = time.perf_counter(), time.process_time()
    for start in range(0, len(images), BATCH):
        out.append(model.map_batch(images[start:start + BATCH]))
    return time.perf_counter() - started, time.process_time() - cpu, np.concatenate(out)


def job(images: np.ndarray[Any, Any], conf: dict[str, Any], resident: bool,
        log: str) -> tuple[float, float, np.ndarray[Any, Any]]:
    """Running seconds of the p=2 job at half the fake GPU each, the CPU seconds of the
    processes running the model (:func:`cpu_seconds`), and its outputs in order."""
    from accelflow import Environment

    env = Environment(conf)
    out = env.from_collection(images, parallelism=2).map_batches(
        Linear(log), batch_size=BATCH, resident=resident, resources={"gpu": 0.5}, parallelism=2)
    predictions = out.execute_and_collect_batch()
    result = env.last_result
    assert result is not None and result.startup_s is not None
    return result.duration_s - result.startup_s, cpu_seconds(log), np.asarray(predictions)


def fake_gpu_conf(tmp: Path) -> dict[str, Any]:
    """One fake GPU for every process of the local cluster (this process's environment)."""
    from accelflow.testing import install_fake_nvidia_smi

    install_fake_nvidia_smi(tmp / "bin", 1, environ=os.environ)
    return {
        "external-resources": "gpu", "external-resource.gpu.amount": 1,
        "external-resource.gpu.driver-factory.class": "gpu",
        "external-resource.gpu.param.coordination-file": str(tmp / "coordination.json"),
        "external-resource.gpu.warm.framework": "none",
        "taskmanager.numberOfTaskSlots": 2,
    }


def jobs(n: int, repeat: int) -> dict[str, list[tuple[float, float]]]:
    """Per way, each round's ``(running seconds, CPU seconds of the model's processes)``."""
    images = np.random.default_rng(0).integers(0, 256, (n, 28, 28), dtype=np.uint8)
    figures: dict[str, list[tuple[float, float]]] = {way: [] for way in WAYS}
    with tempfile.TemporaryDirectory(prefix="resident-bench-") as tmp:
        conf = fake_gpu_conf(Path(tmp))
        for i in range(repeat):
            seconds, cpu, expected = bare_loop(images)
            figures["bare loop"].append((seconds, cpu))
            for resident in (False, True):
                seconds, cpu, got = job(images, conf, resident, f"{tmp}/cpu-{i}-{resident}.log")
                assert np.array_equal(got, expected), f"resident={resident}: outputs differ from the bare loop's"
                figures[WAYS[1 + resident]].append((seconds, cpu))
    return figures


def report(figures: dict[str, list[tuple[float, float]]]) -> None:
    """Print per way: running seconds, the ratio to the bare loop, CPU seconds; medians and
    spreads over the rounds; then the resident job's running time over the not resident one's."""
    def spread(values: list[float], form: str) -> str:
        return f"{statistics.median(values):{form}} ({min(values):{form}} - {max(values):{form}})"

    bare = [s for s, _ in figures["bare loop"]]
    for way, rounds in figures.items():
        seconds, cpu = [s for s, _ in rounds], [c for _, c in rounds]
        ratios = [b / s for b, s in zip(bare, seconds, strict=True)]
        print(f"  {way:26s} running {spread(seconds, '.3f')} s  {spread(ratios, '.2f')}x  "
              f"CPU of the model's processes {spread(cpu, '.2f')} s")
    same = [r / n for (r, _), (n, _) in zip(figures[WAYS[2]], figures[WAYS[1]], strict=True)]
    print(f"  resident / not resident running time, per round: {spread(same, '.2f')}; below 1: resident is faster")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=300_000)
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--rounds", type=int, default=20)
    args = parser.parse_args(argv)
    for name in ("images", "repeat", "rounds"):
        if getattr(args, name) < 1:
            parser.error(f"--{name} must be a positive integer, got {getattr(args, name)}")
    print(f"# {platform.platform()}, Python {platform.python_version()}, {os.cpu_count()} cores, load average "
          f"{os.getloadavg()[0]:.1f}; {time.strftime('%Y-%m-%d %H:%M', time.gmtime())} UTC")
    trip = round_trip(args.rounds)
    print(f"round trip of a {BATCH}x784 uint8 batch (best of {args.rounds}, interleaved):")
    for reply in ("batch", "labels"):
        old, new = trip[reply, "connection"], trip[reply, "shared memory"]
        print(f"  back {'whole' if reply == 'batch' else 'as 4096 labels':15s} connection {old * 1e3:.2f} ms, "
              f"shared memory {new * 1e3:.2f} ms ({old / new:.1f}x)")
    figures = jobs(args.images, args.repeat)
    print(f"{args.images:,} 28x28 uint8 images, batch {BATCH}, 1 fake GPU; median of {args.repeat} rounds "
          "(min - max), ways in turns; ratio: the bare loop's seconds / the job's running seconds, per round")
    report(figures)
    return 0


if __name__ == "__main__":
    sys.exit(main())
