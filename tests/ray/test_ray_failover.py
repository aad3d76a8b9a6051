"""Rollback in place on the Ray target (issues 27 and 28, ``docs/ray.md``): a failed subtask
is replaced alone inside its TaskExecutor actor, the survivors roll back to the latest
checkpoint in their processes without calling ``open()`` again, and their data channels,
relayed between the two actors through Ray actor calls, are rebuilt for the new epoch."""

from __future__ import annotations

import json
import logging
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model, calls, opens, published
from ray_jobs import GPU_CONF, wait_until
from warm_jobs import Model as ResidentModel
from warm_jobs import WhereAmI, lines

from accelflow import Environment
from accelflow.config import config_from
from accelflow.config.keys import STATE_DIR_ENV_VAR
from accelflow.connectors.files import FileSink
from accelflow.runtime.client import ExecutionContext, use_context
from accelflow.runtime.service._session import SessionCluster

pytestmark = pytest.mark.slow

N = 3000


def _job(ray_conf: dict[str, Any], tmp_path: Path, model: Model) -> Environment:
    """Parallelism 3 on two actors of two slots: ``rebalance`` sends every source subtask's
    chunks to every model subtask, so the failed one's inputs come through the relay from
    both actors (in process from its own, by actor calls from the other)."""
    env = Environment({**ray_conf, "parallelism.default": 3, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .rebalance()
        .map_batches(model, batch_size=10, name="model")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    return env


def test_a_sigkilled_subtask_on_ray_is_replaced_and_the_others_roll_back_in_place(
        ray_conf: dict[str, Any], tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    caplog.set_level(logging.WARNING, logger="accelflow.runtime")
    client = _job(ray_conf, tmp_path, Model(tmp_path, batch_s=0.01, fail="kill", at=1100)).execute_async("kill on ray")
    result = client.wait(180)
    job = client.jobmanager.jobs[result.job_id]
    assert published(tmp_path / "out") == list(range(N))  # exactly once
    assert result.attempts == 2
    [failover] = job.failovers
    assert failover.path == "in-place", failover.why_full
    assert len(failover.replaced) == 1 and len(failover.rolled_back) == 5
    seen = opens(tmp_path)
    per_process = Counter(pid for pid, _, _ in seen)
    assert max(per_process.values()) == 1 and len(seen) == 4, seen  # 3, then the replacement only
    assert "rolled back in place: 5 survivors" in caplog.text
    placed = {client.jobmanager.state.subtasks[key].taskexecutor for key in client.jobmanager.state.subtasks
              if key.job_id == result.job_id}
    assert placed == {"taskexecutor-1", "taskexecutor-2"}  # the relay carried channels between actors


def test_a_killed_actor_on_ray_is_confined_its_subtasks_placed_on_the_other(ray_conf: dict[str, Any],
                                                                            tmp_path: Path) -> None:
    """Three slots per actor, spread: one index on each actor. ``ray.kill`` of one actor loses
    its subtasks; they fit on the other actor, so only they are deployed again (there) and
    the others roll back in place."""
    env = Environment({**ray_conf, "taskmanager.numberOfTaskSlots": 3, "scheduler.placement-policy": "spread",
                       "parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(N, chunk=10, delay=0.05), name="numbers")
        .rebalance()
        .map_batches(Model(tmp_path, batch_s=0.01), batch_size=10, name="model")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("actor lost")
    jm = client.jobmanager
    wait_until(lambda: len(opens(tmp_path)) == 2 and any(
        r.status == "COMPLETED" for j in jm.jobs.values() for r in j.checkpoints.history), "a checkpoint")
    assert {st.taskexecutor for st in jm.state.subtasks.values()} == {"taskexecutor-1", "taskexecutor-2"}
    client.launcher.ray.kill(client.launcher.actor("taskexecutor-2"))
    result = client.wait(180)
    assert published(tmp_path / "out") == list(range(N))
    [failover] = jm.jobs[result.job_id].failovers
    assert failover.path == "in-place", failover.why_full
    assert sorted(failover.replaced) == ["model -> files (2/2)", "numbers (2/2)"]
    assert sorted(failover.rolled_back) == ["model -> files (1/2)", "numbers (1/2)"]
    seen = opens(tmp_path)
    assert len(seen) == 3 and len({pid for pid, _, _ in seen}) == 3, seen  # 2, then the moved one


def test_on_ray_a_standby_takes_the_failed_subtasks_place(ray_conf: dict[str, Any], tmp_path: Path) -> None:
    """4 slots and 4 GPUs on two actors: 3 GPU subtasks and one standby, opened ahead; the
    standby is activated by a ``Rollback``, whose channel is routed to both actors."""
    env = Environment({**ray_conf, **GPU_CONF, "parallelism.default": 3, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.standby-subtasks": 1})
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .rebalance()
        .map_batches(Model(tmp_path, batch_s=0.01, fail="kill", at=1100), batch_size=10, name="model",
                     resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("standby on ray")
    result = client.wait(180)
    assert published(tmp_path / "out") == list(range(N))
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert failover.path == "in-place" and failover.standby == "model -> files (standby 1 of 1)", failover
    seen = opens(tmp_path)
    assert max(Counter(pid for pid, _, _ in seen).values()) == 1, seen
    standby = next(pid for pid, index, _ in seen if index == -1)  # opened before the failure, idle
    assert standby in {pid for _, pid, _, _ in calls(tmp_path)}  # then it worked
    assert not [o for o in seen if o[2] == 1 and o[1] >= 0]  # no replacement opened: the standby took over


def test_a_rollback_on_a_ray_session_cluster_leaves_no_relayed_stream_open(
        session: SessionCluster, ray_conf: dict[str, Any], tmp_path: Path) -> None:
    """The streams of the aborted epoch (the survivors close theirs to roll back; the killed
    subtask's break) are closed in the actors that relayed them, not kept open for ever in
    the actors that a session cluster keeps between jobs; and a survivor whose chunks could
    not reach the killed subtask is not reported failed for it."""
    assert session.info is not None
    with use_context(ExecutionContext(cluster_url=session.info.url)):
        client = _job(ray_conf, tmp_path, Model(tmp_path, batch_s=0.01, fail="kill", at=1100)).execute_async("kill")
        result = client.wait(180)
    assert published(tmp_path / "out") == list(range(N)) and result.attempts == 2
    [failover] = session.jobmanager.jobs[result.job_id].failovers
    # no survivor reported failed for the killed subtask's broken channels (a BrokenPipeError
    # relaying to it): such a one never exits, and the job restarted every subtask after 15 s
    assert failover.path == "in-place" and len(failover.replaced) == 1, failover.why_full
    launcher: Any = session.launcher
    ray = launcher.ray

    def open_streams() -> int:
        return sum(ray.get(launcher.actor(te).__ray_call__.remote(
            lambda actor: sum(s.conn is not None for s in actor.inbound.values())))
            for te in ("taskexecutor-1", "taskexecutor-2"))

    wait_until(lambda: open_streams() == 0, "every relayed stream to be closed", timeout=10)


def _warm_conf(ray_conf: dict[str, Any], tmp_path: Path, **extra: Any) -> dict[str, Any]:
    """Two GPUs per actor, warm processes that import ``warm_marker`` (it logs their pids in
    ``marker.log``: the variable reaches the actors through ``ray.runtime-env.env-vars``)."""
    return {**ray_conf, **GPU_CONF, "parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
            "restart-strategy.fixed-delay.delay": "0 s", "external-resource.gpu.warm.framework": "none",
            "external-resource.gpu.warm.preload": "warm_marker",
            "ray.runtime-env.env-vars": json.dumps({"WARM_MARKER_LOG": str(tmp_path / "marker.log")}), **extra}


def test_on_ray_the_replacement_starts_in_a_warm_process_of_its_device(ray_conf: dict[str, Any], tmp_path: Path) -> None:
    env = Environment(_warm_conf(ray_conf, tmp_path))
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .map_batches(Model(tmp_path, fail="kill", at=1100), batch_size=10, name="model", resources={"gpu": 1})
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("warm on ray")
    result = client.wait(180)
    assert published(tmp_path / "out") == list(range(N))
    assert [f.path for f in client.jobmanager.jobs[result.job_id].failovers] == ["in-place"]
    seen = opens(tmp_path)
    assert len(seen) == 3 and len({pid for pid, _, _ in seen}) == 3, seen  # 2, then the replacement only
    [replacement] = [pid for pid, _, attempt in seen if attempt == 1]
    warm = {int(line) for line in (tmp_path / "marker.log").read_text().splitlines()}
    assert replacement in warm  # spawned ahead for its GPU inside the actor, then taken
    assert not {pid for pid, _, attempt in seen if attempt == 0} & warm  # the first ones were forked


def test_on_ray_a_resident_model_is_opened_once_per_device_and_kept_by_a_rollback(
        ray_conf: dict[str, Any], tmp_path: Path) -> None:
    log = str(tmp_path / "resident.log")
    env = Environment(_warm_conf(ray_conf, tmp_path, **{"taskmanager.device-pool.size": 0}))
    (env.from_source(Counted(N, chunk=10, delay=0.03), name="numbers")
        .map_batches(ResidentModel(log, scale=1), batch_size=10, resident=True, resources={"gpu": 0.5},
                     name="resident")
        .map_batches(Model(tmp_path, fail="raise", at=1100), batch_size=10, name="model")
        .sink_to(FileSink(tmp_path / "out"), name="files"))
    client = env.execute_async("resident on ray")
    result = client.wait(180)
    assert published(tmp_path / "out") == list(range(N))
    assert [f.path for f in client.jobmanager.jobs[result.job_id].failovers] == ["in-place"]
    state = client.jobmanager.state
    devices = {(st.taskexecutor, address) for key, st in state.subtasks.items()
               if key.job_id == result.job_id and st.name.startswith("resident")
               for address, _ in st.devices.get("gpu", [])}
    opened = lines(log, "open")
    assert len(opened) == len(devices) and len({o[0] for o in opened}) == len(devices), opened  # none after the rollback
    assert len(lines(log, "batch")) > 0


def test_a_session_cluster_on_ray_keeps_warm_processes_and_resident_models_between_jobs(
        ray_conf: dict[str, Any], tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """One actor with one GPU: the second job's subtask starts in the warm process spawned for
    that GPU during the first job, and its resident model is the first job's (no ``open()``)."""
    monkeypatch.setenv(STATE_DIR_ENV_VAR, str(tmp_path / "state"))
    conf = _warm_conf(ray_conf, tmp_path, **{"ray.number-taskmanager": 1, "external-resource.gpu.amount": 1,
                                             "parallelism.default": 1, "rest.port": 0})
    where, resident = str(tmp_path / "where.log"), str(tmp_path / "resident.log")
    cluster = SessionCluster(config_from(values=conf))
    try:
        cluster.start(str(tmp_path / "session.log"))
        assert cluster.info is not None
        for _ in range(2):
            with use_context(ExecutionContext(cluster_url=cluster.info.url)):
                env = Environment(conf)
                out = (env.from_sequence(1, 20).map(WhereAmI(where, fail_first=False), resources={"gpu": 1})
                       .map_batches(ResidentModel(resident, scale=1), batch_size=10, resident=True,
                                    resources={"gpu": 1}).execute_and_collect())
            assert sorted(out) == list(range(1, 21))
    finally:
        cluster.stop()
    first, second = lines(where, "where")
    warm = {int(line) for line in (tmp_path / "marker.log").read_text().splitlines()}
    assert int(first[0]) not in warm and int(second[0]) in warm  # forked, then warm
    assert second[5] == "warm_marker"  # imported before the subtask came
    assert len(lines(resident, "open")) == 1 and len(lines(resident, "batch")) >= 4  # opened by the first job only
