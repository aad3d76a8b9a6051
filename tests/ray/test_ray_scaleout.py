"""Issue 17 on the shared local Ray instance: the placement diagnosis beats the registration
timeout, restarts wait for capacity, runtime environments reach the actors, and no folder
is left behind by an actor that could not start."""

from __future__ import annotations

import json
import logging
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import ray
from ray_jobs import GatedNumbers, wait_until

from accelflow import Environment
from accelflow._errors import DeploymentError, DriverLoadError
from accelflow.config import config_from
from accelflow.runtime.launchers._ray import runtime_env

N = 40



def test_the_placement_diagnosis_wins_over_a_shorter_registration_timeout(
    ray_conf: dict[str, Any],
) -> None:
    conf = {**ray_conf, "external-resources": "tpu",
            "external-resource.tpu.amount": 1, "ray.placement-timeout": "2 s",
            "taskmanager.registration.timeout": "0.5 s"}
    with pytest.raises(DeploymentError, match=r"asks CPU 2, tpu 1\) within 2 s \(ray\.placement-timeout\)"):
        Environment(conf).from_sequence(0, 1).execute_and_collect()


class _Restarts(logging.Handler):
    """Sets ``seen`` once the JobManager logs the restart to attempt ``n``."""

    def __init__(self, n: int) -> None:
        super().__init__(logging.WARNING)
        self.pattern, self.seen = f"restarting (attempt {n})", threading.Event()
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.messages.append(record.getMessage())
        if self.pattern in record.getMessage():
            self.seen.set()


@pytest.fixture
def restarts() -> Iterator[_Restarts]:
    handler = _Restarts(3)
    log = logging.getLogger("accelflow.runtime")
    log.addHandler(handler)
    yield handler
    log.removeHandler(handler)


@pytest.mark.slow
def test_a_replacement_that_cannot_be_placed_yet_uses_the_remaining_attempts(
    ray_conf: dict[str, Any], tmp_path: Path, restarts: _Restarts,
) -> None:
    from ray.util import placement_group, remove_placement_group

    first = placement_group([{"CPU": 4}])  # 8 CPUs: the job's two actors take the rest
    ray.get(first.ready())
    marks = tmp_path / "marks"
    marks.mkdir()
    conf = {**ray_conf, "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.attempts": 4,
            "restart-strategy.fixed-delay.delay": "3 s", "ray.placement-timeout": "10 s"}
    env = Environment(conf)
    env.from_source(GatedNumbers(N, str(marks)), parallelism=4).sink_to_file(tmp_path / "out.txt")
    client = env.execute_async("waits-for-capacity")
    second = None
    try:
        wait_until(lambda: len(list(marks.glob("started-*-a0"))) == 4 or client.status() == "FAILED",
                    "every source subtask to emit")
        assert client.status() == "RUNNING", client._error
        # pending: it takes what the kill frees, long before the replacement asks (the delay)
        second = placement_group([{"CPU": 2}])
        ray.kill(client.launcher.actor("taskexecutor-2"))
        ray.get(second.ready(), timeout=60)
        (marks / "gate").touch()
        # a replacement failed: attempt 3 comes
        assert restarts.seen.wait(120), (restarts.messages, client.status())
        remove_placement_group(second)  # capacity is back: the next replacement is placed
        second = None
        result = client.wait(120)
    finally:
        for group in (first, second):
            if group is not None:
                remove_placement_group(group)
    assert result.attempts >= 3
    assert any("could not place its actor" in m for m in restarts.messages)
    lines = (tmp_path / "out.txt").read_text(encoding="utf-8").splitlines()
    assert sorted(int(line) for line in lines) == list(range(N))  # complete, no duplicates


def test_runtime_env_keys_reach_the_actor_options() -> None:
    env = runtime_env(config_from(values={
        "ray.runtime-env.working-dir": "gs://bucket/job.zip", "ray.runtime-env.env-vars": '{"A": "1", "B": "x=y"}',
    }))
    assert env["working_dir"] == "gs://bucket/job.zip"
    assert env["env_vars"]["A"] == "1" and env["env_vars"]["B"] == "x=y"
    assert "working_dir" not in runtime_env(config_from(values={}))
    local = config_from(values={"ray.runtime-env.working-dir": "/srv/job"})
    assert "working_dir" not in runtime_env(local)  # uploaded once by ray.init, not per actor


def test_env_vars_reach_the_actors_and_a_failed_start_leaves_no_folder(
    ray_conf: dict[str, Any],
) -> None:
    private = tempfile.mkdtemp(prefix="af-", dir="/tmp")  # short: Unix socket paths
    try:
        conf = {**ray_conf, "ray.runtime-env.env-vars": json.dumps({"TMPDIR": private}),
                "external-resources": "fpga", "external-resource.fpga.amount": 1,
                "external-resource.fpga.driver-factory.class": "no_such_module:Factory"}
        with pytest.raises(DriverLoadError):
            Environment(conf).from_sequence(0, 1).execute_and_collect()
        leftovers = list(Path(private).glob("accelflow-*"))
        assert leftovers == [], f"an actor that could not start left {leftovers}"
        # one that started sees the env vars (so do its subtasks), and cleans up after itself
        ok = {**ray_conf, "ray.runtime-env.env-vars": json.dumps({"TMPDIR": private, "AF_MARK": "m"})}
        seen = Environment(ok).from_sequence(0, 3).map(
            lambda _: (os.environ.get("AF_MARK"), tempfile.gettempdir())).execute_and_collect()
        assert set(seen) == {("m", private)}
        assert list(Path(private).glob("accelflow-*")) == []
    finally:
        shutil.rmtree(private, ignore_errors=True)
