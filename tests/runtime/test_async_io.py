"""Async I/O (``AsyncDataStream``) on the local cluster: ordered and unordered results, the
capacity bound, timeouts (the function's fallback or a clear error naming the operator), a
function that is not a coroutine (a config error naming the operator once), and in-flight
inputs in checkpoints."""

from __future__ import annotations

import subprocess
import sys
from datetime import timedelta
from pathlib import Path
from typing import Any

import pytest
from event_jobs import Concurrency, PacedSource, ScalarFallback, Slow, SlowWithFallback, TimesTen

from accelflow import AsyncDataStream, ConfigError, Environment, JobError, Time


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


PLAIN_INVOKE = """\
from accelflow import AsyncDataStream, AsyncFunction, Environment


class Lookup(AsyncFunction):
    def async_invoke(self, value):  # no "async": returns the outputs, not an awaitable
        return [value]


env = Environment()
AsyncDataStream.ordered_wait(env.from_elements(7), Lookup(), 1000, name="lookup").print()
env.execute()
"""


def test_a_non_coroutine_async_invoke_is_a_config_error_naming_the_operator_once(tmp_path: Path) -> None:
    """``accelflow run``: the user's function raised nothing; the error says what to change."""
    script = tmp_path / "job.py"
    script.write_text(PLAIN_INVOKE, encoding="utf-8")
    done = subprocess.run([sys.executable, "-m", "accelflow", "run", str(script)], capture_output=True,
                          text=True, timeout=120, cwd=tmp_path)
    assert done.returncode == 2  # a config error's exit status
    first = done.stderr.splitlines()[0]
    assert first.startswith("accelflow: config error: subtask ") and first.count("'lookup'") == 1, first
    assert first.endswith(
        "failed: operator 'lookup': async_invoke returned list [7], not an awaitable: define it with "
        "'async def async_invoke(self, value)', or return an awaitable (e.g. loop.run_in_executor(...)); a "
        "function that returns its outputs at once belongs in map or flat_map, not AsyncDataStream"), first
    assert "raised" not in done.stderr and "JobError" not in done.stderr


def test_a_plain_function_returning_its_outputs_and_a_timeout_returning_a_scalar_are_named_as_such() -> None:
    env = Environment()
    AsyncDataStream.ordered_wait(env.from_elements(7), lambda v: [v], 1000, name="lookup").print()
    with pytest.raises(ConfigError, match=r"failed: operator 'lookup': the async function returned list \[7\], not an "
                                          r"awaitable: define it with 'async def', or return an awaitable"):
        env.execute()
    env = Environment()
    AsyncDataStream.ordered_wait(env.from_elements(7), ScalarFallback(), 50, name="lookup").print()
    with pytest.raises(JobError, match=r"failed: operator 'lookup': timeout must return the input's outputs as a list "
                                       r"\(PyFlink's AsyncFunction\), got str 'late'"):
        env.execute()
