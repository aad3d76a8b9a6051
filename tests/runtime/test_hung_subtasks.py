"""Hung subtasks are found (issue 28.4): a subtask stuck in user code for longer than
``heartbeat.timeout`` is dumped (every thread's stack), killed and failed over; one that only
waits for input, or is slow in ``open()``, is left alone (real processes)."""

from __future__ import annotations

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
