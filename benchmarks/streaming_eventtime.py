"""Streaming latency with ``execution.buffer-timeout`` and event-time window throughput (issue 30):
the issue's sections (c) and (d) next to ``benchmarks/streaming.py``'s (a) and (b), results
appended to ``benchmarks/results/streaming.txt``.

    .venv/bin/python benchmarks/streaming_eventtime.py [--quick] [--seconds 5] [--repeat 3] [--output PATH]
        [--sections c,d] [--profile DIR]

``--sections d`` runs only the window section. ``--profile DIR`` runs one window job and
nothing else, with ``py-spy`` (``pip install py-spy``) sampling each of its processes
(subtasks, TaskExecutor), and prints where each spent its time (self time per function; the
samples stay in ``DIR/<pid>.txt``, collapsed stacks).

(c) p99 source -> sink latency: ``Ticks(rate) -> rebalance -> map -> add_sink(latency)``,
two subtasks (source; map and sink chained) on 2 cores, records given one at a time by a
user source's ``read()`` at 1,000 and 10,000 records/s (each stamped with the time it became
due, so a source that falls behind counts its lag), with ``execution.buffer-timeout: 0`` and,
for comparison, the default 100 ms (where a source that pauses between records still sends
each at once) and the old fixed 50 ms chunk timer (``-1`` with chunks closed every 50 ms is
what 0.1.0 did: shown as "50 ms timer").

(d) a tumbling-window job's throughput against the same aggregation as a plain Python loop:
``(key, value, timestamp)`` records, 1,000 keys, 1 s tumbling event-time windows summing the
values per key, 1,000,000 records; the job (parallelism 1: one source subtask, one window
subtask, as the loop has one core) and the loop (a dict of per-(key, window) sums, then the
windows in end order) interleaved, each ``--repeat`` times, in the same run; the ratio is
loop time / job time (higher is better), with min/median/max. Start-up is shown apart (the
first record out of the source, ``JobResult.startup_s``; the first window result, stamped by
a pass-through ``map`` after the window), and the steady state is the records over the job's
time less its time to the first result.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import signal
import statistics
import sys
import subprocess
import tempfile
import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import psutil

from streaming import CpuSampler  # noqa: E402 (benchmarks/ is on the path of a script run from there)

from accelflow import (
    Environment, RichMapFunction, RuntimeContext, SinkFunction, Source, Time, TumblingEventTimeWindows, WatermarkStrategy,
)

RESULTS = Path(__file__).resolve().parent / "results" / "streaming.txt"
TARGET_P99_MS = 5.0
RATES = (1_000, 10_000)


class Ticks(Source[Any]):
    """``rate`` records/s for ``seconds``, one at a time from ``read()``: each is
    ``time.time_ns()`` of the moment it became due."""

    def __init__(self, rate: int, seconds: float) -> None:
        self.rate, self.seconds = rate, seconds

    def create_splits(self, parallelism: int) -> list[Any]:
        return [0]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        start = time.time_ns()
        step = 1e9 / self.rate
        for i in range(int(self.rate * self.seconds)):
            due = start + int(i * step)
            ahead = (due - time.time_ns()) / 1e9
            if ahead > 0:
                time.sleep(ahead)
            yield due


class LatencyFile(SinkFunction[Any]):
    """Writes ``arrival - due`` (ns) of each record to ``path`` when it closes."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, ctx: RuntimeContext) -> None:
        self.latencies: list[int] = []

    def invoke(self, value: Any) -> None:
        self.latencies.append(time.time_ns() - value)

    def close(self) -> None:
        np.save(self.path, np.asarray(self.latencies, np.int64))


def latency_run(rate: int, seconds: float, warmup_s: float, conf: dict[str, Any]) -> np.ndarray[Any, Any]:
    """The latencies (ms) of one job after ``warmup_s``."""
    with tempfile.TemporaryDirectory(prefix="accelflow-latency-") as tmp:
        path = os.path.join(tmp, "latency.npy")
        env = Environment({"parallelism.default": 1, **conf})
        env.from_source(Ticks(rate, seconds), name="ticks").rebalance().map(lambda x: x, name="map") \
            .add_sink(LatencyFile(path), name="latency")
        env.execute(f"latency {rate}/s")
        ms = np.load(path) / 1e6
    return ms[int(rate * warmup_s):]


