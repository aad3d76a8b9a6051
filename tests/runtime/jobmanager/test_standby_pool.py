"""What the standby pool tells the log (review 7, finding 11): a chain that runs short of
standbys is warned about with the whole reason and standbys named inside their count, not
when a standby is placed moments later (once the failed subtask's devices are free), and the
log says when the chain has all its standbys again. On a manual clock, with a launcher that
runs no process (tests/runtime/test_standby_subtasks.py runs real ones)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from accelflow.runtime import Deploy, DevicesFree, SubtaskKey, SubtaskRunning
from accelflow.runtime.jobmanager._deployment import EXIT_WAIT_S
from test_failover import Cluster, _watched_gpus

SHORT = "job-1 runs without"


def _ready_pool(cluster: Cluster) -> list[SubtaskKey]:
    """Deploy the job's standbys and have each say it is ready; their keys."""
    pool = cluster.failover.pool
    pool.fill()
    standbys = [(te, d.descriptor.key) for te, d in cluster.launcher.commands(Deploy)]
    for te, key in standbys:
        assert pool.on_any((te, SubtaskRunning(key)))
    cluster.launcher.sent.clear()
    return [key for _, key in standbys]


def _take_over(cluster: Cluster) -> tuple[str, SubtaskKey]:
    """Subtask 1/2 of ``count`` fails and a standby takes its place; where it ran and its key."""
    failed = cluster.key(1, 0)
    te = cluster.state.subtasks[failed].taskexecutor
    assert te is not None and cluster.fail(failed) is not None
    assert cluster.job.failovers[-1].standby is not None
    return te, failed


def _free(cluster: Cluster, te: str, failed: SubtaskKey) -> None:
    """The failed subtask's TaskExecutor says its devices are free (as the event pump does)."""
    cluster.state.devices_free(failed)
    assert cluster.failover.pool.on_any((te, DevicesFree(failed)))


def test_a_standby_placed_once_the_failed_subtasks_devices_are_free_is_not_warned_about(
        tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture) -> None:
    _watched_gpus(monkeypatch)
    cluster = Cluster(tmp_path, **{"execution.failover.standby-subtasks": 2})  # 2 + 2 of the 4 GPUs
    assert len(_ready_pool(cluster)) == 2
    with caplog.at_level(logging.WARNING, "accelflow.runtime"):
        te, failed = _take_over(cluster)
        # the next standby waits for the failed subtask's GPU: missing now (REST), not said in the log
        assert list(cluster.job.standby_missing) == ["count -> print"]
        assert cluster.launcher.commands(Deploy) == []
        _free(cluster, te, failed)
    [(_, deploy)] = cluster.launcher.commands(Deploy)
    assert deploy.descriptor.standby and cluster.job.standby_missing == {}
    assert cluster.state.subtasks[deploy.descriptor.key].name == "count -> print (standby 1 of 2)"
    assert not [r for r in caplog.records if "standby subtask" in r.getMessage()], caplog.text


def test_a_chain_still_short_after_the_wait_is_warned_about_and_its_recovery_said(
        tmp_path: Path, monkeypatch: Any, caplog: pytest.LogCaptureFixture) -> None:
    _watched_gpus(monkeypatch)
    cluster = Cluster(tmp_path, **{"execution.failover.standby-subtasks": 2})
    _ready_pool(cluster)
    with caplog.at_level(logging.WARNING, "accelflow.runtime"):
        te, failed = _take_over(cluster)
        assert SHORT not in caplog.text
        cluster.clock.sleep(EXIT_WAIT_S)  # no DevicesFree meanwhile
        running = cluster.key(0, 0)._replace(attempt=1)
        assert not cluster.failover.pool.on_any((te, SubtaskRunning(running)))  # any event of the job
        [short] = [r.getMessage() for r in caplog.records if SHORT in r.getMessage()]
        assert short.startswith("job-1 runs without 1 of its 2 standby subtask(s) of count -> print: "
                                "cannot place count (standby 1 of 2) asking for gpu: 1 on any of 2 "
                                "TaskExecutor(s) (8 slots in all):\n  taskexecutor-"), short
        caplog.clear()
        _free(cluster, te, failed)
    assert [r.getMessage() for r in caplog.records] == ["job-1 has its 2 standby subtask(s) of count -> print again"]
    assert cluster.job.standby_missing == {}


def test_standbys_that_do_not_fit_are_warned_about_at_once_with_the_whole_reason(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    cluster = Cluster(tmp_path, **{"execution.failover.standby-subtasks": 3})  # 2 + 3 > 4 GPUs
    with caplog.at_level(logging.WARNING, "accelflow.runtime"):
        assert len(_ready_pool(cluster)) == 2
    [short] = [r.getMessage() for r in caplog.records]
    reason = cluster.job.standby_missing["count -> print"]
    assert short == f"job-1 runs without 1 of its 3 standby subtask(s) of count -> print: {reason}"
    first, *why = reason.splitlines()
    assert first.startswith("cannot place count (standby 3 of 3) asking for gpu: 1") and first.endswith(":")
    assert why and all(line.startswith("  taskexecutor-") for line in why), reason
    assert "(5/2)" not in reason and "(3/2)" not in reason
