"""Functions and sources of the event-time jobs in tests (importable by subtasks: the tests'
directory is on their import path)."""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Iterator
from typing import Any

from accelflow import (
    AggregateFunction, AsyncFunction, KeyedProcessFunction, ProcessAllWindowFunction, ProcessJoinFunction,
    ProcessWindowFunction, RichMapFunction, RuntimeContext, SessionWindowTimeGapExtractor, Sink, Source,
    TimestampAssigner, Types, ValueStateDescriptor, WatermarkStrategy, WindowFunction,
)


class SecondColumnTimestampAssigner(TimestampAssigner):
    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[1])


MONOTONOUS = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(SecondColumnTimestampAssigner())


class CountWindowProcessFunction(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        return [(key, context.window().start, context.window().end, len(list(elements)))]


class CountAllWindowProcessFunction(ProcessAllWindowFunction):
    def process(self, context: Any, elements: Any) -> Any:
        return [(context.window().start, context.window().end, len(list(elements)))]


class SumWindowFunction(WindowFunction):
    def apply(self, key: Any, window: Any, inputs: Any) -> Any:
        return [(key, sum(i[0] for i in inputs))]


class GapFromSecondColumn(SessionWindowTimeGapExtractor):
    def extract(self, element: Any) -> int:
        return int(element[1])


class SumAggregate(AggregateFunction):
    """PyFlink's ``MyAggregateFunction`` of the accumulator-type tests: (key, sum of timestamps)."""

    def create_accumulator(self) -> Any:
        return 0, ""

    def add(self, value: Any, accumulator: Any) -> Any:
        return value[1] + accumulator[0], value[0]

    def get_result(self, accumulator: Any) -> Any:
        return accumulator[1], accumulator[0]

    def merge(self, acc_a: Any, acc_b: Any) -> Any:
        return acc_a[0] + acc_b[0], acc_a[1]


class ReduceResult(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield f"current window start at {context.window().start}, reduce result {next(iter(elements))}"


def add_second(a: Any, b: Any) -> Any:
    return (b[0], a[1] + b[1])


class CountPerKey(RichMapFunction):
    """A keyed map: how many records of its key it has seen (keyed ``ValueState``)."""

    def open(self, ctx: RuntimeContext) -> None:
        self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.INT()))

    def map(self, value: Any) -> Any:
        n = (self.seen.value() or 0) + 1
        self.seen.update(n)
        return value, n


class Alert(KeyedProcessFunction):
    """Counts a key's records in ``ValueState``; 100 ms after its first record (an event-time
    timer) emits (key, timer time, count then)."""

    def open(self, runtime_context: Any) -> None:
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        n = (self.count.value() or 0) + 1
        self.count.update(n)
        if n == 1:
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.get_current_key(), timestamp, self.count.value()


class PairUp(ProcessJoinFunction):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        yield left[0], left[1], right[1], ctx.get_timestamp()


class TimesTen(AsyncFunction):
    """Waits longer for smaller inputs, so that unordered results come back reversed."""

    async def async_invoke(self, value: Any) -> list[Any]:
        await asyncio.sleep(0.02 * (5 - value % 5))
        return [value * 10]


class Slow(AsyncFunction):
    async def async_invoke(self, value: Any) -> list[Any]:
        await asyncio.sleep(5)
        return [value]


class SlowWithFallback(Slow):
    def timeout(self, value: Any) -> list[Any]:
        return [("timed out", value)]


class ScalarFallback(Slow):
    """:class:`Slow` whose ``timeout`` returns a scalar, not a list of outputs."""

    def timeout(self, value: Any) -> Any:
        return "late"


class PacedSource(Source[Any]):
    """``records`` one at a time, ``pause_s`` apart (a slow input), then a pause of ``tail_s``
    before the end."""

    def __init__(self, records: list[Any], pause_s: float, tail_s: float = 0.0) -> None:
        self.records = records
        self.pause_s = pause_s
        self.tail_s = tail_s

    def create_splits(self, parallelism: int) -> list[Any]:
        return [self.records] + [[] for _ in range(parallelism - 1)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for record in split:
            time.sleep(self.pause_s)
            yield record
        if split:
            time.sleep(self.tail_s)


class MarkerSource(Source[Any]):
    """A bounded source of ``records`` that, after ``hold_at`` of them, waits until a marker file
    exists (so a test can act while a job is mid-stream), then goes on; records are emitted
    ``pause_s`` apart (watermarks and checkpoints fall between them)."""

    def __init__(self, records: list[Any], hold_at: int, marker: str, pause_s: float = 0.005) -> None:
        self.records, self.hold_at, self.marker, self.pause_s = records, hold_at, marker, pause_s

    def create_splits(self, parallelism: int) -> list[Any]:
        return [0] + [None] * (parallelism - 1)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        if split is None:
            return
        for i, record in enumerate(self.records):
            if i == self.hold_at:
                while not os.path.exists(self.marker):
                    time.sleep(0.01)
            time.sleep(self.pause_s)
            yield record


class Concurrency(AsyncFunction):
    """Emits how many calls were running at once when each started."""

    def open(self, runtime_context: Any) -> None:
        self.running = 0

    async def async_invoke(self, value: Any) -> list[Any]:
        self.running += 1
        seen = self.running
        await asyncio.sleep(0.01)
        self.running -= 1
        return [seen]


def window_sum(a: Any, b: Any) -> Any:
    """(key, window's first record, sum, count) of two partial results."""
    return a[0], min(a[1], b[1]), a[2] + b[2], a[3] + b[3]


class Enrich(AsyncFunction):
    """An async lookup that takes a little while (so that inputs are in flight at checkpoints)."""

    async def async_invoke(self, value: Any) -> list[Any]:
        await asyncio.sleep(0.002)
        return [("enriched", *value)]


class FirstSeen(KeyedProcessFunction):
    """Remembers a key's first timestamp (``ValueState``) and 300 ms after it (an event-time
    timer) emits (key, first timestamp, records of the key seen by then)."""

    def open(self, runtime_context: Any) -> None:
        self.first = runtime_context.get_state(ValueStateDescriptor("first", Types.LONG()))
        self.count = runtime_context.get_state(ValueStateDescriptor("count", Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        if self.first.value() is None:
            self.first.update(ctx.timestamp())
            ctx.timer_service().register_event_time_timer(ctx.timestamp() + 300)
        self.count.update((self.count.value() or 0) + 1)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield ctx.get_current_key(), self.first.value(), self.count.value()


class ChunkSizes(Sink[Any]):
    """A sink that writes the size of every chunk it gets to ``path`` (one line each)."""

    def __init__(self, path: str) -> None:
        self.path = path

    def open(self, ctx: RuntimeContext) -> None:
        self.sizes: list[int] = []

    def write(self, chunk: Any) -> None:
        self.sizes.append(len(chunk))

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        return []

    def commit(self, committables: list[Any]) -> None:
        pass

    def end_of_input(self) -> None:
        with open(self.path, "w", encoding="utf-8") as f:
            f.write("".join(f"{n}\n" for n in self.sizes))
