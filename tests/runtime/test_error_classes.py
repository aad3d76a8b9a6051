"""Typed errors cross every process boundary (issue 12.4) on the embedded cluster: what a
subtask or a TaskExecutor raises reaches an ``except`` around ``execute()`` as its own class."""

from __future__ import annotations

import queue
from pathlib import Path
from typing import Any

import pytest

from accelflow import (
    CoordinationError, DataFormatError, DiscoveryError, DriverLoadError, Environment, JobError,
)
from accelflow.config import config_from
from accelflow.dataflow import build_job_graph
from runtime_jobs import Exit, RaiseTyped


def test_a_subtasks_data_format_error_keeps_its_class_and_path() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    env.from_sequence(1, 5).map(RaiseTyped(3), name="decode").print()
    with pytest.raises(DataFormatError) as caught:
        env.execute("typed")
    assert caught.value.path == "/data/part-3.idx"
    assert "decode" in str(caught.value) and "(1/1) on taskexecutor-1 failed" in str(caught.value)
    assert "record header is truncated" in str(caught.value)


def test_a_taskexecutors_driver_load_error_keeps_its_class() -> None:
    env = Environment({
        "external-resources": "fpga", "external-resource.fpga.amount": 1,
        "external-resource.fpga.driver-factory.class": "no_such_module_for_accelflow:Factory",
    })
    env.from_sequence(1, 2).print()
    with pytest.raises(DriverLoadError) as caught:
        env.execute()
    assert caught.value.resource == "fpga"


def test_a_taskexecutors_discovery_error_keeps_its_class(gpu_conf: dict[str, Any]) -> None:
    env = Environment(dict(gpu_conf, **{"external-resource.gpu.amount": 8}))  # the host has 4
    env.from_sequence(1, 2).print()
    with pytest.raises(DiscoveryError):
        env.execute()


def test_a_taskexecutors_coordination_error_keeps_its_class(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    corrupt = tmp_path / "corrupt-coordination.json"
    corrupt.write_text("{not json", encoding="utf-8")
    corrupt.chmod(0o600)
    env = Environment(dict(gpu_conf, **{"external-resource.gpu.param.coordination-file": str(corrupt)}))
    env.from_sequence(1, 2).print()
    with pytest.raises(CoordinationError) as caught:
        env.execute()
    assert str(corrupt) in str(caught.value)


def test_a_subtask_that_exits_silently_fails_the_job_naming_its_exit_code() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    env.from_sequence(1, 5).map(Exit(3), name="vanish").print()
    with pytest.raises(JobError, match=r"vanish -> print \(1/1\) on taskexecutor-1 exited with code 3"):
        env.execute()


def test_an_abort_does_not_wait_for_subtasks_that_already_exited() -> None:
    """16.7: the JobManager used to wait 15 s for the exit of a subtask it had already seen
    exit; now it waits only for subtasks whose exit it has not seen."""
    from accelflow.runtime import SubtaskKey
    from accelflow.runtime.jobmanager import Job
    from accelflow.runtime.jobmanager._deployment import Deployer
    from accelflow.runtime.jobmanager._jobs import SubtaskState, TaskExecutorInfo
    from accelflow.runtime.jobmanager._state import ClusterState
    from accelflow.runtime import Registration

    env = Environment()
    env.from_sequence(1, 2).print()
    job = Job("job-1", build_job_graph("j", list(env._transformations)), config_from(), 0.0)
    state = ClusterState()
    state.taskexecutors["taskexecutor-1"] = TaskExecutorInfo(Registration("taskexecutor-1", 1, 1))
    key = SubtaskKey("job-1", 0, 0, 0)
    state.subtasks[key] = SubtaskState(key, "s", "taskexecutor-1", {}, state="FAILED")
    sent: list[Any] = []

    class Launcher:
        def handle(self, te_id: str) -> Any:
            return type("H", (), {"send": lambda self, m: sent.append(m)})()

        def channel_address(self, name: str) -> str:
            return f"relay:{name}"

    class Pump:
        def next_event(self, source: queue.Queue[Any], timeout: float) -> Any:
            raise AssertionError("waited for a subtask whose exit was already seen")

    Deployer(Launcher(), state, Pump()).abort(job, [key], exited={key})  # type: ignore[arg-type]
    assert len(sent) == 1  # the TaskExecutor was still told to cancel the job
