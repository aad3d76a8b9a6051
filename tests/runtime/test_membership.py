"""Membership on its own: events fed in a given order, no processes."""

from __future__ import annotations

import queue

import pytest

from accelflow import CoordinationError, JobError
from accelflow._errors import encode_error
from accelflow.config import config_from
from accelflow.runtime import RegistrationFailed, TaskExecutorExited
from accelflow.runtime.jobmanager._membership import Membership
from accelflow.runtime.jobmanager._state import ClusterState


class _Pump:
    """The part of ``EventPump`` that ``Membership`` uses, fed by the test."""

    def __init__(self, events: list[tuple[str, object]]) -> None:
        self.membership: queue.Queue[tuple[str, object]] = queue.Queue()
        for event in events:
            self.membership.put(event)
        self.on_lost = None
        self.lost: dict[str, str] = {}
        self.launched: list[list[str]] = []

    def launch(self, ids: list[str]) -> None:
        self.launched.append(ids)

    def next_event(self, source: queue.Queue[tuple[str, object]], timeout: float) -> tuple[str, object] | None:
        try:
            return source.get(timeout=timeout)
        except queue.Empty:
            return None


def _membership(events: list[tuple[str, object]]) -> Membership:
    return Membership(config_from(), ClusterState(), _Pump(events))  # type: ignore[arg-type]


def test_why_a_taskexecutor_could_not_start_wins_over_its_exit_seen_first() -> None:
    """Its exit (from the launcher) and its RegistrationFailed (from its connection) travel
    apart: seen in that order, the job still fails with the start-up error's own class."""
    failed = RegistrationFailed("taskexecutor-1", encode_error(CoordinationError("corrupt", path="/c.json")))
    membership = _membership([("taskexecutor-1", TaskExecutorExited("taskexecutor-1", 1, 42)),
                              ("taskexecutor-1", failed)])
    with pytest.raises(CoordinationError, match="/c.json"):
        membership.start()


def test_a_taskexecutor_that_exits_without_a_word_fails_the_start_naming_its_exit_code() -> None:
    membership = _membership([("taskexecutor-1", TaskExecutorExited("taskexecutor-1", 3, 42))])
    with pytest.raises(JobError, match=r"taskexecutor-1 exited \(exit code 3\) during start-up"):
        membership.start()
