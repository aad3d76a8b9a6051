"""A subtask that fails in ``open()`` at once, before the survivors upstream have connected
to it, is rolled back in place like any other failure (``docs/failover.md``): the survivor
waiting to connect to it takes its ``Rollback`` there, instead of retrying the dead
subtask's address until its connect gives up (60 s; real processes, fake GPUs).

The bound passed to ``wait`` is what fails without the fix: far below that 60 s, far above
what the job takes (a few seconds); the assertions are on the outcome only."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import published
from warm_jobs import WhereAmI, lines

from accelflow import Environment
from accelflow.connectors.files import FileSink

#: no checkpointing: the rollback goes to the job's start (a restart strategy allows it)
UNCHECKED = {"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"}
BOUND_S = 40  # the job takes seconds; the survivor's connect gave up only after 60


def _job(conf: dict[str, Any], tmp_path: Path, parallelism: int, failures: int, **extra: Any) -> Any:
    env = Environment({**conf, **UNCHECKED, "parallelism.default": parallelism, **extra})
    (env.from_sequence(1, 20).map(WhereAmI(str(tmp_path / "where.log"), marker=None, failures=failures),
                                 resources={"gpu": 1}, name="where")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env.execute_async("fails in open")


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_map_failing_at_once_in_open_is_replaced_in_place(gpu_conf: dict[str, Any], tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture, parallelism: int) -> None:
    caplog.set_level(logging.INFO, logger="accelflow.runtime")
    client = _job(gpu_conf, tmp_path, parallelism, failures=1)
    result = client.wait(BOUND_S)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(1, 21))
    print(caplog.text)
    assert [f.path for f in job.failovers] == ["in-place"] * len(job.failovers)
