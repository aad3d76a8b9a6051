"""User functions of tests/runtime/test_function_kinds.py and test_record_errors.py, importable
by the subtasks (pickled by reference)."""

from __future__ import annotations

import os
import threading
from dataclasses import dataclass
from typing import Any

from accelflow import RichMapFunction


@dataclass(frozen=True)
class Reading:
    """A record type: ``map(Reading)`` builds one per record, as ``Reading(x)``."""

    value: int


class TagRich(RichMapFunction[int, tuple[int, int, int]]):
    """A rich function passed as a class: maps to (value, pid, id of this instance)."""

    def map(self, value: int) -> tuple[int, int, int]:
        return value, os.getpid(), id(self)


class TagPlain:
    """A plain class with a ``map`` method, passed as a class: as :class:`TagRich`."""

    def map(self, value: int) -> tuple[int, int, int]:
        return value, os.getpid(), id(self)


def by_tags(record: tuple[list[str], int]) -> list[str]:
    """A key selector returning a list: no key."""
    return record[0]


def a_lock(value: int) -> Any:
    return threading.Lock()


def halves(value: int) -> Any:
    """A generator that raises a TypeError of its own on its second step."""
    yield value
    yield value + "1"  # type: ignore[operator]
