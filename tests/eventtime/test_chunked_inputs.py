"""The chunk-at-once paths before a window: timestamps of a whole chunk
(``TimestampsAndWatermarks.process_chunk``) and the routing of keys to subtasks
(``SubtaskOfKey``) give what the per-record paths give."""

from __future__ import annotations

import random

import numpy as np
import pytest

from accelflow._errors import JobError
from accelflow.dataflow.eventtime import MIN_TIMESTAMP, Duration, WatermarkStrategy
from accelflow.runtime.subtask._keygroups import subtask_for_key
from accelflow.runtime.subtask._partition import SubtaskOfKey
from accelflow.runtime.subtask._watermarks import TimestampsAndWatermarks, WatermarkStatus


def strategies() -> list[WatermarkStrategy]:
    bounded = WatermarkStrategy.for_bounded_out_of_orderness(Duration.of_millis(20))
    return [bounded.with_timestamp_assigner(lambda v, ts: v * 3),
            bounded.with_timestamp_assigner(lambda v, ts: v + (ts if ts > MIN_TIMESTAMP else 0)),
            bounded,  # the records' own timestamps
            WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v)
            .with_idleness(Duration.of_millis(10))]


@pytest.mark.parametrize("which", range(4))
def test_a_chunk_gets_the_timestamps_and_events_of_its_records_one_by_one(which: int) -> None:
    rng = random.Random(which)
    one, chunked = (TimestampsAndWatermarks(strategies()[which], "assign") for _ in range(2))
    for now in range(0, 400, 40):
        values = [rng.randint(0, 1000) for _ in range(rng.randint(0, 30))]
        own = [rng.choice([None, rng.randint(0, 50)]) for _ in values]
        expected = [one.process_element(v, t) for v, t in zip(values, own)]
        stamps, events = chunked.process_chunk(
            values, np.array([MIN_TIMESTAMP if t is None else t for t in own], np.int64))
        assert stamps.tolist() == [s for s, _ in expected]
        assert events == [e for _, es in expected for e in es]
        assert (one.max_timestamp, one.on_periodic_emit(now)) == (chunked.max_timestamp, chunked.on_periodic_emit(now))
    assert one.snapshot() == chunked.snapshot()


def test_an_idle_input_becomes_active_once_per_chunk() -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda v, ts: v) \
        .with_idleness(Duration.of_millis(10))
    gen = TimestampsAndWatermarks(strategy, "assign")
    gen.process_chunk([1], None)
    gen.on_periodic_emit(0), gen.on_periodic_emit(5)
    assert gen.on_periodic_emit(20) == [WatermarkStatus.IDLE]
    assert gen.process_chunk([2, 3], None)[1] == [WatermarkStatus.ACTIVE]


@pytest.mark.parametrize("returned", [None, "1000", 1.5, True])
def test_a_bad_timestamp_in_a_chunk_names_the_operator_and_the_record(returned: object) -> None:
    strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(
        lambda v, ts: returned if v == "bad" else 5)
    with pytest.raises(JobError, match=r"operator 'parse': the timestamp assigner .* for 'bad'"):
        TimestampsAndWatermarks(strategy, "parse").process_chunk(["ok", "bad", "ok"], None)


def test_remembered_subtasks_of_keys_are_those_of_their_key_groups() -> None:
    """int and str keys are remembered (also past the size, when it starts again); others,
    1.0 beside 1 and True, NaN, tuples, are computed each time: each key gets its own group's subtask."""
    subtask_of = SubtaskOfKey(3, 128, size=5)
    keys = [1, 1.0, True, "1", float("nan"), (1, "a"), None, 2**70, float(2**70), *range(20), *map(str, range(20))]
    for key in keys * 2:
        assert subtask_of(key) == subtask_for_key(key, 3, 128), key
    assert 0 < len(subtask_of.known) <= 5
