"""A job that ends before its subtasks are deployed lists each of them ``CANCELED`` with no
TaskExecutor (issue 25.1), as Flink cancels the tasks of a job that fails before they run;
the REST API and the UI showed them ``WAITING`` forever."""

from __future__ import annotations

import threading

import pytest

from accelflow import Environment, JobError


class _Locked:
    """A map function that cannot be pickled (it holds a lock)."""

    def __init__(self) -> None:
        self.lock = threading.Lock()

    def __call__(self, x: int) -> int:
        return x


def test_a_job_whose_code_cannot_be_shipped_ends_its_subtasks_canceled() -> None:
    env = Environment({"parallelism.default": 2})
    env.from_sequence(1, 10, parallelism=1).map(_Locked(), name="locked").print()
    client = env.execute_async("unshippable")
    with pytest.raises(JobError, match="the function of operator 'locked' .* cannot be sent"):
        client.wait(60)
    with client.jobmanager.lock:
        job = client.jobmanager.jobs["job-1"]
        states = sorted((st.name, st.state, st.taskexecutor) for st in client.jobmanager.subtasks.values())
    assert job.state == "FAILED"
    assert states == [("locked -> print (1/2)", "CANCELED", None), ("locked -> print (2/2)", "CANCELED", None),
                      ("sequence (1/1)", "CANCELED", None)]
