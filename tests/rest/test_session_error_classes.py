"""Typed errors cross the session cluster's submission channel (issue 12.4): a job submitted
with ``accelflow run --cluster`` raises the class its subtask raised, with its attributes."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from accelflow import AllocationError, DataFormatError, Environment
from rest_support import Session

sys.path.insert(0, str(Path(__file__).parent.parent / "runtime"))
from runtime_jobs import RaiseTyped  # noqa: E402  (after the path is set)


def test_a_subtasks_typed_error_keeps_its_class_through_the_session(session: Session) -> None:
    env = Environment()
    env.from_sequence(1, 5).map(RaiseTyped(4), name="decode").print()
    with pytest.raises(DataFormatError) as caught:
        env.execute()
    assert caught.value.path == "/data/part-4.idx"


def test_a_refused_job_keeps_its_reasons_through_the_session(session: Session) -> None:
    env = Environment()
    env.from_sequence(1, 2).map(lambda x: x, resources={"gpu": 3}).print()  # 2 GPUs there
    with pytest.raises(AllocationError) as caught:
        env.execute()
    assert caught.value.reasons
