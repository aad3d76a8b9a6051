"""Rollback in place of event-time state (issues 28 and 30): the survivors of a SIGKILLed
subtask reset and restore their window contents, keyed state, timers and watermark positions
inside their processes, without calling ``open()`` again, and the output is what an
uninterrupted run gives, exactly once (real processes)."""

from __future__ import annotations

from collections import Counter, defaultdict
from pathlib import Path
from typing import Any

from event_jobs import add_second
from failover_jobs import Counted, Delayed, Model, opens

from accelflow import Environment, Time, TumblingEventTimeWindows, WatermarkStrategy
from accelflow.connectors.files import FileSink

N = 2000
KEYS = 5
STAMPS = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda x, ts: int(x))


def _job(env: Environment, tmp_path: Path, model: Model) -> None:
    """Record x (event time x ms) of key x % 5: summed per key in tumbling 100 ms windows
    (one sink), and each window result held in keyed state until an event-time timer 100 ms
    after it (another sink)."""
    sums = (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
            .map_batches(model, batch_size=10, name="model")
            .assign_timestamps_and_watermarks(STAMPS)
            .map(lambda x: (int(x) % KEYS, int(x)), name="pair")
            .key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.milliseconds(100)))
            .reduce(add_second, name="sums"))
    sums.map(lambda r: f"{r[0]} {r[1]}", name="sum-text").sink_to(FileSink(tmp_path / "sums"), name="sum-files")
    (sums.key_by(lambda r: r[0]).process(Delayed(tmp_path), name="delayed")
        .map(lambda r: f"{r[0]} {r[1]} {r[2]}", name="delayed-text")
        .sink_to(FileSink(tmp_path / "delayed"), name="delayed-files"))


def _lines(directory: Path) -> list[str]:
    return sorted(line for p in directory.glob("part-*") for line in p.read_text().splitlines())


def _expected() -> tuple[list[str], list[str]]:
    sums: dict[tuple[int, int], int] = defaultdict(int)
    for x in range(N):
        sums[(x % KEYS, x // 100)] += x
    # a window's result has its end - 1 for time, and comes out of ``Delayed`` 100 ms later
    return (sorted(f"{k} {s}" for (k, _), s in sums.items()),
            sorted(f"{k} {w * 100 + 199} {s}" for (k, w), s in sums.items()))


def test_windows_keyed_state_and_timers_of_the_survivors_roll_back_in_place(fpga_conf: dict[str, Any],
                                                                             tmp_path: Path) -> None:
    env = Environment({**fpga_conf, "parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    _job(env, tmp_path, Model(tmp_path, batch_s=0.005, fail="kill", at=1300))
    client = env.execute_async("event time, killed")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert [f.path for f in job.failovers] == ["in-place"]
    assert (_lines(tmp_path / "sums"), _lines(tmp_path / "delayed")) == _expected()  # exactly once
    # the model's survivor and both ``Delayed`` subtasks opened once; only the killed one was replaced
    assert len(opens(tmp_path)) == 3 and max(Counter(pid for pid, _, _ in opens(tmp_path)).values()) == 1
    delayed_opens = (tmp_path / "delayed-opens.log").read_text().splitlines()
    assert len(delayed_opens) == 2, delayed_opens