SETTINGS = [("0", {"execution.buffer-timeout": 0}), ("100 ms (default)", {}),
            ("50 ms timer", {"execution.buffer-timeout": "50 ms"})]


def latency_section(args: argparse.Namespace) -> list[str]:
    lines = ["(c) source -> sink latency, records one at a time (source -> rebalance -> map -> sink; 2 subtasks)",
             "  rate/s  buffer-timeout      p50 ms  p99 ms  max ms  records   (the run of median p99 of "
             f"{args.repeat} interleaved, {args.seconds:g} s each, first {args.warmup:g} s dropped)"]
    verdicts = []
    runs_of: dict[tuple[int, str], list[np.ndarray[Any, Any]]] = defaultdict(list)
    for _ in range(args.repeat):  # interleaved: a busy neighbour hurts every setting alike
        for rate in RATES:
            for label, conf in SETTINGS:
                runs_of[(rate, label)].append(latency_run(rate, args.seconds, args.warmup, conf))
    for rate in RATES:
        for label, _conf in SETTINGS:
            runs = runs_of[(rate, label)]
            median = sorted(runs, key=lambda ms: float(np.percentile(ms, 99)))[len(runs) // 2]  # the median run
            p50, p99 = np.percentile(median, [50, 99])
            p99s = ", ".join(f"{np.percentile(r, 99):.1f}" for r in runs)
            lines.append(f"  {rate:>6,}  {label:<17} {p50:7.2f} {p99:7.2f} {median.max():7.1f} {len(median):8,}   "
                         f"(p99 of each run: {p99s})")
            if label == "0":
                verdicts.append(f"  {'met   ' if p99 <= TARGET_P99_MS else 'NOT met'} p99 <= {TARGET_P99_MS:g} ms at "
                                f"{rate:,}/s with execution.buffer-timeout: 0: {p99:.2f} ms (median run; "
                                f"each run: {p99s})")
    return lines + ["", "targets (issue #30):", *verdicts]


# -- (d) windows against a Python loop -------------------------------------------------------------
KEYS = 1000
WINDOW_MS = 1000


def window_records(n: int) -> list[tuple[int, int, int]]:
    """``n`` records (key, value, timestamp ms), 10 records per ms, a little out of order."""
    rng = np.random.default_rng(0)
    keys = rng.integers(0, KEYS, n)
    values = rng.integers(0, 100, n)
    stamps = np.arange(n) // 10 + rng.integers(0, 5, n)
    return list(zip(keys.tolist(), values.tolist(), stamps.tolist()))


def python_loop(records: list[tuple[int, int, int]]) -> list[tuple[int, int, int]]:
    """The same aggregation as the job, written as a plain loop: sums per (key, window)."""
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for key, value, stamp in records:
        sums[(key, stamp - stamp % WINDOW_MS)] += value
    return sorted((start, key, total) for (key, start), total in sums.items())


def add(a: tuple[int, int, int], b: tuple[int, int, int]) -> tuple[int, int, int]:
    return a[0], a[1] + b[1], max(a[2], b[2])


class FirstOut(RichMapFunction):
    """Passes records on; writes the ``time.time_ns()`` of the first one to ``path`` at close."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, ctx: RuntimeContext) -> None:
        self.first = 0

    def map(self, value: Any) -> Any:
        if not self.first:
            self.first = time.time_ns()
        return value

    def close(self) -> None:
        with open(self.path, "w", encoding="utf-8") as f:
            f.write(str(self.first))


@dataclass
class WindowRun:
    seconds: float  # execute() to the results in the client
    startup_s: float  # execute() to the first record out of the source (JobResult.startup_s)
    first_out_s: float  # execute() to the first window result (after the window operator)
    results: list[Any]
    job_cpu_s: float  # CPU seconds of the job's processes (client, TaskExecutor, subtasks)
    others: float  # cores the machine's other users took meanwhile (it is shared)


def window_job(records: list[tuple[int, int, int]]) -> WindowRun:
    """One run of the windowed job (its results are ``(key, sum, max timestamp)`` per window)."""
    env = Environment({"parallelism.default": 1})
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Time.milliseconds(10)) \
        .with_timestamp_assigner(lambda r, ts: r[2])
    with tempfile.TemporaryDirectory(prefix="accelflow-window-") as tmp:
        first = os.path.join(tmp, "first")
        stream = env.from_collection(records).assign_timestamps_and_watermarks(strategy).key_by(lambda r: r[0]) \
            .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS))).reduce(add).map(FirstOut(first))
        cpu = CpuSampler()
        started, started_ns = time.perf_counter(), time.time_ns()
        try:
            out = stream.execute_and_collect()
            seconds, stopped_ns = time.perf_counter() - started, time.time_ns()
            time.sleep(0.15)  # a sample after the end
        finally:
            cpu.stop.set()
        first_out_s = (int(Path(first).read_text(encoding="utf-8")) - started_ns) / 1e9
    job_cpu, machine_cpu = cpu.between(started_ns, stopped_ns)
    return WindowRun(seconds, env.last_result.startup_s or 0.0, first_out_s, out, job_cpu,
                     max(0.0, machine_cpu - job_cpu) / seconds)


def _sums(results: list[Any]) -> list[tuple[int, int]]:
    return sorted((key, total) for key, total, *_ in results)


def window_section(args: argparse.Namespace) -> list[str]:
    records = window_records(args.records)
    expected = python_loop(records)
    loop_s, runs = [], []
    for _ in range(args.repeat):  # interleaved, so that a busy neighbour hurts both alike
        started = time.perf_counter()
        python_loop(records)
        loop_s.append(time.perf_counter() - started)
        run = window_job(records)
        if _sums(run.results) != sorted((key, total) for _, key, total in expected):
            raise SystemExit(f"the job gave {len(run.results)} window results unlike the loop's {len(expected)}")
        runs.append(run)
    job_s = [r.seconds for r in runs]
    steady = [args.records / (r.seconds - r.first_out_s) for r in runs]
    ratios = sorted(loop / job for loop, job in zip(loop_s, job_s))
    n = args.records
    return [
        f"(d) tumbling {WINDOW_MS} ms event-time windows, sum per key ({KEYS:,} keys, {n:,} records, "
        f"{len(expected):,} results), {args.repeat} runs interleaved",
        f"  plain Python loop  {statistics.median(loop_s):6.2f} s  ({n / statistics.median(loop_s):>11,.0f} records/s)"
        f"  min {min(loop_s):.2f} max {max(loop_s):.2f}",
        f"  accelflow job      {statistics.median(job_s):6.2f} s  ({n / statistics.median(job_s):>11,.0f} records/s)"
        f"  min {min(job_s):.2f} max {max(job_s):.2f}  (from execute() to the results in the client: start-up included)",
        f"  ratio loop/job: median {statistics.median(ratios):.2f}x, min {ratios[0]:.2f}x, max {ratios[-1]:.2f}x",
        f"  job start-up: first record out of the source after {statistics.median(r.startup_s for r in runs):.2f} s, "
        f"first window result after {statistics.median(r.first_out_s for r in runs):.2f} s (medians)",
        f"  steady state: {statistics.median(steady):,.0f} records/s (records / (job time - time to first result); "
        f"min {min(steady):,.0f} max {max(steady):,.0f})",
        f"  job CPU: {statistics.median(r.job_cpu_s for r in runs):.2f} s (median; min "
        f"{min(r.job_cpu_s for r in runs):.2f} max {max(r.job_cpu_s for r in runs):.2f}: client, TaskExecutor and "
        f"subtasks), {n / statistics.median(r.job_cpu_s for r in runs):,.0f} records per CPU second; other users of "
        f"the machine took {', '.join(f'{r.others:.2f}' for r in runs)} cores meanwhile",
    ]


def profile_window_job(records: list[tuple[int, int, int]], directory: Path, top: int = 25) -> list[str]:
    """Runs the window job once with ``py-spy record`` on each process it starts; returns
    where each sampled process spent its time (self time per function, most first)."""
    directory.mkdir(parents=True, exist_ok=True)
    spies: dict[int, subprocess.Popen[bytes]] = {}
    done = threading.Event()

    def attach() -> None:
        me = psutil.Process()
        while not done.wait(0.05):
            for child in me.children(recursive=True):
                if child.pid not in spies and child.pid not in {s.pid for s in spies.values()}:
                    spies[child.pid] = subprocess.Popen(
                        ["py-spy", "record", "--pid", str(child.pid), "--format", "raw", "--rate", "250", "--function",
                         "--nonblocking", "-o", str(directory / f"{child.pid}.txt")],
                        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)

    watcher = threading.Thread(target=attach, daemon=True)
    watcher.start()
    try:
        window_job(records)
    finally:
        done.set()
        watcher.join()
        for spy in spies.values():  # the zygote outlives the job: stop every spy (it writes at SIGINT)
            spy.send_signal(signal.SIGINT)
        for spy in spies.values():
            spy.wait(30)
    lines = []
    for path in sorted(directory.glob("*.txt")):
        self_time: dict[str, int] = defaultdict(int)
        for line in path.read_text(encoding="utf-8").splitlines():
            stack, _, count = line.rpartition(" ")
            self_time[stack.rsplit(";", 1)[-1]] += int(count)
        total = sum(self_time.values())
        if total < 50:
            continue
        lines.append(f"  process {path.stem}: {total} samples")
        for frame, count in sorted(self_time.items(), key=lambda kv: -kv[1])[:top]:
            lines.append(f"    {count / total:6.1%}  {frame}")
    return lines


def report(args: argparse.Namespace) -> list[str]:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [f"# benchmarks/streaming_eventtime.py, {when}",
            f"# {platform.platform()}; {cores} cores; Python {platform.python_version()}; load average before: "
            + " ".join(f"{x:.2f}" for x in os.getloadavg()),
            *(latency_section(args) + [""] if "c" in args.sections else []),
            *(window_section(args) if "d" in args.sections else []),
            "# load average after: " + " ".join(f"{x:.2f}" for x in os.getloadavg())]


def parse(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="short runs, one repetition (a smoke run)")
    parser.add_argument("--seconds", type=float, help="seconds of input per latency run (default 5, --quick 1.5)")
    parser.add_argument("--warmup", type=float, help="seconds dropped at the start (default 1, --quick 0.5)")
    parser.add_argument("--repeat", type=int, help="runs of each kind (default 3, --quick 1)")
    parser.add_argument("--records", type=int, help="records of the window job (default 1,000,000, --quick 100,000)")
    parser.add_argument("--output", type=Path, help="append the report here (default benchmarks/results/streaming.txt, "
                        "none with --quick)")
    parser.add_argument("--sections", default="c,d", help="which sections to run (default c,d)")
    parser.add_argument("--profile", type=Path, help="profile one window job with py-spy into this folder "
                        "and print where its processes spend their time (nothing else runs)")
    args, _ = parser.parse_known_args(argv)
    args.sections = set(args.sections.split(","))
    args.seconds = args.seconds or (1.5 if args.quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.output = args.output or (None if args.quick else RESULTS)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    if args.profile is not None:
        print("\n".join(profile_window_job(window_records(args.records), args.profile)))
        return
    lines = report(args)
    print("\n".join(lines))
    if args.output is not None:
        with open(args.output, "a", encoding="utf-8") as f:
            f.write("\n" + "\n".join(lines) + "\n")
        print(f"appended to {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
