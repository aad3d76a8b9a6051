"""Checkpoints after the sources finished (issue 28.3, Flink's FLIP-147): a bounded job whose
source has read everything while a slow stage still works through it keeps checkpointing, and
a failure then replays from the latest checkpoint, not from the start (real processes)."""

from __future__ import annotations

from pathlib import Path

from failover_jobs import Counted, Model, calls, published

from accelflow import Environment
from accelflow.connectors.files import FileSink

N = 2000


def _job(tmp_path: Path, model: Model) -> Environment:
    env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(N, chunk=20), name="numbers").rebalance()
        .map_batches(model, batch_size=20, name="model")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def test_checkpoints_go_on_after_every_source_has_read_its_input(tmp_path: Path) -> None:
    env = _job(tmp_path, Model(tmp_path, batch_s=0.02))
    client = env.execute_async("after the sources")
    result = client.wait(120)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))
    # the source read its 2,000 records in a few milliseconds; the model took ~2 s more
    first_call = min(t for t, *_ in calls(tmp_path))
    after = [r for r in job.checkpoints.history if r.status == "COMPLETED" and r.trigger_time > first_call + 0.2]
    assert len(after) >= 5, job.checkpoints.history


def test_a_failure_after_the_sources_ended_replays_from_the_latest_checkpoint(tmp_path: Path) -> None:
    env = _job(tmp_path, Model(tmp_path, batch_s=0.02, fail="raise", at=1500))
    result = env.execute("after the sources")
    assert result.attempts == 2
    assert published(tmp_path / "out") == list(range(N))  # exactly once
    failed_at = float((tmp_path / "failure.log").read_text().split()[0])
    replayed = [records[0] for t, _, _, records in calls(tmp_path) if t > failed_at]
    assert replayed and min(replayed) > 1000, f"replayed from record {min(replayed, default=None)}"
