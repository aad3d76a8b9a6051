"""A failure the JobManager hears after the job was asked to stop ends it cancelled, with no
restart (issue 25.24: an ``accelflow run`` interrupted twice tore its TaskExecutor down while
the job was being cancelled, and the JobManager logged "restarting (attempt 2)" and started a
TaskExecutor for a cluster that was gone).

The moment is made exact: the test routes the cluster's events itself (it holds the event
pump), SIGKILLs the TaskExecutor, and hands the JobManager's waiting thread the
TaskExecutor's death right with the cancel request, before that thread looks at the request.
"""

from __future__ import annotations

import logging
import os
import signal
import sys
import time

import pytest
from runtime_jobs import Forever

from accelflow import Environment, JobCancelledError
from accelflow.runtime import TaskExecutorExited, TaskExecutorLost


def _waits_for_its_job(thread_id: int) -> bool:
    """Whether that thread waits in ``EventPump.next_event`` for its job's next event."""
    frame = sys._current_frames().get(thread_id)
    names = []
    while frame is not None:
        names.append(frame.f_code.co_name)
        frame = frame.f_back
    return bool(names) and names[0] == "wait" and "next_event" in names


def test_a_taskexecutor_lost_once_the_job_is_cancelled_does_not_restart_it(
        caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="accelflow.runtime")
    env = Environment({"parallelism.default": 1, "restart-strategy": "fixed-delay",
                       "restart-strategy.fixed-delay.attempts": 3,
                       "restart-strategy.fixed-delay.delay": "0 s"})
    env.from_source(Forever()).map(lambda x: x).add_sink(lambda x: None)
    client = env.execute_async("cancelled")
    jm = client.jobmanager
    deadline = time.monotonic() + 60
    while not (jm.jobs and all(st.state == "RUNNING" for st in list(jm.subtasks.values()))):
        assert time.monotonic() < deadline and client.status() != "FAILED", "the job did not run"
        time.sleep(0.02)
    (job,) = jm.jobs.values()
    with jm.pump._pump:  # from here the JobManager's thread only waits on its job's queue
        os.kill(jm.launcher.pid("taskexecutor-1"), signal.SIGKILL)
        while True:
            event = jm.launcher.events.get(timeout=30)
            if isinstance(event[1], TaskExecutorLost | TaskExecutorExited):
                break
            jm.pump.route(event)  # what its subtasks said before
        while not _waits_for_its_job(client._thread.ident or 0):
            time.sleep(0.001)
        interval = sys.getswitchinterval()
        sys.setswitchinterval(30.0)  # this thread keeps the GIL: both reach the job together
        try:
            jm.pump.route(event)  # the job's queue gets TaskExecutorDied
            client.cancel()
        finally:
            sys.setswitchinterval(interval)
    with pytest.raises(JobCancelledError):
        client.wait(60)
    assert job.state == "CANCELED" and job.attempt == 0
    assert "restarting" not in caplog.text
