"""Rollback in place (issue 28.1): a failed subtask is replaced alone, the others go back to
the latest checkpoint inside their processes without calling ``open()`` again, and the output
stays exactly once (real processes, fake GPUs)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from failover_jobs import Counted, Model, opens, published

from accelflow import Environment
from accelflow.connectors.files import FileSink
from accelflow.runtime.rest import cluster_view, render_metrics

N = 2000


def _gpu_job(conf: dict[str, Any], tmp_path: Path, model: Model, **extra: Any) -> Environment:
    env = Environment({**conf, "parallelism.default": 4, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", **extra})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(model, batch_size=10, name="model", resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def _survivors_opened_once(tmp_path: Path) -> tuple[int, int]:
    """(opens, distinct processes): each process opened once."""
    seen = opens(tmp_path)
    pids = Counter(pid for pid, _, _ in seen)
    assert max(pids.values()) == 1, seen
    return len(seen), len(pids)


def test_a_sigkilled_subtask_is_replaced_and_the_others_roll_back_in_place(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    client = _gpu_job(gpu_conf, tmp_path, Model(tmp_path, batch_s=0.01, fail="kill", at=1200)).execute_async("kill")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    assert result.attempts == 2
    assert _survivors_opened_once(tmp_path) == (5, 5)  # 4, then the replacement only
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.recovery_s is not None
    # the source and the GPU stage are two chains (their resources differ): 7 survivors
    assert failover.replaced == ["model -> files (3/4)"] and len(failover.rolled_back) == 7
    _seen(client, result.job_id, "in-place")


def _seen(client: Any, job_id: str, path: str) -> None:
    """``/v1/jobs/<id>`` and ``/metrics`` show the failover, its path and recovery time."""
    view = cluster_view(client.jobmanager)
    [detail] = [j for j in view["jobs"] if j["id"] == job_id]
    [failover] = detail["failovers"]
    assert failover["path"] == path and failover["recovery_s"] > 0 and failover["cause"]
    if path == "in-place":
        assert sorted(s["recovery"] for s in detail["subtasks"]) == ["replaced"] + ["rolled back"] * 7
    metrics = render_metrics(view).decode()
    other = "full" if path == "in-place" else "in-place"
    assert f'accelflow_job_rollbacks_total{{job="{job_id}",path="{path}"}} 1.0' in metrics
    assert f'accelflow_job_rollbacks_total{{job="{job_id}",path="{other}"}} 0.0' in metrics
    assert f'accelflow_job_recovery_seconds{{job="{job_id}"}} ' in metrics


def test_a_raising_subtask_is_replaced_and_partial_batches_are_dropped(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # batches of 25 from chunks of 10: survivors hold partial batches when the failure comes
    env = Environment({**gpu_conf, "parallelism.default": 4, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.01, fail="raise", at=1200), batch_size=25, name="model",
                     resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("raise")
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))
    assert result.attempts == 2 and _survivors_opened_once(tmp_path) == (5, 5)
    assert [f.path for f in client.jobmanager.jobs[result.job_id].failovers] == ["in-place"]


def test_two_failures_in_a_row_roll_back_twice(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # both records are read by subtask 3/4: its replacement fails again, after the first rollback
    # (failures of two subtasks in one detection window join one rollback: test_failover_several.py)
    client = _gpu_job(gpu_conf, tmp_path, Model(tmp_path, batch_s=0.01, fail="raise", at=1200, at2=1400)
                      ).execute_async("twice")
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))
    assert result.attempts == 3 and _survivors_opened_once(tmp_path) == (6, 6)
    assert [f.path for f in client.jobmanager.jobs[result.job_id].failovers] == ["in-place", "in-place"]


def test_a_failure_during_a_rollback_falls_back_to_a_full_restart(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # the replacement (attempt 1) fails in open(): every subtask restarts (attempt 2)
    client = _gpu_job(gpu_conf, tmp_path, Model(tmp_path, batch_s=0.01, fail="kill", at=1200, fail_open=1)
                      ).execute_async("replacement fails")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    assert result.attempts == 3
    assert [f.path for f in job.failovers] == ["in-place", "full"]
    assert job.failovers[1].why_full == "it failed while the job was still rolling back"
    assert _survivors_opened_once(tmp_path) == (4 + 1 + 4, 9)  # the full restart opens every subtask


def test_a_sigkilled_taskexecutor_whose_subtasks_fit_nowhere_restarts_every_subtask(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    client = _gpu_job(gpu_conf, tmp_path, Model(tmp_path, batch_s=0.02)).execute_async("lost taskexecutor")
    _wait_for(lambda: len(opens(tmp_path)) == 4 and any(r.status == "COMPLETED" for j in client.jobmanager.jobs.values()
                                                        for r in j.checkpoints.history))
    os.kill(client.jobmanager.taskexecutors["taskexecutor-2"].registration.pid, signal.SIGKILL)
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    [failover] = job.failovers
    assert failover.path == "full" and failover.why_full is not None
    # each GPU of taskexecutor-1 is held by a survivor: the 2 lost GPU subtasks fit nowhere
    assert failover.why_full.startswith("no TaskExecutor has room for ")
    assert sorted(failover.failed) == ["model -> files (3/4)", "model -> files (4/4)", "numbers (3/4)", "numbers (4/4)"]
    _seen(client, result.job_id, "full")
    assert _survivors_opened_once(tmp_path) == (8, 8)


def test_keyed_state_of_the_survivors_is_rolled_back(fpga_conf: dict[str, Any], tmp_path: Path) -> None:
    env = Environment({**fpga_conf, "parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.runtime-mode": "batch"})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.005, fail="raise", at=700), batch_size=10, name="model")
        .key_by(lambda x: int(x) // 50).reduce(lambda a, b: a + b, name="sums")  # new keys keep coming
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("keyed")
    result = client.wait(120)
    assert [f.path for f in client.jobmanager.jobs[result.job_id].failovers] == ["in-place"]
    # a survivor's sums not rolled back would count the records after the checkpoint twice
    assert published(tmp_path / "out") == sorted(sum(range(k, k + 50)) for k in range(0, N, 50))
    assert _survivors_opened_once(tmp_path) == (3, 3)


def _wait_for(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out"
        time.sleep(0.01)
