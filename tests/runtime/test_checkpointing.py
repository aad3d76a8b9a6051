"""Checkpoints and recovery on the real multi-process cluster (Flink's fault tolerance):
barriers, restored source positions and keyed state, two-phase-commit sinks, retention and
resuming with ``execution.state-recovery.path`` (``accelflow run -s``)."""

from __future__ import annotations

import os
import signal
import time
from collections import defaultdict
from pathlib import Path
from collections.abc import Callable
from typing import Any

import pytest
from runtime_jobs import CommitLog, GenericPaced, Paced, published

from accelflow import Environment, JobCancelledError, JobClient
from accelflow import CheckpointError
from accelflow.runtime.jobmanager import checkpoints_retained

pytestmark = pytest.mark.slow


def _wait_until(condition: Any, what: str, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(0.02)


def _job(client: JobClient) -> Any:
    return next(iter(client.jobmanager.jobs.values()))


def _completed(client: JobClient) -> int:
    if client.status() in ("FAILED", "FINISHED", "CANCELED"):
        client.wait(1)  # raises the job's error
        raise AssertionError(f"the job ended early: {client.status()}")
    jobs = list(client.jobmanager.jobs.values())
    return int(jobs[0].checkpoints.completed) if jobs else 0


def _cancel_after(client: JobClient, checkpoints: int) -> Path:
    """Cancel the job once ``checkpoints`` checkpoints completed; its checkpoint directory."""
    _wait_until(lambda: _completed(client) >= checkpoints, f"{checkpoints} checkpoint(s)")
    path = Path(_job(client).checkpoint_path)
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    return path


def _rescaled(conf: dict[str, Any], job: Callable[..., None]) -> None:
    """Run ``job(env, bounded=, delay=)`` unbounded with ``conf`` until 2 checkpoints have
    completed, cancel it, then run it bounded at parallelism 3 from its last checkpoint."""
    env = Environment(conf)
    job(env, bounded=False, delay=0.01)
    job_dir = _cancel_after(env.execute_async("p=2"), 2)
    env = Environment({**conf, "parallelism.default": 3, "local.number-taskmanager": 1,
                       "execution.state-recovery.path": str(job_dir)})
    job(env, bounded=True, delay=0.0)
    env.execute("p=3")


def _kill_a_taskexecutor(client: JobClient) -> None:
    te = sorted(client.jobmanager.taskexecutors.values(), key=lambda t: t.id)[-1]
    os.kill(te.registration.pid, signal.SIGKILL)


def _conf(tmp_path: Path, **extra: Any) -> dict[str, Any]:
    return {
        "parallelism.default": 2, "local.number-taskmanager": 2,
        "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "restart-strategy.fixed-delay.delay": "0 s",
        **extra,
    }


def _running_sums(records: list[Any]) -> dict[int, list[int]]:
    by_key: dict[int, list[int]] = defaultdict(list)
    for key, total in records:
        by_key[key].append(total)
    return by_key


@pytest.mark.parametrize("source", [Paced, GenericPaced], ids=["positions", "resume-split"])
def test_a_keyed_running_sum_is_exact_after_a_taskexecutor_is_killed(tmp_path: Path, source: Any) -> None:
    """Flink's guarantee: after a failure the job restarts from the last checkpoint (source
    positions and keyed state together), and an exactly-once sink shows every result once."""
    out = tmp_path / "out"
    out.mkdir()
    n = 6000
    env = Environment(_conf(tmp_path, **{"execution.runtime-mode": "streaming"}))
    (env.from_source(source(n, chunk=20, delay=0.01), name="numbers")
        .map(lambda x: (x % 3, x + 1), name="pair")
        .key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1]), name="sum")
        .sink_to(CommitLog(str(out)), name="log"))
    client = env.execute_async("keyed sum")
    _wait_until(lambda: _completed(client) >= 2, "two checkpoints")
    _kill_a_taskexecutor(client)
    result = client.wait(120)
    assert result.attempts == 2
    sums = _running_sums(published(out))
    # one running sum per record, each once, ending at the key's total: the keyed state came
    # back with the source positions (a lost record lowers the total, a replayed one repeats)
    for key in range(3):
        values = [x + 1 for x in range(n) if x % 3 == key]
        assert len(sums[key]) == len(values), f"key {key}"
        assert len(set(sums[key])) == len(values), f"key {key}: a running sum twice"
        assert max(sums[key]) == sum(values), f"key {key}"
    restored = _job(client).checkpoints.restored
    assert restored is not None and restored["id"] >= 2


