"""A session cluster on Ray (issue 17.6): a TaskExecutor actor that is lost is logged and
replaced, and a job submitted afterwards runs; a job refused for lack of slots while one is
lost names it.

The session cluster runs in this process on the tests' Ray instance (``conftest``); jobs reach
it through its submission channel, as ``accelflow run --cluster URL`` does.
"""

from __future__ import annotations

import logging
from typing import Any

import pytest
from ray_jobs import wait_until

from accelflow import Environment
from accelflow._errors import AllocationError
from accelflow.runtime.client import ExecutionContext, use_context
from accelflow.runtime.service._session import SessionCluster

pytestmark = pytest.mark.slow




def _run_on(cluster: SessionCluster, ray_conf: dict[str, Any], parallelism: int) -> list[int]:
    assert cluster.info is not None
    with use_context(ExecutionContext(cluster_url=cluster.info.url)):
        env = Environment({**ray_conf, "parallelism.default": parallelism})
        return sorted(env.from_sequence(0, 39).map(lambda i: i + 1).execute_and_collect())


def _pid(cluster: SessionCluster, te_id: str) -> int | None:
    with cluster.jobmanager.lock:
        te = cluster.jobmanager.taskexecutors.get(te_id)
        return None if te is None else te.registration.pid


def test_a_lost_taskexecutor_actor_is_logged_and_replaced_and_a_job_then_runs(
        session: SessionCluster, ray_conf: dict[str, Any], caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.INFO, logger="accelflow.runtime")
    old = _pid(session, "taskexecutor-2")
    assert old is not None
    session.launcher.ray.kill(session.launcher.actor("taskexecutor-2"))  # type: ignore[attr-defined]
    wait_until(lambda: (_pid(session, "taskexecutor-2") or old) != old, "the replacement to register")
    lost = [r.getMessage() for r in caplog.records if "taskexecutor-2" in r.getMessage()
            and r.levelno == logging.WARNING]
    assert lost == ["taskexecutor-2 was lost (its process, Ray actor or node died); starting a replacement"]
    assert _pid(session, "taskexecutor-1") is not None  # the other one was left alone
    assert _run_on(session, ray_conf, 4) == list(range(1, 41))  # 4 slots: needs both TaskExecutors


def test_a_job_refused_while_a_taskexecutor_is_lost_names_it(
        session: SessionCluster, ray_conf: dict[str, Any]) -> None:
    session.jobmanager.pump.on_lost = None  # the loss is seen, its replacement not started yet
    session.launcher.ray.kill(session.launcher.actor("taskexecutor-2"))  # type: ignore[attr-defined]
    wait_until(lambda: _pid(session, "taskexecutor-2") is None, "the loss to be seen")
    with pytest.raises(AllocationError) as refused:
        _run_on(session, ray_conf, 4)  # 4 slots; taskexecutor-1 alone has 2
    message = str(refused.value)
    assert "(1 TaskExecutor(s) lost and not replaced yet):" in message
    assert "taskexecutor-2 was lost (its process, Ray actor or node died) at " in message
    session.jobmanager.membership.replace_lost()
    assert _run_on(session, ray_conf, 4) == list(range(1, 41))
