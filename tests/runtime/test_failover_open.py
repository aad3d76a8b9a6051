"""A subtask that fails at once in ``open()`` of a job without checkpointing, before the
survivors next to it have connected to it, is rolled back in place like any other failure
(``docs/failover.md``; real processes, fake GPUs).

Before the fix a survivor upstream retried the dead subtask's address until its connect gave
up (60 s, ``CONNECT_TIMEOUT_S``; "recovered in 60.02 s"), one that had connected while the
other was still in ``open()`` failed too (a full restart: "every subtask of the job failed"),
and one downstream waited in ``accept()`` for a channel that never came, without reading its
``Rollback``, until the watchdog killed the upstream survivors (a full restart). The bound
passed to ``wait`` is far below those 60 s and far above what the job takes (a second or
two); the assertions are on the outcome: the path taken, the attempts, the output.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import published
from warm_jobs import WhereAmI, lines

from accelflow import Environment
from accelflow._errors import JobError
from accelflow.connectors.files import FileSink

#: no checkpointing: the rollback goes to the job's start (a restart strategy allows it)
UNCHECKED = {"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"}
BOUND_S = 40


def _run(conf: dict[str, Any], tmp_path: Path, parallelism: int, failures: int, shape: str = "gpu map",
         **extra: Any) -> Any:
    """``from_sequence(1, 20)`` through a GPU map whose ``open()`` raises at once in the first
    ``failures`` attempts, into files: ``gpu map`` right after the source (which is still
    connecting to it), ``keyed`` with a keyed map after it (which waits for its channel),
    ``after keyed`` behind a ``key_by`` (the sources may have read everything already)."""
    env = Environment({**conf, **UNCHECKED, "parallelism.default": parallelism, **extra})
    stream = env.from_sequence(1, 20)
    if shape == "after keyed":
        stream = stream.map(lambda x: x, name="before").key_by(lambda x: x % 2)
    stream = stream.map(WhereAmI(str(tmp_path / "where.log"), marker=None, failures=failures),
                        resources={"gpu": 1}, name="where")
    if shape == "keyed":
        stream = stream.key_by(lambda x: x % 2).map(lambda x: x, name="after")
    stream.sink_to(FileSink(tmp_path / "out"), name="files")
    client = env.execute_async(shape)
    try:
        result = client.wait(BOUND_S)
    except TimeoutError:
        client.cancel()  # nothing left behind by the failing test
        raise
    return result, client.jobmanager.jobs[result.job_id]


def _opened(tmp_path: Path) -> list[str]:
    """The attempt of each ``open()`` of the GPU map, in order."""
    return sorted(w[2] for w in lines(tmp_path / "where.log", "where"))


@pytest.mark.parametrize(("shape", "parallelism"), [("gpu map", 1), ("gpu map", 2), ("keyed", 2),
                                                    ("after keyed", 2)])
def test_a_map_failing_at_once_in_open_is_replaced_in_place(gpu_conf: dict[str, Any], tmp_path: Path,
                                                            caplog: pytest.LogCaptureFixture, shape: str,
                                                            parallelism: int) -> None:
    caplog.set_level(logging.INFO, logger="accelflow.runtime")
    result, job = _run(gpu_conf, tmp_path, parallelism, failures=1, shape=shape)
    assert published(tmp_path / "out") == list(range(1, 21))  # none lost, none twice
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.why_full is None, failover.why_full
    assert len(failover.replaced) == parallelism and all(n.startswith("where") for n in failover.replaced)
    assert result.attempts == 2 and _opened(tmp_path) == ["0"] * parallelism + ["1"] * parallelism
    assert "(attempt 2, from the start)" in caplog.text and "(in-place)" in caplog.text  # recovered in ...


def test_a_replacement_failing_in_open_again_restarts_every_subtask(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    result, job = _run(gpu_conf, tmp_path, 1, failures=2)
    assert published(tmp_path / "out") == list(range(1, 21))
    assert [f.path for f in job.failovers] == ["in-place", "full"]
    assert job.failovers[1].why_full == "it failed while the job was still rolling back"
    assert result.attempts == 3 and _opened(tmp_path) == ["0", "1", "2"]


@pytest.mark.parametrize(("extra", "error"), [
    ({"restart-strategy.fixed-delay.attempts": 1}, "attempt 1 fails on purpose"),  # the rollback took it
    ({"restart-strategy": "none"}, "attempt 0 fails on purpose"),
])
def test_with_no_restart_left_the_job_fails_with_the_users_error(gpu_conf: dict[str, Any], tmp_path: Path,
                                                                 extra: dict[str, Any], error: str) -> None:
    with pytest.raises(JobError, match=error):
        _run(gpu_conf, tmp_path, 1, failures=2, **extra)
