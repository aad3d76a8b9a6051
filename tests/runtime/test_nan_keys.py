"""NaN keys are one key (issue 25.25), as in Flink, where ``Double.equals`` holds for two NaNs:
in Python ``nan != nan`` and ``hash(nan)`` is the object's address, so 1,000 records keyed
by NaN made 1,000 keys, spread over the reduce's subtasks at random."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from runtime_jobs import CommitLog, Paced, published

from accelflow import Environment, JobCancelledError


def _nan_pair(x: int) -> tuple[float, int]:
    return (float("nan"), x)  # a new NaN object per record, as arithmetic makes them


@pytest.mark.parametrize("parallelism", [1, 2])
def test_a_thousand_records_keyed_by_nan_sum_to_one_key(parallelism: int) -> None:
    env = Environment({"parallelism.default": parallelism, "execution.runtime-mode": "batch"})
    out = (env.from_sequence(1, 1000).map(_nan_pair).key_by(lambda r: r[0]).sum(1)
           .execute_and_collect())
    assert len(out) == 1 and np.isnan(out[0][0]) and out[0][1] == 500500


@pytest.mark.parametrize("parallelism", [1, 2])
def test_numpy_nans_and_nans_inside_tuples_are_one_key_each(parallelism: int) -> None:
    env = Environment({"parallelism.default": parallelism, "execution.runtime-mode": "batch"})
    values = np.array([np.nan, 1.0] * 500, dtype=np.float32)
    out = (env.from_collection(values, parallelism=parallelism).map(lambda v: (v, 1))
           .key_by(lambda r: ("k", r[0])).sum(1).execute_and_collect())
    assert sorted((str(v), n) for v, n in out) == [("1.0", 500), ("nan", 500)]


def test_every_nan_hashes_alike_and_becomes_one_object() -> None:
    from accelflow.runtime.subtask._keys import canonical_key, stable_hash

    nans = [float("nan"), np.float64("nan"), np.float32("nan"), complex("nan+1j"), -float("nan")]
    assert len({stable_hash(n) for n in nans}) == 1
    assert len({stable_hash((1, n)) for n in nans}) == 1
    assert len({canonical_key(n) for n in nans}) == 1
    assert len({canonical_key(("a", (n, 2))) for n in nans}) == 1
    key = ("a", 1.5)
    assert canonical_key(key) is key and canonical_key(2.5) == 2.5


@pytest.mark.slow
def test_a_nan_key_keeps_its_count_through_a_restore_with_another_parallelism(tmp_path: Path) -> None:
    """Keyed state is checkpointed as a dict and goes back by key group (the stable hash of
    its key): the NaN key's count, unpickled as a new NaN object, goes on where it stopped."""
    out = tmp_path / "out"
    out.mkdir()
    n = 3000
    conf = {
        "parallelism.default": 2, "local.number-taskmanager": 2,
        "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
        "execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION",
        "execution.runtime-mode": "streaming",
    }

    def job(env: Environment, bounded: bool, delay: float) -> Any:
        (env.from_source(Paced(n, chunk=20, delay=delay, bounded=bounded), name="numbers")
            .map(lambda x: (x % 3, 1), name="ones")
            .key_by(lambda r: float("nan") if r[0] == 0 else r[0])
            .reduce(lambda a, b: (a[0], a[1] + b[1]), name="count")
            .sink_to(CommitLog(str(out)), name="log"))

    env = Environment(conf)
    job(env, bounded=False, delay=0.01)
    client = env.execute_async("p=2")
    jobs = client.jobmanager.jobs
    _wait(lambda: jobs and next(iter(jobs.values())).checkpoints.completed >= 2)
    job_dir = next(iter(jobs.values())).checkpoint_path
    client.cancel()
    with pytest.raises(JobCancelledError):
        client.wait(60)
    env = Environment({**conf, "parallelism.default": 3, "local.number-taskmanager": 1,
                       "execution.state-recovery.path": job_dir})
    job(env, bounded=True, delay=0.0)
    env.execute("p=3")
    counts: dict[int, list[int]] = {0: [], 1: [], 2: []}
    for label, count in published(out):
        counts[label].append(count)
    for label in range(3):  # one running count per record of the key, ending at its total
        total = len([x for x in range(n) if x % 3 == label])
        assert sorted(counts[label]) == list(range(1, total + 1)), f"key {label}"


def _wait(condition: Any, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, "timed out waiting for two checkpoints"
        time.sleep(0.02)
