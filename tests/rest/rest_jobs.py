"""User code for the REST tests, in a light module that the session cluster can import.

Kept free of pytest and test imports: the session cluster's subtasks import it by name
(the tests put this directory on the cluster's ``PYTHONPATH``).
"""

from __future__ import annotations

import itertools
import time
from collections.abc import Iterator
from typing import Any

from accelflow import RuntimeContext, Source


class Slowly(Source[int]):
    """Unbounded: one number every ``delay`` seconds per subtask, until cancelled."""

    bounded = False

    def __init__(self, delay: float = 0.02) -> None:
        self.delay = delay

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        for i in itertools.count():
            if ctx.is_cancelled():
                return
            time.sleep(self.delay)
            yield i


def identity(x: int) -> int:
    return x


def discard(x: Any) -> None:
    return None
