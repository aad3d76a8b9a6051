"""Checkpoints and recovery with TaskExecutors as Ray actors: checkpoint commands reach the
subtasks through the actors, barriers travel through the relay, and a restarted job resumes
from its last checkpoint with every record published once."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from runtime_jobs import CommitLog, FailFirstAttempt, Paced, published

from accelflow import Environment

pytestmark = pytest.mark.slow


def test_a_failed_attempt_resumes_from_its_checkpoint_on_ray(ray_conf: dict[str, Any], tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    n = 3000
    env = Environment({**ray_conf, "parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Paced(n, chunk=20, delay=0.01), name="numbers")
        .rebalance()
        .map(FailFirstAttempt(n - 100), name="flaky")  # fails late in the first attempt
        .map(lambda pair: pair[0], name="value")
        .sink_to(CommitLog(str(out)), name="log"))
    result = env.execute("flaky on ray")
    assert result.attempts == 2
    assert sorted(published(out)) == list(range(n))
    # the first attempt published through its checkpoints, and the second did not repeat them
    assert any(p.name.endswith("-0") for p in out.iterdir() if not p.name.startswith("."))
