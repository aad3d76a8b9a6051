"""Streaming latency with ``execution.buffer-timeout`` and event-time window throughput (issue 30):
the issue's sections (c) and (d) next to ``benchmarks/streaming.py``'s (a) and (b), results
appended to ``benchmarks/results/streaming.txt``.

    .venv/bin/python benchmarks/streaming_eventtime.py [--quick] [--seconds 5] [--repeat 3] [--output PATH]

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
loop time / job time (higher is better), with min/median/max.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import statistics
import sys
import tempfile
import time
from collections import defaultdict
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import (
    Environment, RuntimeContext, SinkFunction, Source, Time, TumblingEventTimeWindows, WatermarkStrategy,
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


def window_job(records: list[tuple[int, int, int]]) -> tuple[float, int]:
    """(seconds from execute to the end, results) of the windowed job."""
    env = Environment({"parallelism.default": 1})
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(Time.milliseconds(10)) \
        .with_timestamp_assigner(lambda r, ts: r[2])
    stream = env.from_collection(records).assign_timestamps_and_watermarks(strategy).key_by(lambda r: r[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS))).reduce(add)
    started = time.perf_counter()
    out = stream.execute_and_collect()
    return time.perf_counter() - started, len(out)


def window_section(args: argparse.Namespace) -> list[str]:
    records = window_records(args.records)
    expected = len(python_loop(records))
    loop_s, job_s = [], []
    for _ in range(args.repeat):  # interleaved, so that a busy neighbour hurts both alike
        started = time.perf_counter()
        python_loop(records)
        loop_s.append(time.perf_counter() - started)
        seconds, results = window_job(records)
        if results != expected:
            raise SystemExit(f"the job gave {results} window results, the loop {expected}")
        job_s.append(seconds)
    ratios = sorted(loop / job for loop, job in zip(loop_s, job_s))
    return [
        f"(d) tumbling {WINDOW_MS} ms event-time windows, sum per key ({KEYS:,} keys, {args.records:,} records, "
        f"{expected:,} results), {args.repeat} runs interleaved",
        f"  plain Python loop  {statistics.median(loop_s):6.2f} s  ({args.records / statistics.median(loop_s):>11,.0f} records/s)"
        f"  min {min(loop_s):.2f} max {max(loop_s):.2f}",
        f"  accelflow job      {statistics.median(job_s):6.2f} s  ({args.records / statistics.median(job_s):>11,.0f} records/s)"
        f"  min {min(job_s):.2f} max {max(job_s):.2f}  (from execute() to the results in the client: start-up included)",
        f"  ratio loop/job: median {statistics.median(ratios):.2f}x, min {ratios[0]:.2f}x, max {ratios[-1]:.2f}x",
    ]


def report(args: argparse.Namespace) -> list[str]:
    when = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return [f"# benchmarks/streaming_eventtime.py, {when}",
            f"# {platform.platform()}; {cores} cores; Python {platform.python_version()}; load average before: "
            + " ".join(f"{x:.2f}" for x in os.getloadavg()),
            *latency_section(args), "", *window_section(args),
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
    args, _ = parser.parse_known_args(argv)
    args.seconds = args.seconds or (1.5 if args.quick else 5.0)
    args.warmup = args.warmup if args.warmup is not None else (0.5 if args.quick else 1.0)
    args.repeat = args.repeat or (1 if args.quick else 3)
    args.records = args.records or (100_000 if args.quick else 1_000_000)
    args.output = args.output or (None if args.quick else RESULTS)
    return args


def main(argv: list[str] | None = None) -> None:
    args = parse(argv)
    lines = report(args)
    print("\n".join(lines))
    if args.output is not None:
        with open(args.output, "a", encoding="utf-8") as f:
            f.write("\n" + "\n".join(lines) + "\n")
        print(f"appended to {args.output}")


if __name__ == "__main__":
    main(sys.argv[1:])
