"""Several subtasks failing at once are rolled back in place too (issue 28, ``docs/failover.md``):
a SIGKILLed TaskExecutor holding half of the job's subtasks, and a hardware Xid on a GPU shared
by two subtasks. The survivors roll back once in their processes (no second ``open()``), each
failed subtask is replaced where placement finds room, and the output stays exactly once (real
processes, fake GPUs)."""

from __future__ import annotations

import os
import signal
import time
from collections import Counter
from pathlib import Path
from typing import Any

from failover_jobs import Counted, Model, opens, published

from accelflow import Environment
from accelflow.runtime.rest import cluster_view, render_metrics
from accelflow.connectors.files import FileSink

N = 2000


def _shared_gpu_job(conf: dict[str, Any], tmp_path: Path, **extra: Any) -> Environment:
    """numbers -> model ({"gpu": 0.5}) -> files, 4 subtasks each."""
    env = Environment({**conf, "parallelism.default": 4, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", **extra})
    (env.from_source(Counted(N, chunk=10, delay=0.01), name="numbers")
        .map_batches(Model(tmp_path, batch_s=0.02), batch_size=10, name="model", resources={"gpu": 0.5})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def _running(client: Any, tmp_path: Path) -> Any:
    """The job once its 4 models are open and a checkpoint completed."""
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        job = next(iter(client.jobmanager.jobs.values()), None)
        if job is not None and len(opens(tmp_path)) == 4 and job.checkpoints.completed >= 1:
            return job
        time.sleep(0.01)
    raise AssertionError("the job did not run and checkpoint in time")


def _opened_once_each(tmp_path: Path) -> int:
    """How many processes opened the model (each once)."""
    pids = Counter(pid for pid, _, _ in opens(tmp_path))
    assert max(pids.values()) == 1, pids
    return len(pids)


def test_a_sigkilled_taskexecutor_with_half_the_subtasks_is_confined(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # spread: indexes 1 and 3 on taskexecutor-1, 2 and 4 on taskexecutor-2, each model on its own GPU
    client = _shared_gpu_job(gpu_conf, tmp_path, **{"scheduler.placement-policy": "spread"}).execute_async("lost te")
    job = _running(client, tmp_path)
    lost = {st.name for st in client.jobmanager.state.subtasks.values()
            if st.key.job_id == job.id and st.taskexecutor == "taskexecutor-2"}
    assert len(lost) == 4
    os.kill(client.jobmanager.taskexecutors["taskexecutor-2"].registration.pid, signal.SIGKILL)
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))  # none lost, none twice
    [failover] = job.failovers
    assert failover.path == "in-place" and failover.why_full is None
    assert sorted(failover.replaced) == sorted(lost) and len(failover.rolled_back) == 4
    assert result.attempts == 2 and _opened_once_each(tmp_path) == 4 + 2  # the 2 models of taskexecutor-2 only
    view = cluster_view(client.jobmanager)
    [detail] = [j for j in view["jobs"] if j["id"] == result.job_id]
    assert sorted(s["recovery"] for s in detail["subtasks"]) == ["replaced"] * 4 + ["rolled back"] * 4
    assert sorted(detail["failovers"][0]["replaced"]) == sorted(lost)
    assert f'accelflow_job_rollbacks_total{{job="{result.job_id}",path="in-place"}} 1.0' in \
        render_metrics(view).decode()


def test_a_hardware_xid_on_a_shared_gpu_replaces_both_of_its_subtasks(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    # pack: one GPU of a TaskExecutor holds the models of indexes 1 and 2, its other one those of 3 and 4
    client = _shared_gpu_job(gpu_conf, tmp_path).execute_async("xid")
    job = _running(client, tmp_path)
    held = {st.name: (st.taskexecutor, st.devices["gpu"][0][0]) for st in client.jobmanager.state.subtasks.values()
            if st.key.job_id == job.id and st.devices.get("gpu")}
    te, gpu = held["model -> files (1/4)"]
    on_gpu = {name for name, where in held.items() if where == (te, gpu)}
    assert len(on_gpu) == 2, held
    client.jobmanager.inject_fault(te, gpu, 79)
    result = client.wait(120)
    assert published(tmp_path / "out") == list(range(N))
    [failover] = job.failovers
    assert failover.path == "in-place" and sorted(failover.replaced) == sorted(on_gpu)
    assert len(failover.rolled_back) == 6
    assert result.attempts == 2 and _opened_once_each(tmp_path) == 4 + 2  # the other 2 models not reopened
    moved = [st for st in client.jobmanager.state.subtasks.values()
             if st.key.job_id == job.id and st.key.attempt == 1 and st.name in on_gpu]
    assert len(moved) == 2 and all((st.taskexecutor, st.devices["gpu"][0][0]) != (te, gpu) for st in moved)


def test_a_survivor_that_ended_before_its_rollback_is_reported_gone_under_its_new_key() -> None:
    # it ended (its exit went out under its old key) after the JobManager had decided: the new
    # epoch must hear that it lacks it, or every other subtask waits for it for ever
    import multiprocessing

    from accelflow.resources import ExternalResourceInfoProvider
    from accelflow.runtime import Rollback, SubtaskExited, SubtaskKey
    from accelflow.runtime.taskexecutor import TaskExecutor

    jm, te_end = multiprocessing.Pipe()
    te = TaskExecutor("taskexecutor-1", te_end, ExternalResourceInfoProvider(), slots=1)
    old, new = SubtaskKey("job-1", 0, 1, 0), SubtaskKey("job-1", 1, 1, 0)
    jm.send(Rollback(old, new, 0, None, None, None, 0, ()))
    assert te._command()
    assert jm.poll(5) and jm.recv() == SubtaskExited(new, None)
