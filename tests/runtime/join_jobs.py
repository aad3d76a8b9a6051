"""Functions of the window join and co-group jobs in tests, after Flink's CoGroupJoinITCase
(flink-tests/src/test/java/org/apache/flink/test/streaming/runtime/CoGroupJoinITCase.java)
(importable by subtasks: the tests' directory is on their import path)."""

from __future__ import annotations

from typing import Any

from accelflow import CoGroupFunction, JoinFunction, TimestampAssigner, WatermarkStrategy


def flink_tuple(t: Any) -> str:
    """A tuple as Flink's ``Tuple.toString()`` prints it: ``(a,x,0)``."""
    return "(" + ",".join(str(f) for f in t) + ")"


class LastFieldTimestamp(TimestampAssigner):
    """CoGroupJoinITCase's ``Tuple2TimestampExtractor`` / ``Tuple3TimestampExtractor``: the last field."""

    def extract_timestamp(self, value: Any, record_timestamp: int) -> int:
        return int(value[-1])


#: the extractors' watermark, ``timestamp - 1``, as a periodic strategy
LAST_FIELD = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(LastFieldTimestamp())


class FirstField:
    """CoGroupJoinITCase's ``Tuple2KeyExtractor``: a PyFlink ``KeySelector`` (``get_key``)."""

    def get_key(self, value: Any) -> Any:
        return value[0]


class FirstAndSecond(CoGroupFunction):
    """testCoGroup's function: ``F:<first's records> S:<second's records>``."""

    def co_group(self, first: Any, second: Any, collector: Any) -> None:
        collector.collect("F:" + "".join(map(flink_tuple, first)) + " S:" + "".join(map(flink_tuple, second)))


class Concatenate(JoinFunction):
    """testJoin's function: ``first + ":" + second``."""

    def join(self, value1: Any, value2: Any) -> str:
        return flink_tuple(value1) + ":" + flink_tuple(value2)


class Summary(CoGroupFunction):
    """Per key and window: the key, the first stream's smallest record and count, the second's
    count and sum (yielded, not collected)."""

    def co_group(self, first: Any, second: Any, collector: Any) -> Any:
        first, second = list(first), list(second)
        yield [first[0] % 5 if first else None, min(first, default=None), len(first), len(second), sum(second)]


class Opened(JoinFunction):
    """A rich join function: ``open`` gets the runtime context, ``get_runtime_context()`` works."""

    def open(self, ctx: Any) -> None:
        self.subtasks = self.get_runtime_context().number_of_parallel_subtasks

    def join(self, value1: Any, value2: Any) -> Any:
        return (value1[0], self.subtasks)
