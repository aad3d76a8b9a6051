"""Key groups against Flink itself: ``data/flink_key_groups.txt`` is what Flink 2.3's
``KeyGroupRangeAssignment`` printed (``data/KeyGroups.java``, run against the ``flink-dist``
jar of ``pip install apache-flink``); and state and timers redistributed on rescale."""

from __future__ import annotations

import re
from pathlib import Path

from accelflow.dataflow.eventtime import TumblingEventTimeWindows
from accelflow.runtime.subtask._keygroups import (
    KeyGroupRange, default_max_parallelism, key_group_of, key_group_range, subtask_for_key)
from accelflow.runtime.subtask._window_engine import WindowEngine
from evtime_harness import sum_reducer

FLINK = Path(__file__).parent / "data" / "flink_key_groups.txt"


def _flink_lines(kind: str) -> list[list[str]]:
    return [line.split() for line in FLINK.read_text().splitlines() if line.startswith(kind + " ")]


def test_key_groups_are_flinks() -> None:
    """KeyGroupRangeAssignmentTest: ``assignToKeyGroup`` of int and long keys, 128 and 4096 groups."""
    rows = _flink_lines("int") + _flink_lines("long")
    assert len(rows) == 15
    for _, key, at_128, at_4096 in rows:
        assert (key_group_of(int(key), 128), key_group_of(int(key), 4096)) == (int(at_128), int(at_4096)), key


def test_default_max_parallelism_is_flinks() -> None:
    """KeyGroupRangeAssignment::computeDefaultMaxParallelism."""
    for _, parallelism, expected in _flink_lines("maxp"):
        assert default_max_parallelism(int(parallelism)) == int(expected)


def test_key_group_ranges_are_flinks() -> None:
    """KeyGroupRangeAssignment::computeKeyGroupRangeForOperatorIndex, and every group's owner
    (computeOperatorIndexForKeyGroup) is the subtask whose range holds it."""
    for _, parallelism, index, *shown in _flink_lines("range"):
        start, end = map(int, re.findall(r"=(\d+)", " ".join(shown)))
        assert key_group_range(128, int(parallelism), int(index)) == KeyGroupRange(start, end)
    for parallelism in (1, 2, 3, 5, 7):
        for key in range(200):
            owner = subtask_for_key(key, parallelism)
            assert key_group_of(key) in key_group_range(128, parallelism, owner)


def test_nan_keys_are_one_key_group() -> None:
    """Every NaN is one key (as Java's Double.equals), so one key group and one subtask."""
    nans = [float("nan"), float("-nan"), ("a", float("nan"))]
    assert key_group_of(nans[0]) == key_group_of(nans[1])
    engine = WindowEngine("w", TumblingEventTimeWindows.of(10), reduce_function=lambda a, b: (a[0], a[1] + b[1]))
    engine.process_element((nans[0], 1), 1, key=nans[0])
    engine.process_element((nans[1], 2), 2, key=nans[1])
    assert [v[1] for v, _ in engine.advance_watermark(9).records] == [3]


def _window_engine() -> WindowEngine:
    return WindowEngine("sum", TumblingEventTimeWindows.of(1000), reduce_function=sum_reducer)


def test_rescale_redistributes_state_and_timers() -> None:
    """Flink's rescaling (WindowOperatorMigrationTest / RescalingITCase): windows of 2 subtasks
    restored on 3 give, together, exactly the results of one uninterrupted operator."""
    keys = [f"user-{i}" for i in range(40)]
    before = [_window_engine() for _ in range(2)]
    reference = _window_engine()
    for i, key in enumerate(keys):
        for ts in (100, 600):
            before[subtask_for_key(key, 2)].process_element((key, i), ts, key=key)
            reference.process_element((key, i), ts, key=key)
    snapshots = [engine.snapshot() for engine in before]
    after = []
    for index in range(3):
        engine = _window_engine()
        engine.restore(snapshots, key_group_range(128, 3, index))
        after.append(engine)
    fired = [engine.advance_watermark(999).records for engine in after]
    for index, records in enumerate(fired):  # each subtask fires only the keys routed to it
        assert all(subtask_for_key(value[0], 3) == index for value, _ in records)
    results = sorted(r for records in fired for r in records)
    assert results == sorted(reference.advance_watermark(999).records)
    assert len(results) == 40
    assert all(engine.timers.num_event_time_timers() == 0 for engine in after)
