"""Standby subtasks (issue 28.2): opened ahead on spare devices, one takes a failed subtask's
index at once, a new one is deployed in the background, a failed standby is just replaced,
and a job whose standbys do not fit runs without them and says so (real processes, fake GPUs)."""

from __future__ import annotations

from collections import Counter
from pathlib import Path
from typing import Any

from failover_jobs import Counted, Model, calls, opens, published

from accelflow import Environment
from accelflow.connectors.files import FileSink

N = 2000


def _job(conf: dict[str, Any], tmp_path: Path, model: Model, parallelism: int = 3, delay: float = 0.01) -> Environment:
    env = Environment({**conf, "parallelism.default": parallelism, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": 1})
    (env.from_source(Counted(N, chunk=10, delay=delay), name="numbers")
        .map_batches(model, batch_size=10, name="model", resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def _opened(tmp_path: Path) -> list[tuple[int, int, int]]:
    seen = opens(tmp_path)
    assert max(Counter(pid for pid, _, _ in seen).values()) == 1, seen  # every process opened once
    return seen


def test_a_standby_takes_the_failed_subtasks_place_and_another_is_deployed(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # after the kill, the batches wait for the next standby's open(): it waits for the killed
    # subtask's devices (``DevicesFree``), and the job must not end before
    model = Model(tmp_path, batch_s=0.01, fail="kill", at=1200, opens_after=5)
    client = _job(gpu_conf, tmp_path, model).execute_async("standby")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.standby == "model -> files (standby)"
    assert failover.replaced == ["model -> files (2/3)"] and len(failover.rolled_back) == 5
    # 3 subtasks and a standby opened first; then only the next standby (no replacement)
    assert [index for _, index, _ in _opened(tmp_path)][-1] >= 3 and len(opens(tmp_path)) == 5
    standby_pid = next(pid for pid, index, _ in opens(tmp_path) if index == 3)
    assert any(pid == standby_pid for _, pid, index, _ in calls(tmp_path) if index == 1)  # it worked as 2/3
    assert job.standby_missing == {}


def test_a_failed_standby_is_replaced_without_a_restart(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # the kill waits for the failed standby's replacement to be open (3 + 1 + 1 opens: it
    # waited for the failed one's devices, ``DevicesFree``), while the sources still read
    model = Model(tmp_path, batch_s=0.01, fail="kill", at=1200, fail_open="standby", opens_first=5)
    client = _job(gpu_conf, tmp_path, model, delay=0.03).execute_async("standby fails")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    assert result.attempts == 2 and len(job.failovers) == 1  # the standby's failure restarted nothing
    assert job.failovers[0].standby is not None
    assert len(_opened(tmp_path)) == 3 + 1 + 1 + 1  # the failed standby, its replacement, the next one


def test_a_job_whose_standbys_do_not_fit_runs_without_them_and_says_why(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    client = _job(gpu_conf, tmp_path, Model(tmp_path), parallelism=4).execute_async("no room")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    [(chain, why)] = job.standby_missing.items()
    assert chain == "model -> files" and why.startswith("cannot place")
    assert len(opens(tmp_path)) == 4
