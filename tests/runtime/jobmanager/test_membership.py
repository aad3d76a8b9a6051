"""Membership alone (issue 26.8): TaskExecutors started through the real event pump by a
launcher that runs no process and says what the test scripts, on a manual clock; the
real-process start-up failures are in tests/runtime/test_local_cluster.py."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

import pytest

from accelflow import CoordinationError, JobError
from accelflow._errors import encode_error
from accelflow.config import config_from
from accelflow.runtime import ManualClock, RegistrationFailed, TaskExecutorExited, TaskExecutorLost
from accelflow.runtime.jobmanager._events import EventPump
from accelflow.runtime.jobmanager._membership import Membership
from accelflow.runtime.jobmanager._state import ClusterState
from jm_parts import ScriptedLauncher, Start


def _membership(tmp_path: Path, script: dict[str, list[Start]] | None = None, **config: Any) -> Membership:
    clock, state = ManualClock(), ClusterState()
    pump = EventPump(ScriptedLauncher(tmp_path, script=script), state, clock=clock)
    return Membership(config_from(values=config), state, pump, clock=clock)


def _launcher(membership: Membership) -> ScriptedLauncher:
    launcher = membership.pump.launcher
    assert isinstance(launcher, ScriptedLauncher)
    return launcher


def test_start_starts_every_wanted_taskexecutor_and_returns_once_each_registered(tmp_path: Path) -> None:
    membership = _membership(tmp_path, **{"local.number-taskmanager": 3})
    membership.start()
    wanted = ["taskexecutor-1", "taskexecutor-2", "taskexecutor-3"]
    assert _launcher(membership).started == [wanted]
    assert sorted(membership.state.taskexecutors) == wanted


def test_a_taskexecutor_that_never_registers_fails_the_start_at_the_registration_timeout(tmp_path: Path) -> None:
    membership = _membership(tmp_path, {"taskexecutor-2": [[]]}, **{
        "local.number-taskmanager": 2, "taskmanager.registration.timeout": 5})
    with pytest.raises(JobError, match=r"\['taskexecutor-2'\] did not register within 5 s "
                                       r"\(taskmanager.registration.timeout\)"):
        membership.start()
    assert membership.clock.monotonic() == pytest.approx(5)


def test_why_a_taskexecutor_could_not_start_wins_over_its_exit_seen_first(tmp_path: Path) -> None:
    """Its exit (from the launcher) and its RegistrationFailed (from its connection) travel
    apart: seen in that order, the job still fails with the start-up error's own class."""
    failed = RegistrationFailed("taskexecutor-1", encode_error(CoordinationError("corrupt", path="/c.json")))
    membership = _membership(tmp_path, {"taskexecutor-1": [[TaskExecutorExited("taskexecutor-1", 1, 42), failed]]})
    with pytest.raises(CoordinationError, match="/c.json"):
        membership.start()


def test_a_taskexecutor_that_exits_without_a_word_fails_the_start_once_its_last_words_are_overdue(
        tmp_path: Path) -> None:
    membership = _membership(tmp_path, {"taskexecutor-1": [[TaskExecutorExited("taskexecutor-1", 3, 42)]]})
    with pytest.raises(JobError, match=r"taskexecutor-1 exited \(exit code 3\) during start-up"):
        membership.start()
    assert membership.clock.monotonic() == pytest.approx(1.0)  # it waited a second for its RegistrationFailed


def test_replace_lost_starts_only_the_lost_taskexecutor_again(tmp_path: Path) -> None:
    membership = _membership(tmp_path, **{"local.number-taskmanager": 2})
    membership.start()
    lost = membership.state.taskexecutors["taskexecutor-2"].registration
    membership.pump.route(("taskexecutor-2", TaskExecutorLost("taskexecutor-2", lost.pid)))
    membership.replace_lost()
    assert _launcher(membership).started[1:] == [["taskexecutor-2"]]
    assert membership.state.taskexecutors["taskexecutor-2"].registration.pid != lost.pid


def test_a_session_tries_again_to_replace_a_lost_taskexecutor_until_it_registers(
        tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    membership = _membership(tmp_path, {"taskexecutor-2": [None, RuntimeError("no node can host it"), None]},
                             **{"local.number-taskmanager": 2})
    membership.start()
    lost = membership.state.taskexecutors["taskexecutor-2"].registration
    membership.pump.route(("taskexecutor-2", TaskExecutorLost("taskexecutor-2", lost.pid)))
    with caplog.at_level(logging.INFO, logger="accelflow.runtime"):
        membership._replace_until_done()  # what the session's replacement thread runs
    assert _launcher(membership).started[1:] == [["taskexecutor-2"], ["taskexecutor-2"]]
    assert "no node can host it; trying again in 5 s" in caplog.text
    assert membership.clock.monotonic() == pytest.approx(5.0)  # the first retry's delay, not slept
    assert sorted(membership.state.taskexecutors) == ["taskexecutor-1", "taskexecutor-2"]
