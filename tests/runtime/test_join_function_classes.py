"""A class given to a window join's ``apply`` is built once per subtask only where it is a
function class (a ``JoinFunction``, or one defining ``join`` or ``__call__``); any other class
-- a record class, a builtin such as ``complex`` -- is called per pair, as PyFlink calls it."""

from __future__ import annotations

from typing import Any

from key_jobs import Joined

from accelflow import Environment, Time, TumblingEventTimeWindows, WatermarkStrategy

BY_VALUE = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v)


def _joined(function: Any) -> list[Any]:
    """``[1, 2, 3]`` joined with ``[1, 3]`` by parity in one 10 ms window, through ``function``."""
    env = Environment({"parallelism.default": 1})
    one = env.from_collection([1, 2, 3]).assign_timestamps_and_watermarks(BY_VALUE)
    two = env.from_collection([1, 3]).assign_timestamps_and_watermarks(BY_VALUE)
    return one.join(two).where(lambda x: x % 2).equal_to(lambda x: x % 2) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(10))).apply(function).execute_and_collect()


def test_a_record_class_as_join_function_is_built_per_pair() -> None:
    assert sorted(_joined(Joined), key=repr) == [Joined(1, 1), Joined(1, 3), Joined(3, 1), Joined(3, 3)]


def test_a_builtin_class_as_join_function_is_called_per_pair() -> None:
    assert sorted(_joined(complex), key=repr) == [1 + 1j, 1 + 3j, 3 + 1j, 3 + 3j]
