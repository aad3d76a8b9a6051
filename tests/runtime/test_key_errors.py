"""An unhashable key in a keyed operator of one subtask (no key partitioner before it) is
explained as by the partitioner: the operator, the key selector with file:line, the key's type
and the fix -- for windows, process functions, keyed rich maps with state, co-process and
interval joins."""

from __future__ import annotations

from collections.abc import Callable
from datetime import timedelta
from typing import Any

import pytest

from accelflow import (
    DataStream, Environment, JobError, Time, TumblingEventTimeWindows, TumblingProcessingTimeWindows,
    WatermarkStrategy)
from key_jobs import CoEcho, Count, Echo, Pair, by_tags

TAGGED = [(["a"], 1), (["b"], 2), (["a"], 3)]
STAMPED = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v[1])


def _tagged(env: Environment, stamped: bool = False) -> DataStream:
    stream = env.from_collection(TAGGED)
    return stream.assign_timestamps_and_watermarks(STAMPED) if stamped else stream


JOBS: dict[str, Callable[[Environment], Any]] = {
    "event-time window": lambda env: _tagged(env, True).key_by(by_tags)
    .window(TumblingEventTimeWindows.of(Time.milliseconds(10))).reduce(lambda a, b: a, name="keyed"),
    "processing-time window": lambda env: _tagged(env).key_by(by_tags)
    .window(TumblingProcessingTimeWindows.of(Time.seconds(60))).reduce(lambda a, b: a, name="keyed"),
    "process function": lambda env: _tagged(env).key_by(by_tags).process(Echo(), name="keyed"),
    "rich map with state": lambda env: _tagged(env).key_by(by_tags).map(Count(), name="keyed"),
    "co-process": lambda env: _tagged(env).connect(_tagged(env)).key_by(by_tags, by_tags)
    .process(CoEcho(), name="keyed"),
    "interval join": lambda env: _tagged(env, True).key_by(by_tags).interval_join(_tagged(env, True).key_by(by_tags))
    .between(timedelta(milliseconds=-5), timedelta(milliseconds=5)).process(Pair(), name="keyed"),
}


@pytest.mark.parametrize("kind", list(JOBS))
def test_an_unhashable_key_of_a_single_keyed_subtask_names_the_selector_its_type_and_the_fix(kind: str) -> None:
    env = Environment({"parallelism.default": 1})
    JOBS[kind](env).print()
    with pytest.raises(TypeError) as caught:
        env.execute()
    assert isinstance(caught.value, JobError)
    message = str(caught.value)
    assert "operator 'keyed': the key selector by_tags (key_jobs.py:" in message
    assert "returned the list ['a'] for the record (['a'], 1)" in message
    assert "return a tuple (tuple(key)) or a str" in message
