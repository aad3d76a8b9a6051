"""Typed errors cross every process boundary (issue 12.4) on the embedded cluster: what a
subtask or a TaskExecutor raises reaches an ``except`` around ``execute()`` as its own class;
a user's own exception (a ``ValueError``) as ``JobError(ValueError)`` (issue 25.3)."""

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
from runtime_jobs import (
    BadRecord, Exit, KeyErrorThenValueError, RaiseTyped, fail_on, fail_with_a_local_class,
    fail_with_bad_record,
)


def test_a_subtasks_data_format_error_keeps_its_class_and_path() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    env.from_sequence(1, 5).map(RaiseTyped(3), name="decode").print()
    with pytest.raises(DataFormatError) as caught:
        env.execute("typed")
    assert caught.value.path == "/data/part-3.idx"
    assert "decode" in str(caught.value) and "(1/1) on taskexecutor-1 failed" in str(caught.value)
    assert "record header is truncated" in str(caught.value)


def test_a_users_value_error_reaches_except_value_error_with_the_users_frames_only() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    env.from_sequence(1, 9).map(fail_on(7), name="check").print()
    with pytest.raises(ValueError) as caught:
        env.execute()
    error = caught.value
    assert isinstance(error, JobError)
    assert type(error.__cause__) is ValueError and error.__cause__.args == ("bad record 7",)
    lines = str(error).splitlines()
    assert lines[0] == "subtask sequence -> check -> print (1/1) on taskexecutor-1 failed"
    assert lines[1] == "Traceback (most recent call last):"
    frames = [line for line in lines if line.startswith("  File ")]
    assert len(frames) == 1 and 'runtime_jobs.py", line ' in frames[0] and frames[0].endswith("in check")
    assert lines[lines.index(frames[0]) + 1].strip() == 'raise ValueError(f"bad record {value}")'
    assert lines[-1] == "ValueError: bad record 7"


def test_a_users_own_exception_class_keeps_its_attributes() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    env.from_sequence(1, 9).map(fail_with_bad_record(4), name="label").print()
    with pytest.raises(BadRecord) as caught:
        env.execute()
    assert caught.value.record == 4 and isinstance(caught.value, JobError)
    assert isinstance(caught.value.__cause__, BadRecord) and caught.value.__cause__.record == 4
    assert str(caught.value).endswith("runtime_jobs.BadRecord: no label in record 4")


def test_a_class_no_other_process_can_import_is_a_job_error_naming_it() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1})
    env.from_sequence(1, 9).map(fail_with_a_local_class(2), name="odd").print()
    with pytest.raises(JobError) as caught:
        env.execute()
    assert type(caught.value) is JobError and caught.value.__cause__ is None
    assert str(caught.value).endswith("Unreachable: record 2")


def test_after_restarts_the_last_attempts_error_is_raised_as_its_class() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 1, "restart-strategy": "fixed-delay",
                       "restart-strategy.fixed-delay.attempts": 1, "restart-strategy.fixed-delay.delay": "10 ms"})
    env.from_sequence(1, 3).map(KeyErrorThenValueError(), name="flaky").print()
    with pytest.raises(ValueError, match="record 1 on attempt 1") as caught:
        env.execute()
    assert not isinstance(caught.value, KeyError)


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
