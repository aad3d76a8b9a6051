"""Rollback in place without checkpointing (issue 28.1, ``docs/failover.md``): a job that takes
no checkpoints rolls back to its start, the survivors in their processes (no second
``open()``), and its output is what an uninterrupted run gives (real processes, fake GPUs)."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model, opens, published

from accelflow import Environment
from accelflow.connectors.files import FileSink

N = 2000
#: no ``execution.checkpointing.interval``: a restart strategy is what allows a failover
UNCHECKED = {"parallelism.default": 3, "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"}


def _opened_once_each(tmp_path: Path) -> int:
    """How many processes opened the model (each once)."""
    pids = Counter(pid for pid, _, _ in opens(tmp_path))
    assert max(pids.values()) == 1, pids
    return len(pids)


def test_a_sigkilled_subtask_of_an_unchecked_job_is_replaced_and_the_others_rewind_in_place(
        gpu_conf: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="accelflow.runtime")
    env = Environment({**gpu_conf, **UNCHECKED})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.01, fail="kill", at=1200), batch_size=10, name="model",
                     resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("unchecked kill")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))  # as an uninterrupted run: none lost, none twice
    assert result.attempts == 2 and _opened_once_each(tmp_path) == 3 + 1  # the replacement only
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.replaced == ["model -> files (2/3)"]
    assert len(failover.rolled_back) == 5  # 3 sources, 2 models
    assert "rolled back in place: 5 survivors" in caplog.text and "(attempt 2, from the start)" in caplog.text


def test_keyed_state_is_reset_and_ended_sources_read_again(fpga_conf: dict[str, Any], tmp_path: Path,
                                                          caplog: pytest.LogCaptureFixture) -> None:
    # the sources end (and wait for the others, as at a final checkpoint) before the model fails
    caplog.set_level(logging.INFO, logger="accelflow.runtime")
    env = Environment({**fpga_conf, **UNCHECKED, "execution.runtime-mode": "batch"})  # final sums
    sums = (env.from_source(Counted(N, chunk=10, ended=tmp_path), name="numbers").rebalance()
            .map_batches(Model(tmp_path, batch_s=0.005, fail="raise", at=1500, ended_first=3), batch_size=10,
                         name="model")
            .key_by(lambda x: int(x) // 50).reduce(lambda a, b: a + b, name="sums"))  # new keys keep coming
    # a survivor's sums not reset would count the records before the failure twice
    assert sorted(sums.execute_and_collect("unchecked keyed")) == sorted(sum(range(k, k + 50)) for k in range(0, N, 50))
    assert len((tmp_path / "ended.log").read_text().splitlines()) == 3 + 3  # every source read its split again
    assert _opened_once_each(tmp_path) == 3 + 1
    assert "rolled back in place" in caplog.text and "from the start" in caplog.text
    assert "full restart" not in caplog.text


def test_in_place_false_still_restarts_every_subtask(fpga_conf: dict[str, Any], tmp_path: Path) -> None:
    env = Environment({**fpga_conf, **UNCHECKED, "execution.failover.in-place": False})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.005, fail="raise", at=1200), batch_size=10, name="model")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("unchecked full")
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert failover.path == "full" and failover.why_full == "execution.failover.in-place is false"
    assert _opened_once_each(tmp_path) == 3 + 3
