"""Async I/O (``AsyncDataStream``) on the local cluster: ordered and unordered results, the
capacity bound, timeouts (the function's fallback or a clear error naming the operator), and
in-flight inputs in checkpoints."""

from __future__ import annotations

from datetime import timedelta
from typing import Any

import pytest
from event_jobs import Concurrency, PacedSource, Slow, SlowWithFallback, TimesTen

from accelflow import AsyncDataStream, Environment, JobError, Time


def test_ordered_wait_keeps_the_input_order_and_unordered_wait_does_not_wait_for_slow_calls() -> None:
    records = [1, 2, 3, 4]  # TimesTen answers 1 after 80 ms, 4 after 20 ms
    env = Environment()
    ordered = AsyncDataStream.ordered_wait(env.from_source(PacedSource(records, 0.0)), TimesTen(),
                                           timedelta(seconds=10), capacity=10)
    assert ordered.execute_and_collect() == [10, 20, 30, 40]
    env = Environment({"execution.buffer-timeout": 0})  # all four in flight at once, the source then waits
    source = env.from_source(PacedSource(records, 0.0, tail_s=1.0)).rebalance()
    unordered = AsyncDataStream.unordered_wait(source, TimesTen(), Time.seconds(10), capacity=10)
    assert unordered.execute_and_collect() == [40, 30, 20, 10]


def test_no_more_calls_than_the_capacity_run_at_once() -> None:
    env = Environment()
    stream = AsyncDataStream.unordered_wait(env.from_sequence(1, 40), Concurrency(), 10_000, capacity=3)
    seen = stream.execute_and_collect()
    assert len(seen) == 40 and max(seen) == 3


def test_a_call_past_the_timeout_fails_the_job_naming_the_operator() -> None:
    env = Environment()
    AsyncDataStream.ordered_wait(env.from_elements(7), Slow(), timedelta(milliseconds=50), name="lookup").print()
    with pytest.raises(JobError, match=r"operator 'lookup': async I/O of 7 did not finish within 50 ms; raise "
                                       r"the timeout, or override AsyncFunction.timeout\(value\)"):
        env.execute()


def test_a_timeout_override_emits_its_outputs_instead() -> None:
    env = Environment()
    stream = AsyncDataStream.unordered_wait(env.from_elements(7, 8), SlowWithFallback(), 50)
    assert sorted(stream.execute_and_collect()) == [("timed out", 7), ("timed out", 8)]


async def plus_one(value: Any) -> list[Any]:
    return [value + 1]


def test_a_plain_coroutine_function_works_too() -> None:
    env = Environment({"parallelism.default": 2})
    stream = AsyncDataStream.ordered_wait(env.from_sequence(1, 5), plus_one, 1000)
    assert sorted(stream.execute_and_collect()) == [2, 3, 4, 5, 6]
