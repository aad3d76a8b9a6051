"""Fast start (issue 14): the TaskExecutor and ``import accelflow`` import only what they
use, the subtask entry reaches the forkserver by name, and the start-up trace points."""

from __future__ import annotations

import pickle
import subprocess
import sys
from pathlib import Path

import pytest

import accelflow
from accelflow.runtime.subtask import run_subtask
from accelflow.runtime.taskexecutor import TRACE_ENV_VAR, trace
from accelflow.runtime.taskexecutor._early import SubtaskEntry


def _modules_after(statement: str) -> set[str]:
    out = subprocess.run([sys.executable, "-c", f"{statement}\nimport sys\nprint(*sys.modules)"],
                         check=True, capture_output=True, text=True).stdout
    return set(out.split())


def test_import_accelflow_loads_neither_the_api_nor_numpy() -> None:
    loaded = _modules_after("import accelflow")
    assert not {"numpy", "accelflow.api", "accelflow.runtime.client", "yaml"} & loaded


def test_the_taskexecutor_does_not_import_numpy_the_api_or_the_subtask_runtime() -> None:
    module = "accelflow.runtime.taskexecutor"
    loaded = _modules_after(f"import {module}.{'_taskexecutor'}")
    assert not {"numpy", "accelflow.api", "accelflow.runtime.client",
                "accelflow.runtime.subtask"} & loaded


def test_a_lazy_name_is_the_same_object_and_shows_the_public_module() -> None:
    from accelflow.api import Environment

    assert accelflow.Environment is Environment
    assert Environment.__module__ == "accelflow"
    with pytest.raises(AttributeError, match="no attribute 'Nope'"):
        accelflow.Nope  # noqa: B018


def test_the_subtask_entry_unpickles_to_run_subtask() -> None:
    assert pickle.loads(pickle.dumps(SubtaskEntry())) is run_subtask


def test_trace_appends_a_line_per_event_only_when_asked(tmp_path: Path,
                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    path = tmp_path / "trace.txt"
    monkeypatch.delenv(TRACE_ENV_VAR, raising=False)
    trace("not written")
    assert not path.exists()
    monkeypatch.setenv(TRACE_ENV_VAR, str(path))
    trace("te registered")
    trace("subtask forked job-1", when=12.5)
    lines = [line.split(" ", 2) for line in path.read_text(encoding="utf-8").splitlines()]
    assert [event for _, _, event in lines] == ["te registered", "subtask forked job-1"]
    assert lines[1][0] == "12.500000"
