"""Streaming: throughput, checkpoint overhead and latency of a model served by ``map_batches``.

    .venv/bin/python benchmarks/streaming.py [--quick] [--duration 8] [--parallelism 2]
        [--batch-size 256] [--repeat 2] [--interval-ms 1000] [--output PATH]

Whole jobs on the real local cluster (TaskExecutor and subtasks as processes), chained into
one subtask per index: ``OfferedLoad -> map_batches(model, batch_size=256, max_wait=0.01)
-> sink_to(LatencySink)``. ``OfferedLoad`` (unbounded, exact ``snapshot_split``) emits the
Fashion-MNIST test images (784 float32; seeded random without the files) as
``Columns((stamp_ns, x))``: every 2 ms what became due at an offered load (records/s for the
job; ``[]`` if nothing), or as fast as taken ("max"); it ends after ``--duration`` s, so every
sink reports. A stamp is the ``time.time_ns()`` at which the record was due, so a source that
falls behind counts its lag (no coordinated omission); at "max", when its chunk was made. The
model is pluggable (``MODELS``, ``--model``): a NumPy MLP 784 -> 256 (ReLU) -> 10 with seeded
weights (``--device cuda``, not done without a GPU, would add a CuPy/torch entry).
``LatencySink`` (two-phase commit, a committable per checkpoint) stamps each ``write``; it
saves the stamps to a temporary file at ``close``: latency = arrival - stamp.

Runs: the bare model (``--parallelism`` plain processes side by side): the ceiling, in
records/s and per CPU second; (a) max throughput without and with a checkpoint every
``--interval-ms`` (to local disk), alternated; (b) offered loads of 25/50/75% of the best max,
without and with checkpoints; each ``--repeat`` times, the best kept. Figures cover the window
in which every sink subtask was receiving, less ``--warmup`` s. ``job CPU``/``others``: cores
used by the job (client, TaskExecutor, subtasks) and by the rest of the (shared) machine;
``CPU eff.``: records per CPU second of the job against the bare model's. ``first out``:
``execute_async()`` to the first record at a sink; ``start-up``: ``JobResult.startup_s``;
``whole job``: all records / the job's wall time. Subtasks get ``cores // parallelism`` BLAS
threads.
"""

from __future__ import annotations

import os
import sys

CORES = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
_THREAD_VARS = ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS")


def _set_threads(n: int) -> None:
    for var in _THREAD_VARS:
        os.environ[var] = str(n)


if __name__ == "__main__" and "--bare-only" not in sys.argv:
    _set_threads(CORES)  # before NumPy loads BLAS (a --bare-only child keeps its parent's count)

import argparse  # noqa: E402
import datetime  # noqa: E402
import glob  # noqa: E402
import platform  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import threading  # noqa: E402
import time  # noqa: E402
from collections.abc import Iterator, Sequence  # noqa: E402
from dataclasses import dataclass  # noqa: E402
from pathlib import Path  # noqa: E402
from typing import Any  # noqa: E402

import numpy as np  # noqa: E402
import psutil  # noqa: E402

from accelflow import Environment, RuntimeContext, Sink, Source  # noqa: E402
from accelflow.dataflow import Columns, iter_records  # noqa: E402

FEATURES, HIDDEN, CLASSES = 784, 256, 10
TICK_S = 0.002  # a paced source yields what became due (or []) every TICK_S
MAX_WAIT_S = 0.01
LOADS = (0.25, 0.5, 0.75)  # offered loads, as fractions of the best max throughput without checkpoints
TARGET_OVERHEAD_PCT = 5.0
TARGET_P99_MS = 50.0
RESULTS = Path(__file__).resolve().parent / "results" / "streaming.txt"


