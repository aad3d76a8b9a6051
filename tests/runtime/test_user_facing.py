"""What a new user sees (issue 12.8): progress that counts what the sinks finished, an honest
name for a degraded device, no stray traceback when a job fails, and a warning for keys a
session cluster decides."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

from accelflow import Environment
from accelflow.dataflow import build_job_graph
from accelflow.runtime import SubtaskKey
from accelflow.runtime.jobmanager._jobs import SubtaskState
from accelflow.runtime.jobmanager._plan import progress_of


def _graph(env: Environment) -> Any:
    return build_job_graph("j", list(env._transformations))


def test_progress_counts_records_the_sinks_took_not_what_the_sources_read() -> None:
    env = Environment()
    env.from_sequence(1, 100).map(lambda x: x).print()
    graph = _graph(env)
    # everything read by the source, half of it printed so far: 50 of 100, not 100%
    running = SubtaskState(SubtaskKey("job-1", 0, 0, 0), "s", "te", {}, counts=[(0, 100), (100, 100), (50, 50)])
    assert progress_of(graph, [running]) == {"records": 50, "total": 100}


def test_progress_has_no_total_when_records_may_not_reach_the_sinks() -> None:
    env = Environment()
    env.from_sequence(1, 100).filter(lambda x: x % 2).print()
    graph = _graph(env)
    st = SubtaskState(SubtaskKey("job-1", 0, 0, 0), "s", "te", {}, counts=[(0, 100), (100, 50), (50, 50)])
    assert progress_of(graph, [st]) == {"records": 50, "total": None}


def test_a_degraded_device_is_not_shown_as_a_real_gpu(gpu_conf: dict[str, Any]) -> None:
    conf = dict(gpu_conf, **{
        "external-resource.gpu.amount": 8,  # the host has 4: discovery fails...
        "external-resource.gpu.on-discovery-failure": "degrade",  # ...and the TaskExecutor goes on
        "local.number-taskmanager": 1,
    })
    env = Environment(conf)
    env.from_sequence(1, 4).map(lambda x: x, name="classify", resources={"gpu": 1}).print()
    result = env.execute()
    shown = result.devices["classify (1/1)"]
    assert "#" not in shown
    assert "no device" in shown


def test_a_failing_job_prints_no_stray_traceback(tmp_path: Path) -> None:
    script = tmp_path / "failing.py"
    script.write_text(textwrap.dedent("""
        from accelflow import Environment, JobError

        def boom(x):
            raise ValueError("bad record")

        env = Environment({"local.number-taskmanager": 2})
        env.from_sequence(1, 10).map(boom).print()
        try:
            env.execute()
        except JobError:
            print("failed as expected")
    """), encoding="utf-8")
    done = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=120)
    assert "failed as expected" in done.stdout
    assert "Exception ignored" not in done.stderr
    assert "SystemExit" not in done.stderr
