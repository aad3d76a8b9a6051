"""A checkpoint barrier gets past a slow operator chained to its source between slices of a
source chunk, not after the whole chunk (review finding 3, Flink injects barriers between a
source's records): the records processed before the first checkpoint are far fewer than a
chunk, and a job resumed from a checkpoint taken mid-chunk publishes every record once
(real processes)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import published

from accelflow import Environment, JobCancelledError
from accelflow.connectors.files import FileSink

N = 300  # one source chunk (CHUNK_RECORDS is 1024): 3 s through a map of 10 ms per record


def _slow(calls: Path) -> Any:
    def slow(x: int) -> int:
        time.sleep(0.01)
        with open(calls, "a", encoding="utf-8") as f:
            f.write(f"{x}\n")
        return x
    return slow


def _job(env: Environment, tmp_path: Path) -> None:
    env.from_sequence(1, N).map(_slow(tmp_path / "calls.txt"), name="slow") \
        .sink_to(FileSink(tmp_path / "out"), name="files")


def _conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {"parallelism.default": 1, "execution.checkpointing.interval": "200 ms",
            "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
            "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
            "restart-strategy": "none", **extra}


def test_the_first_checkpoint_passes_a_slow_chained_map_within_a_few_records(tmp_path: Path) -> None:
    env = Environment(_conf(tmp_path))
    _job(env, tmp_path)
    client = env.execute_async("slow map")
    while not (jobs := list(client.jobmanager.jobs.values())) or jobs[0].checkpoints.completed < 1:
        assert client.status() not in ("FAILED", "FINISHED", "CANCELED"), "ended before a checkpoint"
        time.sleep(0.01)
    job = jobs[0]
    before = len((tmp_path / "calls.txt").read_text().splitlines())
    checkpoint_dir = Path(job.checkpoint_path)
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert before < N // 2  # not after the whole chunk of N records
    published_before = published(tmp_path / "out")
    assert published_before == list(range(1, len(published_before) + 1)) and len(published_before) < N

    # resumed from the last checkpoint, taken between two slices of the chunk: the records
    # read but not yet pushed come first, then the rest; every record is published once
    env = Environment(_conf(tmp_path, **{"execution.state-recovery.path": str(checkpoint_dir)}))
    _job(env, tmp_path)
    env.execute("resumed")
    assert published(tmp_path / "out") == list(range(1, N + 1))


def test_a_stop_with_savepoint_passes_a_slow_chained_map_within_a_few_records(tmp_path: Path) -> None:
    env = Environment(_conf(tmp_path, **{"execution.checkpointing.interval": "1 h"}))  # the savepoint only
    _job(env, tmp_path)
    client = env.execute_async("slow map")
    calls = tmp_path / "calls.txt"
    while not calls.exists() or not client.jobmanager.jobs:
        assert client.status() not in ("FAILED", "FINISHED", "CANCELED"), "ended before it started"
        time.sleep(0.01)
    [job_id] = client.jobmanager.jobs
    savepoint = client.jobmanager.trigger_savepoint(job_id, str(tmp_path / "savepoints"), stop=True).result(60)
    processed = len(calls.read_text().splitlines())
    client.wait(60)
    assert processed < N // 2  # the stop came between slices, not after the whole chunk

    env = Environment(_conf(tmp_path, **{"execution.state-recovery.path": savepoint}))
    _job(env, tmp_path)
    env.execute("resumed")
    assert published(tmp_path / "out") == list(range(1, N + 1))
