"""A test harness for the event-time engines, after Flink's ``OneInputStreamOperatorTestHarness``:
it feeds elements, watermarks and processing time to an engine and records what came out,
watermarks included (an engine's caller forwards each watermark after the outputs it caused),
so that a port of a Flink test compares the same sequence."""

from __future__ import annotations

import pickle
from collections.abc import Callable
from typing import Any

from accelflow.runtime.subtask._keygroups import KeyGroupRange


class W(int):
    """A watermark in an expected or recorded output."""

    def __repr__(self) -> str:
        return f"W({int(self)})"


def first_field(value: Any) -> Any:
    return value[0]


def sum_reducer(a: tuple[str, int], b: tuple[str, int]) -> tuple[str, int]:
    """Flink's ``SumReducer`` of ``WindowOperatorTest``."""
    return (b[0], a[1] + b[1])


#: whether a :class:`Harness` gives a window engine its elements in chunks
#: (``process_chunk`` of the elements between two other calls), as a subtask does, rather
#: than one by one; the window tests run both ways (their ``chunked`` fixture)
CHUNKED = {"on": False}


class Harness:
    """Drives one engine; ``output`` holds ``(value, timestamp)`` records and ``W`` watermarks.

    In chunked mode (:data:`CHUNKED`) the elements fed in a row go to a window engine's
    ``process_chunk`` together, before anything else reads or drives the engine."""

    def __init__(self, engine: Any, key: Callable[[Any], Any] = first_field) -> None:
        self._engine = engine
        self.key = key
        self._output: list[Any] = []
        self._side: dict[str, list[tuple[Any, Any]]] = {}
        self.chunked = CHUNKED["on"] and hasattr(engine, "process_chunk")
        self.pending: list[tuple[Any, int | None, Any]] = []
        if hasattr(engine, "open"):
            engine.open()

    def _flush(self) -> None:
        if self.pending:
            pending, self.pending = self.pending, []
            values, stamps, keys = (list(column) for column in zip(*pending))
            self._take(self._engine.process_chunk(values, stamps, keys))

    @property
    def engine(self) -> Any:
        self._flush()
        return self._engine

    @property
    def output(self) -> list[Any]:
        self._flush()
        return self._output

    @property
    def side(self) -> dict[str, list[tuple[Any, Any]]]:
        self._flush()
        return self._side

    def _take(self, outputs: Any) -> None:
        self._output += outputs.records
        for tag, value, timestamp in outputs.side:
            self._side.setdefault(tag, []).append((value, timestamp))

    def element(self, value: Any, timestamp: int | None = None) -> Harness:
        if self.chunked:
            self.pending.append((value, timestamp, self.key(value)))
        else:
            self._take(self._engine.process_element(value, timestamp, key=self.key(value)))
        return self

    def watermark(self, watermark: int) -> Harness:
        self._take(self.engine.advance_watermark(watermark))
        self._output.append(W(watermark))
        return self

    def processing_time(self, now: int) -> Harness:
        self._take(self.engine.advance_processing_time(now))
        return self

    def records(self) -> list[tuple[Any, Any]]:
        return [o for o in self.output if not isinstance(o, W)]

    def restored(self, make_engine: Callable[[], Any], key_groups: KeyGroupRange | None = None) -> Harness:
        """A new harness whose engine (from ``make_engine``) is restored from this one's
        snapshot, pickled as a checkpoint would be; its output starts empty."""
        snapshot = pickle.loads(pickle.dumps(self.engine.snapshot()))
        engine = make_engine()
        engine.restore([snapshot], key_groups or KeyGroupRange.all(engine.max_parallelism))
        return Harness(engine, self.key)


def sorted_segments(output: list[Any]) -> list[Any]:
    """``output`` with the records between two watermarks sorted (Flink's
    ``assertOutputEqualsSorted``), so that only the order across watermarks counts."""
    result: list[Any] = []
    segment: list[Any] = []
    for item in output:
        if isinstance(item, W):
            result += sorted(segment, key=repr) + [item]
            segment = []
        else:
            segment.append(item)
    return result + sorted(segment, key=repr)


def assert_output(expected: list[Any], output: list[Any]) -> None:
    assert sorted_segments(output) == sorted_segments([W(x) if type(x) is int else x for x in expected])
