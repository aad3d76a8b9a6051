"""User functions of tests/runtime/test_key_errors.py and test_join_function_classes.py,
importable by the subtasks."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from accelflow import (
    KeyedCoProcessFunction, KeyedProcessFunction, ProcessJoinFunction, RichMapFunction, Types,
    ValueStateDescriptor)


def by_tags(record: tuple[list[str], int]) -> list[str]:
    """A key selector returning a list: no key."""
    return record[0]


class Count(RichMapFunction[Any, Any]):
    """A keyed rich map with state: the count of its key's records."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.INT()))

    def map(self, value: Any) -> Any:
        self.count.update((self.count.value() or 0) + 1)
        return value, self.count.value()


class Echo(KeyedProcessFunction):
    """Each record, as it came, after a processing-time timer for its key."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.timer_service().register_processing_time_timer(ctx.timer_service().current_processing_time() + 60_000)
        yield value


class CoEcho(KeyedCoProcessFunction):
    """Each record of both inputs, the first input's also kept in its key's state."""

    def open(self, runtime_context: Any) -> None:
        self.last = runtime_context.get_state(ValueStateDescriptor("last", Types.INT()))

    def process_element1(self, value: Any, ctx: Any) -> Any:
        self.last.update(value[1])
        yield value

    def process_element2(self, value: Any, ctx: Any) -> Any:
        yield value


class Pair(ProcessJoinFunction):
    """The pair's values."""

    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        yield left[1], right[1]


@dataclass(frozen=True)
class Joined:
    """A record class given as a join function: ``apply(Joined)`` builds one per pair."""

    left: Any
    right: Any
