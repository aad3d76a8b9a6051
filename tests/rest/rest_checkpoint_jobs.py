"""User code for the checkpoint tests on a session cluster, importable by its subtasks (the
REST tests put this directory on the cluster's ``PYTHONPATH``): tests/runtime's checkpointed
source and two-phase-commit sink, and a source that reports a Kafka-style lag."""

from __future__ import annotations

import sys
import time
from pathlib import Path

_RUNTIME = str(Path(__file__).resolve().parents[1] / "runtime")
if _RUNTIME not in sys.path:
    sys.path.insert(0, _RUNTIME)

from runtime_jobs import CommitLog, FailFirstAttempt, Paced, published  # noqa: E402

__all__ = ["CommitLog", "FailWhenLetGo", "LaggingPaced", "Paced", "double", "published"]


class LaggingPaced(Paced):
    """:class:`Paced` whose subtasks report ``kafka_lag:orders:<index>`` = 7 (see
    ``Source.metrics``)."""

    def read_chunks(self, split, ctx):  # type: ignore[no-untyped-def]
        self.index = ctx.index_of_this_subtask
        return super().read_chunks(split, ctx)

    def metrics(self) -> dict[str, float]:
        return {f"kafka_lag:orders:{getattr(self, 'index', 0)}": 7.0}


def double(x: int) -> int:
    return 2 * x


class FailWhenLetGo(FailFirstAttempt):
    """:class:`FailFirstAttempt` whose failure on record ``bad`` first waits (up to 60 s) for
    the file ``gate`` (a test creates it, e.g. once a checkpoint completed)."""

    def __init__(self, bad: int, gate: str) -> None:
        super().__init__(bad)
        self.gate = gate

    def map(self, value: int) -> tuple[int, int]:
        if value == self.bad and self.ctx.attempt_number == 0:
            deadline = time.monotonic() + 60
            while not Path(self.gate).exists() and time.monotonic() < deadline:
                time.sleep(0.01)
        return super().map(value)