class NumpyMlp:
    """784 -> 256 (ReLU) -> 10 in float32, weights drawn from ``seed``: ``predict(x)`` gives
    one class per row."""

    def __init__(self, seed: int = 0) -> None:
        rng = np.random.default_rng(seed)
        self.w1 = (rng.standard_normal((FEATURES, HIDDEN), dtype=np.float32) / np.sqrt(FEATURES)).astype(np.float32)
        self.b1 = np.zeros(HIDDEN, np.float32)
        self.w2 = (rng.standard_normal((HIDDEN, CLASSES), dtype=np.float32) / np.sqrt(HIDDEN)).astype(np.float32)
        self.b2 = np.zeros(CLASSES, np.float32)

    def predict(self, x: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        h = np.maximum(x @ self.w1 + self.b1, 0)
        out: np.ndarray[Any, Any] = np.argmax(h @ self.w2 + self.b2, axis=1)
        return out


#: ``--model`` name -> a class built with a seed, with ``predict(x: (n, 784) float32)``.
#: A GPU model goes here (e.g. "torch-mlp" moving x to "cuda" and back).
MODELS: dict[str, Any] = {"numpy-mlp": NumpyMlp}


class Serve:
    """The ``map_batches`` function: ``(stamps, x)`` columns in, ``(stamps, classes)`` out."""

    def __init__(self, model: Any) -> None:
        self.model = model

    def __call__(self, batch: Any) -> tuple[np.ndarray[Any, Any], np.ndarray[Any, Any]]:
        return np.asarray(batch[0]), self.model.predict(batch[1])


def load_images() -> tuple[np.ndarray[Any, Any], str]:
    """The 10,000 Fashion-MNIST test images as float32 rows in [0, 1], or seeded random ones."""
    try:
        from accelflow.io import find_fashion_mnist, read_labeled_pair

        images, _ = read_labeled_pair(*find_fashion_mnist(splits=["test"]).test)
        return (images.reshape(len(images), FEATURES).astype(np.float32) / 255.0), "Fashion-MNIST test images"
    except Exception:  # noqa: BLE001 - any reason the files are unusable: use random data
        rng = np.random.default_rng(1)
        return rng.random((10_000, FEATURES), dtype=np.float32), "random data (Fashion-MNIST not found)"


class OfferedLoad(Source[Any]):
    """``rate`` records/s over the whole job (None: as fast as taken) for ``duration_s`` per
    subtask; splits are ``(index, parts, position)`` and snapshot exactly."""

    bounded = False

    def __init__(self, rate: float | None, duration_s: float, chunk: int) -> None:
        self.rate, self.duration_s, self.chunk = rate, duration_s, chunk

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [(i, parallelism, 0) for i in range(parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        raise NotImplementedError("OfferedLoad yields chunks (read_chunks)")

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        _, parts, position = split
        images, _ = load_images()
        n = len(images)
        rate = None if self.rate is None else self.rate / parts
        start = time.time_ns()
        end, last, emitted = start + int(self.duration_s * 1e9), start, 0
        while not ctx.is_cancelled():
            now = time.time_ns()
            if now >= end:
                return
            if rate is None:
                count = self.chunk
                stamps = np.full(count, now, np.int64)
            else:  # what became due since the last tick (as a consumer's poll), one chunk a tick
                time.sleep(max(0.0, TICK_S - (now - last) / 1e9))
                now = last = time.time_ns()
                count = min(int((now - start) * rate / 1e9) - emitted, self.chunk)
                if count <= 0:
                    yield []
                    continue
                stamps = start + ((emitted + np.arange(count)) * (1e9 / rate)).astype(np.int64)
            first = (position + emitted) % n
            x = images[first:first + count] if first + count <= n else images[np.arange(first, first + count) % n]
            emitted += count
            yield Columns((stamps, x))

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        index, parts, position = split
        return (index, parts, position + records_read)


class LatencySink(Sink[Any]):
    """Stamps each chunk on arrival; saves ``(emitted, arrived)`` ns per record at close."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, ctx: RuntimeContext) -> None:
        self.name = f"sink-{ctx.index_of_this_subtask}-{ctx.attempt_number}"
        self.emitted: list[np.ndarray[Any, Any]] = []
        self.arrived: list[np.ndarray[Any, Any]] = []
        self.since_commit = 0

    def write(self, chunk: Any) -> None:
        now = time.time_ns()
        stamps = (np.asarray(chunk.columns()[0], np.int64) if isinstance(chunk, Columns)
                  else np.array([r[0] for r in iter_records(chunk)], np.int64))
        self.emitted.append(stamps)
        self.arrived.append(np.full(len(stamps), now, np.int64))
        self.since_commit += len(stamps)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if not self.since_commit:
            return []
        prepared, self.since_commit = [(checkpoint_id, self.since_commit)], 0
        return prepared

    def commit(self, committables: Sequence[Any]) -> None:
        pass  # the records were measured at write: nothing to publish

    def close(self) -> None:
        empty = np.empty(0, np.int64)
        np.savez(os.path.join(self.directory, self.name + ".npz"),
                 emitted=np.concatenate(self.emitted) if self.emitted else empty,
                 arrived=np.concatenate(self.arrived) if self.arrived else empty)


def _machine_busy_s() -> float:
    """CPU seconds the whole machine has been busy (every process, ours or not)."""
    t = psutil.cpu_times()
    return sum(t) - t.idle - getattr(t, "iowait", 0.0) - getattr(t, "guest", 0.0) - getattr(t, "guest_nice", 0.0)


class CpuSampler:
    """Every 100 ms: (time_ns, CPU seconds of this process and its descendants, CPU seconds
    of the whole machine); :meth:`between` gives both over a window, so the job's CPU and
    what the machine's other users took are known (the machine may be shared)."""

    def __init__(self) -> None:
        self.samples: list[tuple[int, float, float]] = []
        self.stop = threading.Event()
        self._procs: dict[int, psutil.Process] = {}
        self._cpu: dict[int, float] = {}  # pid -> its CPU seconds when last seen (kept once it exits)
        threading.Thread(target=self._run, daemon=True).start()

    def _run(self) -> None:
        me = psutil.Process()
        while True:
            try:
                for child in me.children(recursive=True):
                    self._procs.setdefault(child.pid, child)
            except psutil.Error:
                pass  # a child vanished while listed: the known ones still count
            for pid, proc in [(me.pid, me), *self._procs.items()]:
                try:
                    t = proc.cpu_times()
                    self._cpu[pid] = t.user + t.system
                except psutil.Error:
                    continue
            self.samples.append((time.time_ns(), sum(self._cpu.values()), _machine_busy_s()))
            if self.stop.wait(0.1):
                return

    def between(self, start_ns: int, stop_ns: int) -> tuple[float, float]:
        """(job CPU seconds, machine CPU seconds) from ``start_ns`` to ``stop_ns``."""
        at = np.array([s[0] for s in self.samples], np.float64)
        job = np.interp([start_ns, stop_ns], at, [s[1] for s in self.samples])
        machine = np.interp([start_ns, stop_ns], at, [s[2] for s in self.samples])
        return float(job[1] - job[0]), float(machine[1] - machine[0])


@dataclass
class Figures:
    label: str
    offered: float | None  # records/s, None: max
    rate: float  # records/s achieved in the window
    p50_ms: float
    p99_ms: float
    max_ms: float  # latencies in the window
    completed: int  # checkpoints completed
    ckpt_ms: float  # median checkpoint duration
    job_cores: float  # CPU of the job's processes (client, TaskExecutor, subtasks) in the window
    other_cores: float  # CPU the machine's other users took in the window
    first_out_s: float  # execute_async() -> first record at a sink
    startup_s: float  # JobResult.startup_s: first record out of a source
    whole: float  # records / wall time of the whole job

    @property
    def per_cpu(self) -> float:
        """Records per CPU second of the job's processes (less sensitive to neighbours)."""
        return self.rate / self.job_cores if self.job_cores > 0 else float("nan")


def run_job(args: argparse.Namespace, offered: float | None, checkpoints: bool) -> Figures:
    label = ("max" if offered is None else f"{offered:,.0f}/s") + (" +ckpt" if checkpoints else "")
    p = args.parallelism
    with tempfile.TemporaryDirectory(prefix="accelflow-streaming-") as tmp:
        env = Environment({"parallelism.default": p, "taskmanager.numberOfTaskSlots": p,
                           "execution.checkpointing.dir": os.path.join(tmp, "checkpoints")})
        if checkpoints:
            env.enable_checkpointing(args.interval_ms)
        (env.from_source(OfferedLoad(offered, args.duration, args.batch_size), name="load")
            .map_batches(Serve(MODELS[args.model](seed=0)), batch_size=args.batch_size, max_wait=MAX_WAIT_S, name="model")
            .sink_to(LatencySink(tmp), name="latency"))
        # for the TaskExecutor and subtasks, started after execute_async() returns: kept till the end
        _set_threads(max(1, CORES // p))
        cpu = CpuSampler()
        try:
            t0 = time.time_ns()
            client = env.execute_async(f"streaming {label}")
            result = client.wait(args.duration + 300)
            wall_s = (time.time_ns() - t0) / 1e9
        finally:
            _set_threads(CORES)
            cpu.stop.set()
        stats = next(iter(client.jobmanager.jobs.values())).checkpoints
        durations = [c.duration_s for c in stats.history if c.status == "COMPLETED" and c.duration_s is not None]
        sinks = [np.load(f) for f in sorted(glob.glob(os.path.join(tmp, "sink-*.npz")))]
    if len(sinks := [s for s in sinks if len(s["arrived"])]) != p:
        raise SystemExit(f"{label}: {len(sinks)} of {p} sink subtasks reported records")
    emitted, arrived = (np.concatenate([s[key] for s in sinks]) for key in ("emitted", "arrived"))
    window_start = max(int(s["arrived"][0]) for s in sinks) + int(args.warmup * 1e9)
    window_stop = min(int(s["arrived"][-1]) for s in sinks)
    if window_stop <= window_start:
        raise SystemExit(f"{label}: no steady window; raise --duration or lower --warmup")
    inside = (arrived >= window_start) & (arrived <= window_stop)
    latency_ms = (arrived[inside] - emitted[inside]) / 1e6
    p50, p99 = np.percentile(latency_ms, [50, 99])  # in the window, as the rate
    window_s = (window_stop - window_start) / 1e9
    job_cpu, machine_cpu = cpu.between(window_start, window_stop)
    return Figures(
        label, offered, rate=int(inside.sum()) / window_s,
        p50_ms=float(p50), p99_ms=float(p99), max_ms=float(latency_ms.max()),
        completed=int(stats.completed), ckpt_ms=float(np.median(durations) * 1e3) if durations else float("nan"),
        job_cores=job_cpu / window_s, other_cores=max(0.0, machine_cpu - job_cpu) / window_s,
        first_out_s=(int(arrived.min()) - t0) / 1e9,
        startup_s=result.startup_s if result.startup_s is not None else float("nan"),
        whole=len(arrived) / wall_s)


def bare_side_by_side(args: argparse.Namespace, seconds: float) -> tuple[float, float, int]:
    """``parallelism`` bare processes at once, each with a subtask's BLAS threads: (sum of
    their records/s, the job's ceiling here; their records per CPU second; threads)."""
    threads = max(1, CORES // args.parallelism)
    env = dict(os.environ, **{var: str(threads) for var in _THREAD_VARS})
    command = [sys.executable, __file__, "--bare-only", str(seconds), "--model", args.model,
               "--batch-size", str(args.batch_size)]
    children = [subprocess.Popen(command, env=env, stdout=subprocess.PIPE, text=True)
                for _ in range(args.parallelism)]
    rates = [[float(v) for v in child.communicate()[0].split()] for child in children]
    if any(child.returncode for child in children):
        raise SystemExit("the bare model processes failed")
    return sum(r[0] for r in rates), float(np.mean([r[1] for r in rates])), threads


def bare_rate(model: Any, batch: int, seconds: float) -> tuple[float, float]:
    """The model alone in this process, batch after batch: (records/s, best 0.25 s slice;
    records per CPU second of this process)."""
    images, _ = load_images()
    best, i, total, cpu0, until = 0.0, 0, 0, time.process_time(), time.perf_counter() + seconds
    while time.perf_counter() < until:  # best of 0.25 s slices: the machine may be shared
        done, started = 0, time.perf_counter()
        while time.perf_counter() - started < 0.25:
            model.predict(images[i:i + batch])
            i = (i + batch) % (len(images) - batch)
            done += batch
        best, total = max(best, done / (time.perf_counter() - started)), total + done
    return best, total / (time.process_time() - cpu0)


def header(args: argparse.Namespace, data: str) -> list[str]:
    info = Path("/proc/cpuinfo").read_text(encoding="utf-8") if Path("/proc/cpuinfo").exists() else ""
    cpu = next((ln.split(":", 1)[1].strip() for ln in info.splitlines() if ln.startswith("model name")),
               platform.processor() or "unknown CPU")
    return [
        f"# {' '.join(['benchmarks/streaming.py', *sys.argv[1:]])}, {datetime.datetime.now().astimezone():%Y-%m-%d %H:%M %Z}",
        f"# {platform.platform()}; {CORES} cores ({cpu}); Python {platform.python_version()}; "
        "NumPy %s; load average before: %.2f %.2f %.2f" % (np.__version__, *os.getloadavg()),
        f"# job: OfferedLoad -> map_batches({args.model}, batch_size={args.batch_size}, max_wait={MAX_WAIT_S}) "
        f"-> sink_to(LatencySink), parallelism {args.parallelism}, chained; {data}",
        f"# each run {args.duration:g} s of input, figures over the steady window (first {args.warmup:g} s dropped); "
        f"checkpoints every {args.interval_ms} ms to local disk; {CORES // args.parallelism or 1} BLAS thread(s) per subtask",
    ]


def table(rows: list[Figures], ceiling: float, per_cpu: float) -> list[str]:
    out = [f"  {'run':<15} {'records/s':>9} {'/bare':>6} {'p50 ms':>7} {'p99 ms':>7} {'max ms':>7} "
           f"{'ckpts':>5} {'ckpt ms':>7} {'job CPU':>7} {'others':>6} {'CPU eff.':>8} "
           f"{'first out':>9} {'start-up':>8} {'whole job':>9}"]
    for r in rows:
        out.append(f"  {r.label:<15} {r.rate:>9,.0f} {r.rate / ceiling:>5.2f}x {r.p50_ms:>7.1f} {r.p99_ms:>7.1f} "
                   f"{r.max_ms:>7.1f} {r.completed:>5d} {r.ckpt_ms:>7.1f} {r.job_cores:>7.2f} {r.other_cores:>6.2f} "
                   f"{r.per_cpu / per_cpu:>7.2f}x {r.first_out_s:>8.2f}s {r.startup_s:>7.2f}s {r.whole:>7,.0f}/s")
    return out


def targets(plain: list[Figures], ckpt: list[Figures], half: list[Figures], interval_ms: int) -> list[str]:
    best_plain, best_ckpt = max(r.rate for r in plain), max(r.rate for r in ckpt)
    overhead = (best_plain - best_ckpt) / best_plain * 100
    paired = float(np.median([(a.rate - b.rate) / a.rate * 100 for a, b in zip(plain, ckpt)]))
    per_cpu = float(np.median([(a.per_cpu - b.per_cpu) / a.per_cpu * 100 for a, b in zip(plain, ckpt)]))
    ok = overhead < TARGET_OVERHEAD_PCT
    lines = ["targets (issue #13):", f"  {'met   ' if ok else 'MISSED'} checkpoint overhead < {TARGET_OVERHEAD_PCT:g}% of throughput: "
                 f"{overhead:.1f}% ({best_plain:,.0f}/s without, {best_ckpt:,.0f}/s with a checkpoint "
                 f"every {interval_ms} ms; best of each; median of the {len(plain)} back-to-back pairs {paired:.1f}%; "
                 f"in records per CPU second of the job, median of the pairs: {per_cpu:.1f}%)"]
    return lines + [f"  {'met   ' if r.p99_ms < TARGET_P99_MS else 'MISSED'} p99 < {TARGET_P99_MS:g} ms at half "
                    f"the max throughput ({r.label}): p99 {r.p99_ms:.1f} ms, achieved {r.rate:,.0f}/s (best of "
                    f"{len(plain)}; others took {r.other_cores:.2f} cores meanwhile)" for r in half]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2.5 s runs, one repetition (a smoke run)")
    parser.add_argument("--duration", type=float, help="seconds of input per run (default 8, --quick 2.5)")
    parser.add_argument("--warmup", type=float, help="seconds dropped at the start of each window (default 1, --quick 0.5)")
    parser.add_argument("--repeat", type=int, help="runs of each kind, best kept (default 2, --quick 1)")
    parser.add_argument("--parallelism", type=int, default=min(CORES, 2))
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--interval-ms", type=int, default=1000, help="checkpoint interval (default 1000)")
    parser.add_argument("--model", choices=sorted(MODELS), default="numpy-mlp")
    parser.add_argument("--loads", type=lambda v: [float(f) for f in v.split(",")], default=list(LOADS),
                        help="offered loads, fractions of the max (default 0.25,0.5,0.75; 0.5 is the target's)")
    parser.add_argument("--bare-only", type=float, help=argparse.SUPPRESS)
    parser.add_argument("--output", type=Path, help=f"also write the report here (default {RESULTS.relative_to(RESULTS.parents[2])}, "
                        "none with --quick)")
    args = parser.parse_args()
    if args.bare_only:
        print(*bare_rate(MODELS[args.model](seed=0), args.batch_size, args.bare_only))
        return
    args.duration = args.duration or (2.5 if args.quick else 8.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    args.repeat = args.repeat or (1 if args.quick else 2)
    output = args.output or (None if args.quick else RESULTS)
    if min(args.duration - args.warmup, args.repeat, args.parallelism, args.batch_size, args.interval_ms) <= 0:
        parser.error("--duration must exceed --warmup; --repeat, --parallelism, --batch-size, --interval-ms > 0")
    lines: list[str] = []

    def say(*text: str) -> None:
        for line in text:
            print(line, flush=True)
            lines.append(line)

    say(*header(args, load_images()[1]))
    ceiling, per_cpu, threads = bare_side_by_side(args, 1.0 if args.quick else 3.0)
    say(f"bare model: {args.parallelism} plain processes side by side, {threads} BLAS thread(s) each, batches of "
        f"{args.batch_size}: {ceiling:,.0f} records/s, {per_cpu:,.0f} records per CPU second "
        "('/bare' and 'CPU eff.' below are against these)", "")
    say("(a) max throughput, without and with checkpoints (alternated)")
    plain, ckpt = [], []
    for _ in range(args.repeat):
        plain.append(run_job(args, None, False))
        ckpt.append(run_job(args, None, True))
    say(*table([r for pair in zip(plain, ckpt) for r in pair], ceiling, per_cpu))
    best_plain = max(plain, key=lambda r: r.rate)
    say("", "(b) fixed offered loads (fractions of the best max throughput without checkpoints)")
    loaded: list[Figures] = []
    for _ in range(args.repeat):
        for fraction in args.loads:
            offered = round(best_plain.rate * fraction, -1)
            loaded += [run_job(args, offered, False), run_job(args, offered, True)]
    say(*table(sorted(loaded, key=lambda r: (r.offered or 0, r.label)), ceiling, per_cpu), "")
    at_half = [r for r in loaded if r.offered == round(best_plain.rate * 0.5, -1)]
    half = [min((r for r in at_half if r.label == label), key=lambda r: r.p99_ms)
            for label in dict.fromkeys(r.label for r in at_half)]
    say(*targets(plain, ckpt, half, args.interval_ms))
    say("# load average after: %.2f %.2f %.2f" % os.getloadavg())
    if output is not None:
        output.write_text("\n".join(lines) + "\n", encoding="utf-8")
        print(f"written to {output}")


if __name__ == "__main__":
    main()