def test_checkpoints_follow_flinks_layout_and_retention(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = Environment(_conf(tmp_path, **{"execution.checkpointing.num-retained": 2}))
    env.from_source(Paced(3000, chunk=20, delay=0.01, bounded=False)).sink_to(CommitLog(str(out)))
    client = env.execute_async("retention")
    _wait_until(lambda: _completed(client) >= 4, "four checkpoints")
    job_dir = Path(_job(client).checkpoint_path)

    def complete() -> list[str]:
        return sorted(p.name for p in job_dir.glob("chk-*") if (p / "_metadata").exists())

    # num-retained: 2. A newer checkpoint is complete a moment before the oldest is pruned,
    # so one look may see 3; never more, and 2 at some look.
    seen = []
    for _ in range(50):
        seen.append(complete())
        time.sleep(0.01)
    assert max(map(len, seen)) <= 3, seen
    assert any(len(names) == 2 for names in seen), seen
    _cancel_after(client, 4)
    # DELETE_ON_CANCELLATION (the default): a cancelled job's checkpoints go
    assert not job_dir.exists()


def test_an_unbounded_job_cancelled_with_retained_checkpoints_resumes_without_loss_or_duplicates(
        tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    n = 4000
    conf = _conf(tmp_path, **{
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})
    env = Environment(conf)
    env.from_source(Paced(n, chunk=20, delay=0.01, bounded=False), name="numbers") \
        .map(lambda x: x * 2, name="double").sink_to(CommitLog(str(out)), name="log")
    job_dir = _cancel_after(env.execute_async("first run"), 3)
    assert any((p / "_metadata").exists() for p in job_dir.iterdir())
    first = published(out)
    assert 0 < len(first) < n

    # resume from the job's directory (its newest complete checkpoint), as `run -s`
    env = Environment({**conf, "execution.state-recovery.path": str(job_dir)})
    env.from_source(Paced(n, chunk=20, delay=0.001, bounded=True), name="numbers") \
        .map(lambda x: x * 2, name="double").sink_to(CommitLog(str(out)), name="log")
    env.execute("second run")
    assert sorted(published(out)) == [2 * x for x in range(n)]


def test_a_checkpoint_of_another_job_graph_names_the_operators_without_target(tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    conf = _conf(tmp_path, **{
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})
    env = Environment(conf)
    env.from_source(Paced(2000, chunk=20, delay=0.01, bounded=False), name="numbers") \
        .sink_to(CommitLog(str(out)), name="log")
    job_dir = str(_cancel_after(env.execute_async("first"), 1))

    env = Environment({**conf, "execution.state-recovery.path": job_dir})
    env.from_source(Paced(10), name="renamed source").sink_to(CommitLog(str(out)), name="log")
    with pytest.raises(CheckpointError, match="numbers"):
        env.execute("changed")
    # allowed explicitly: the unclaimed state is skipped and the job runs
    env = Environment({**conf, "execution.state-recovery.path": job_dir,
                       "execution.state-recovery.ignore-unclaimed-state": True})
    env.from_source(Paced(10), name="renamed source").sink_to(CommitLog(str(out)), name="log")
    env.execute("changed, allowed")


def test_a_bounded_job_publishes_everything_at_its_end_with_and_without_checkpoints(tmp_path: Path) -> None:
    for interval in (None, "50 ms"):
        out = tmp_path / f"out-{interval}"
        out.mkdir()
        conf: dict[str, Any] = {"parallelism.default": 2}
        if interval:
            conf["execution.checkpointing.interval"] = interval
        env = Environment(conf)
        env.from_sequence(1, 5000).map(lambda x: -x).sink_to(CommitLog(str(out)))
        env.execute()
        assert sorted(published(out)) == sorted(-x for x in range(1, 5001))
        assert not [p for p in out.iterdir() if p.name.startswith(".")]


def test_map_batches_max_wait_closes_a_partial_batch(tmp_path: Path) -> None:
    """A batch closes when its first record has waited ``max_wait``, full or not: an idle
    unbounded source's records still come out."""
    out = tmp_path / "out"
    out.mkdir()
    env = Environment({"parallelism.default": 1})
    env.from_source(Paced(30, chunk=3, delay=0.0, bounded=False)) \
        .map_batches(lambda b: [int(x) * 10 for x in b], batch_size=1000, max_wait=0.05) \
        .sink_to(CommitLog(str(out)))
    env.enable_checkpointing(100)
    client = env.execute_async("max wait")
    _wait_until(lambda: len(published(out)) == 30, "the partial batches to be published")
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert sorted(published(out)) == [x * 10 for x in range(30)]


def test_a_job_resumes_with_another_parallelism_keys_and_splits_redistributed(tmp_path: Path) -> None:
    """As from a Flink savepoint: keyed state goes to the subtask each key now hashes to, and
    the splits not read yet are spread over the new source subtasks."""
    out = tmp_path / "out"
    out.mkdir()
    n = 3000
    conf = _conf(tmp_path, **{
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.runtime-mode": "streaming"})

    def job(env: Environment, bounded: bool, delay: float) -> None:
        (env.from_source(Paced(n, chunk=20, delay=delay, bounded=bounded), name="numbers")
            .map(lambda x: (x % 7, 1), name="ones")
            .key_by(lambda r: r[0]).reduce(lambda a, b: (a[0], a[1] + b[1]), name="count")
            .sink_to(CommitLog(str(out)), name="log"))

    _rescaled(conf, job)
    counts = _running_sums(published(out))
    for key in range(7):  # one running count per record of the key, ending at its total
        total = len([x for x in range(n) if x % 7 == key])
        assert sorted(counts[key]) == list(range(1, total + 1)), f"key {key}"


@pytest.mark.parametrize(("state", "retention", "kept"), [
    # Flink's externalized-checkpoint-retention: RETAIN_ON_CANCELLATION keeps them when the
    # job is cancelled; DELETE_ON_CANCELLATION keeps them only if the job fails;
    # NO_EXTERNALIZED_CHECKPOINTS never; a finished job's always go
    ("CANCELED", "RETAIN_ON_CANCELLATION", True), ("CANCELED", "DELETE_ON_CANCELLATION", False),
    ("FAILED", "RETAIN_ON_CANCELLATION", True), ("FAILED", "DELETE_ON_CANCELLATION", True),
    ("FAILED", "NO_EXTERNALIZED_CHECKPOINTS", False), ("CANCELED", "NO_EXTERNALIZED_CHECKPOINTS", False),
    ("FINISHED", "RETAIN_ON_CANCELLATION", False), ("FINISHED", "DELETE_ON_CANCELLATION", False),
])
def test_which_ended_jobs_keep_their_checkpoints(state: str, retention: str, kept: bool) -> None:
    assert checkpoints_retained(state, retention) is kept
