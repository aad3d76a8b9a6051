"""Rollback in place on the Ray target (issues 27 and 28, ``docs/ray.md``): a failed subtask
is replaced alone inside its TaskExecutor actor, the survivors roll back to the latest
checkpoint in their processes without calling ``open()`` again, and their data channels,
relayed between the two actors through Ray actor calls, are rebuilt for the new epoch."""

from __future__ import annotations

import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model, opens, published

from accelflow import Environment
from accelflow.connectors.files import FileSink

pytestmark = pytest.mark.slow

N = 3000


def _job(ray_conf: dict[str, Any], tmp_path: Path, model: Model) -> Environment:
    """Parallelism 3 on two actors of two slots: ``rebalance`` sends every source subtask's
    chunks to every model subtask, so the failed one's inputs come through the relay from
    both actors (in process from its own, by actor calls from the other)."""
    env = Environment({**ray_conf, "parallelism.default": 3, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .rebalance()
        .map_batches(model, batch_size=10, name="model")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def test_a_sigkilled_subtask_on_ray_is_replaced_and_the_others_roll_back_in_place(
        ray_conf: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="accelflow.runtime")
    client = _job(ray_conf, tmp_path, Model(tmp_path, batch_s=0.01, fail="kill", at=1100)).execute_async("kill on ray")
    result = client.wait(180)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))  # exactly once
    assert result.attempts == 2
    [failover] = job.failovers
    assert failover.path == "in-place", failover.why_full
    assert len(failover.replaced) == 1 and len(failover.rolled_back) == 5
    seen = opens(tmp_path)
    per_process = Counter(pid for pid, _, _ in seen)
    assert max(per_process.values()) == 1 and len(seen) == 4, seen  # 3, then the replacement only
    assert "rolled back in place: 5 survivors" in caplog.text
    placed = {client.jobmanager.state.subtasks[key].taskexecutor for key in client.jobmanager.state.subtasks
              if key.job_id == result.job_id}
    assert placed == {"taskexecutor-1", "taskexecutor-2"}  # the relay carried channels between actors
