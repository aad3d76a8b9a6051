"""Event time through failures and rescaling (Flink's guarantees): window contents, timers,
keyed state, watermark generators and async inputs in flight are in the checkpoints, restored
exactly after a TaskExecutor is killed (SIGKILL) and redistributed by key group when a job
resumes at another parallelism; an exactly-once sink then shows every result once."""

from __future__ import annotations

from collections import defaultdict
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from event_jobs import Enrich, FirstSeen, window_sum
from runtime_jobs import CommitLog, Paced, published
from test_checkpointing import _rescaled, _completed, _conf, _kill_a_taskexecutor, _wait_until

from accelflow import AsyncDataStream, Environment, Time, TumblingEventTimeWindows, WatermarkStrategy

pytestmark = pytest.mark.slow

N = 6000
KEYS = 5
STAMPS = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=10)) \
    .with_timestamp_assigner(lambda x, ts: x)


def windowed_job(env: Environment, out: Path, source: Any) -> None:
    """Record x (event time x ms) of key x % 5, summed per key in tumbling 500 ms windows,
    then an async lookup, into an exactly-once sink."""
    sums = (env.from_source(source, name="numbers").assign_timestamps_and_watermarks(STAMPS)
            .map(lambda x: (x % KEYS, x, x, 1), name="pair").uid("pair")
            .key_by(lambda r: r[0]).window(TumblingEventTimeWindows.of(Time.milliseconds(500)))
            .reduce(window_sum, name="sums").uid("window"))
    AsyncDataStream.ordered_wait(sums, Enrich(), timedelta(seconds=10), capacity=20, name="enrich") \
        .sink_to(CommitLog(str(out)), name="log")


def expected_windows() -> list[Any]:
    """What an uninterrupted run gives: one result per (key, window)."""
    windows: dict[tuple[int, int], list[int]] = defaultdict(list)
    for x in range(N):
        windows[(x % KEYS, x // 500)].append(x)
    return sorted(["enriched", k, min(xs), sum(xs), len(xs)] for (k, _), xs in windows.items())


def test_a_windowed_job_killed_mid_window_emits_every_window_once_as_an_uninterrupted_run(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = Environment(_conf(tmp_path, **{"restart-strategy": "fixed-delay"}))
    windowed_job(env, out, Paced(N, chunk=20, delay=0.01))
    client = env.execute_async("windows")
    _wait_until(lambda: _completed(client) >= 3, "three checkpoints")
    _kill_a_taskexecutor(client)  # mid-window: every key has a window open with records in it
    result = client.wait(120)
    assert result.attempts == 2
    assert sorted(published(out)) == expected_windows()

    uninterrupted = tmp_path / "uninterrupted"
    uninterrupted.mkdir()
    env = Environment({"parallelism.default": 2})
    windowed_job(env, uninterrupted, Paced(N, chunk=500, delay=0.0))
    env.execute("windows, uninterrupted")
    assert sorted(published(uninterrupted)) == expected_windows()


def test_keyed_state_and_timers_follow_their_key_groups_to_another_parallelism(tmp_path: Path) -> None:
    """As from a Flink savepoint: a job cancelled at p=2 resumes at p=3; every key's state
    and pending timer are in the subtask its records now go to, so each key's timer fires
    once, with the count of all its records."""
    out = tmp_path / "out"
    out.mkdir()
    n, keys = 3000, 50
    conf = _conf(tmp_path, **{"execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})

    def job(env: Environment, bounded: bool, delay: float) -> None:
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda x, ts: 0)
        (env.from_source(Paced(n, chunk=20, delay=delay, bounded=bounded), name="numbers")
            .assign_timestamps_and_watermarks(strategy)
            .key_by(lambda x: x % keys).process(FirstSeen(), name="first").uid("first-seen")
            .sink_to(CommitLog(str(out)), name="log"))

    _rescaled(conf, job)
    fired = sorted(tuple(r) for r in published(out))
    assert fired == [(key, 0, n // keys) for key in range(keys)]
