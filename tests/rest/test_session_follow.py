"""A session cluster hands a job's result to its client as soon as the job ends, not at the
next progress tick (a short job on a session waited up to half a second for it)."""

from __future__ import annotations

import os
import threading
from multiprocessing import Pipe
from types import SimpleNamespace
from typing import Any

import pytest

from accelflow.config import config_from
from accelflow.runtime import JobProgress, JobSucceeded
from accelflow.runtime.service import _session
from accelflow.runtime.service._session import SessionCluster


class _JobManager:
    lock = threading.Lock()

    def run_job(self, job: Any) -> str:
        return "the result"

    def progress(self, graph: Any) -> dict[str, Any]:
        return {"records": 8}

    def cleanup_after_failure(self, graph: Any) -> None:
        raise AssertionError("the job did not fail")


def test_the_result_goes_out_when_the_job_ends_without_waiting_for_a_progress_tick(
        monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_session, "_PROGRESS_S", 3600.0)  # a tick would never come in this test
    cluster: Any = SimpleNamespace(jobmanager=_JobManager())
    cluster._snapshot = lambda job: SessionCluster._snapshot(cluster, job)
    job = SimpleNamespace(id="job-1", graph=None, state="FINISHED", config=config_from(), pending=None,
                          stopped_with_savepoint=None)
    ours, theirs = Pipe()
    ended, ended_w = os.pipe()
    outcome: dict[str, Any] = {}
    thread = threading.Thread(target=SessionCluster._run, args=(cluster, job, outcome, ended_w))
    thread.start()
    follower = threading.Thread(target=SessionCluster._follow, args=(cluster, ours, job, thread, outcome, ended),
                                daemon=True)
    follower.start()
    follower.join(60)
    assert not follower.is_alive(), "the follower waited for a progress tick after the job ended"
    os.close(ended)
    progress, result = theirs.recv(), theirs.recv()
    assert isinstance(progress, JobProgress) and progress.snapshot["records"] == 8
    assert progress.snapshot["state"] == "FINISHED" and progress.snapshot["stopped_with_savepoint"] is None
    assert result == JobSucceeded("the result")
