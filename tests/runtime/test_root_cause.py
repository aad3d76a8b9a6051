"""Which failure a job reports when one subtask dies under others (``docs/failover.md``,
*Which failure is reported*): the subtask that died, not a neighbour that only saw its data
channel close (real processes, local cluster).

Each job: a source of parallelism 2 whose chunks go through the channels' shared-memory rings
(``rebalance``: both sources send to both maps) into a ``map_batches`` whose second subtask
dies at its first batch while the sources are blocked on its credits. Where the job does not
roll back in place, both sources then fail with ``ChannelClosed`` at the same moment as the
map's own failure is reported: before the fix, whichever reached the JobManager first was the
job's error (and the full restart's failed subtask), often a source's. Where it rolls back in
place, the sources wait for their rollback instead: that test guards that only the map is
replaced.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted
from root_cause_jobs import ROWS, DieOnce

from accelflow import Environment, JobError, TransportError

#: how often each racy job runs: before the fix, at least one of them named a source
RUNS = 5
_KILLED = r"^subtask model -> drop \(2/2\) on taskexecutor-\d exited with code -9 \(killed by SIGKILL\) without finishing$"


def _job(conf: dict[str, Any], directory: Path, how: str, n: int = 10**9) -> Environment:
    env = Environment({"parallelism.default": 2, "local.number-taskmanager": 2,
                       "taskmanager.numberOfTaskSlots": 2, **conf})
    (env.from_source(Counted(n, chunk=ROWS), name="numbers")
        .rebalance()
        .map_batches(DieOnce(directory, how), batch_size=ROWS, name="model")
        .add_sink(lambda row: None, name="drop"))
    return env


def _failure(tmp_path: Path, how: str, run: int) -> JobError:
    directory = tmp_path / f"run-{run}"
    directory.mkdir()
    with pytest.raises(JobError) as info:
        _job({"restart-strategy": "none"}, directory, how).execute(f"{how} {run}")
    return info.value


@pytest.mark.parametrize("run", range(RUNS))
def test_a_sigkilled_subtask_is_the_jobs_error_not_the_upstream_that_saw_its_channel_close(
        tmp_path: Path, run: int) -> None:
    error = _failure(tmp_path, "kill", run)
    assert not isinstance(error, TransportError), error
    assert re.match(_KILLED, str(error)), str(error)


@pytest.mark.parametrize("run", range(RUNS))
def test_a_raising_subtask_reaches_except_as_the_users_class(tmp_path: Path, run: int) -> None:
    error = _failure(tmp_path, "raise", run)
    assert isinstance(error, ValueError) and not isinstance(error, TransportError), error
    text = str(error)
    assert re.match(r"subtask model -> drop \(2/2\) on taskexecutor-\d failed$", text.splitlines()[0]), text
    assert re.search(r"ValueError: bad batch starting at \d+$", text.rstrip()), text


def test_an_in_place_rollback_replaces_only_the_killed_subtask(tmp_path: Path) -> None:
    env = _job({"execution.checkpointing.interval": "100 ms", "restart-strategy.fixed-delay.delay": "0 s"},
               tmp_path, "kill", n=400 * ROWS)
    client = env.execute_async("in place")
    result = client.wait(120)
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert failover.path == "in-place" and result.attempts == 2
    assert failover.failed == failover.replaced == ["model -> drop (2/2)"]
    assert sorted(failover.rolled_back) == ["model -> drop (1/2)", "numbers (1/2)", "numbers (2/2)"]
    assert re.match(_KILLED, failover.cause), failover.cause


@pytest.mark.parametrize("run", range(RUNS))
def test_a_full_restart_records_the_killed_subtask_as_the_failed_one(tmp_path: Path, run: int) -> None:
    env = _job({"execution.failover.in-place": False, "restart-strategy": "fixed-delay",
                "restart-strategy.fixed-delay.attempts": 1, "restart-strategy.fixed-delay.delay": "0 s"},
               tmp_path, "kill", n=400 * ROWS)
    client = env.execute_async("full")
    result = client.wait(120)
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert failover.path == "full" and result.attempts == 2
    assert failover.failed[0] == "model -> drop (2/2)", failover.failed
    assert re.match(_KILLED, failover.cause), failover.cause
