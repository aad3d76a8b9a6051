"""Hung subtasks are found (issue 28.4): a subtask stuck in user code for longer than
``heartbeat.timeout`` is dumped (every thread's stack), killed and failed over; one that only
waits for input, or is slow in ``open()``, is left alone (real processes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model, calls, opens, published

from accelflow import Environment, SubtaskHung
from accelflow.connectors.files import FileSink

N = 400
FAST = {"heartbeat.timeout": "1 s", "heartbeat.interval": "100 ms"}


def _env(**conf: Any) -> Environment:
    return Environment({"parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                        "restart-strategy.fixed-delay.delay": "0 s", **FAST, **conf})


def test_a_hung_subtask_fails_the_job_with_its_stack_within_the_timeout(tmp_path: Path) -> None:
    env = _env(**{"restart-strategy": "none"})
    env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers") \
        .map_batches(Model(tmp_path, fail="hang", at=200), batch_size=10, name="model").print()
    client = env.execute_async("hangs")
    with pytest.raises(SubtaskHung) as info:
        client.wait(30)
    assert (tmp_path / "failure.log").read_text().split()[2] == "hang"  # it did hang
    error = info.value
    assert "inside one call of user or device code" in str(error).splitlines()[0]
    assert 'failover_jobs.py", line' in error.stack and "in _fail" in error.stack  # where it hung
    assert error.timeout_s == 1.0  # found by the watchdog (how soon: benchmarks, not tests)


def test_a_hung_subtask_is_replaced_and_the_output_is_exactly_once(tmp_path: Path) -> None:
    env = _env()
    env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers") \
        .map_batches(Model(tmp_path, fail="hang", at=200), batch_size=10, name="model") \
        .sink_to(FileSink(tmp_path / "out"), name="files")
    client = env.execute_async("hangs once")
    result = client.wait(60)
    assert result.attempts == 2
    assert published(tmp_path / "out") == list(range(N))
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert failover.path == "in-place" and "is hung" in failover.cause
    assert len(opens(tmp_path)) == 2 + 1  # the survivor kept its model: only the replacement opened
    hung_at = float((tmp_path / "failure.log").read_text().split()[0])
    assert any(t > hung_at for t, *_ in calls(tmp_path))  # the job went on after the hang


def test_waiting_for_input_and_a_slow_open_are_not_hung(tmp_path: Path) -> None:
    env = _env(**{"restart-strategy": "none"})
    env.from_source(Counted(40, chunk=10, idle=1.5), name="numbers", parallelism=1).rebalance() \
        .map_batches(Model(tmp_path, load_s=2.0), batch_size=10, name="model", parallelism=1) \
        .sink_to(FileSink(tmp_path / "out"), name="files")
    result = env.execute("slow but alive")
    assert result.attempts == 1 and published(tmp_path / "out") == list(range(40))
    assert len(opens(tmp_path)) == 1


def _sleepy(seconds: float, at: int | None = None) -> Any:
    """A map function sleeping ``seconds`` per record (or only at record ``at``)."""
    def call(x: int) -> int:
        if at is None or x == at:
            time.sleep(seconds)
        return x
    return call


@pytest.mark.parametrize("operator", ["map", "flat_map", "filter"])
def test_many_quick_calls_over_a_chunk_are_not_one_long_call(operator: str) -> None:
    # 20 records of 0.3 s in one source chunk: 6 s in the chunk, each call far under 2 s
    env = _env(**{"restart-strategy": "none", "heartbeat.timeout": "2 s", "parallelism.default": 1})
    sleepy = _sleepy(0.3)
    fn = {"map": sleepy, "flat_map": lambda x: [sleepy(x)], "filter": sleepy}[operator]
    out = getattr(env.from_sequence(1, 20), operator)(fn, name="lookup").execute_and_collect()
    assert sorted(out) == list(range(1, 21))


def test_one_long_map_call_is_hung_and_its_error_leads_with_the_user_frames() -> None:
    env = _env(**{"restart-strategy": "none", "parallelism.default": 1})
    with pytest.raises(SubtaskHung) as info:
        env.from_sequence(1, 20).map(_sleepy(60, at=5), name="lookup").execute_and_collect()
    message, stack = str(info.value), info.value.stack
    where = message.split("it was at (innermost first):\n", 1)[1].splitlines()
    assert where[0].startswith('  File "') and "time.sleep" not in where[0]
    assert __file__ in where[0] and where[0].endswith(" in call")  # the user's frame, first
    assert "multiprocessing" not in message and "_runner.py" not in message  # short
    assert "multiprocessing" in stack and "_runner.py" in stack and __file__ in stack  # the whole dump
