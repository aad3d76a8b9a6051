"""The interval join, ported from Flink's IntervalJoinOperatorTest (flink-streaming-java/src/test/
java/org/apache/flink/streaming/api/operators/co/IntervalJoinOperatorTest.java): elements
1..4 on each side (key "key", the left side first or the right side first), a watermark on
each input after each element, combined by the watermark valve as a two-input operator does."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow.eventtime import OutputTag, ProcessJoinFunction
from accelflow.runtime.subtask._interval_join import IntervalJoinEngine
from accelflow.runtime.subtask._keygroups import KeyGroupRange
from accelflow.runtime.subtask._watermarks import StatusWatermarkValve, Watermark


class PassthroughJoin(ProcessJoinFunction):
    def process_element(self, left: Any, right: Any, ctx: Any) -> Any:
        assert ctx.get_left_timestamp() == left[0] and ctx.get_right_timestamp() == right[0]
        assert ctx.get_timestamp() == max(left[0], right[0])
        yield (left, right)


class TwoInputHarness:
    """Elements and per-input watermarks in; pairs ``(left ts, right ts)`` and their timestamps out."""

    def __init__(self, engine: IntervalJoinEngine) -> None:
        self.engine = engine
        self.valve = StatusWatermarkValve(2)
        self.output: list[tuple[tuple[int, int], int]] = []
        self.side: list[Any] = []
        engine.open()

    def _take(self, out: Any) -> None:
        self.output += [((left[0], right[0]), ts) for (left, right), ts in out.records]
        self.side += out.side

    def element(self, side: int, ts: int) -> TwoInputHarness:
        elem = (ts, "lhs" if side == 1 else "rhs")
        self._take(self.engine.process_element(elem, ts, key="key", input_index=side - 1))
        return self

    def watermark(self, side: int, ts: int) -> TwoInputHarness:
        for event in self.valve.input_watermark(ts, side - 1):
            if isinstance(event, Watermark):
                self._take(self.engine.advance_watermark(event.timestamp))
        return self

    def buffer(self, side: int) -> list[int]:
        self.engine.set_current_key("key")
        return sorted(self.engine.buffers[side - 1].keys())


def joined(lower: int, lower_inclusive: bool, upper: int, upper_inclusive: bool, lhs_first: bool) -> list[Any]:
    engine = IntervalJoinEngine(PassthroughJoin(), "join", lower, upper,
                                lower_bound_inclusive=lower_inclusive, upper_bound_inclusive=upper_inclusive)
    h = TwoInputHarness(engine)
    for side in ((1, 2) if lhs_first else (2, 1)):
        for i in range(1, 5):
            h.element(side, i).watermark(side, i)
    assert all(ts == max(pair) for pair, ts in h.output)
    return sorted(pair for pair, _ in h.output)


CASES = [  # IntervalJoinOperatorTest: (bounds, expected pairs)
    ("testNegativeInclusiveAndNegativeInclusive", (-2, True, -1, True), [(2, 1), (3, 1), (3, 2), (4, 2), (4, 3)]),
    ("testNegativeInclusiveAndPositiveInclusive", (-1, True, 1, True),
     [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3), (3, 4), (4, 3), (4, 4)]),
    ("testPositiveInclusiveAndPositiveInclusive", (1, True, 2, True), [(1, 2), (1, 3), (2, 3), (2, 4), (3, 4)]),
    ("testNegativeExclusiveAndNegativeExlusive", (-3, False, -1, False), [(3, 1), (4, 2)]),
    ("testNegativeExclusiveAndPositiveExlusive", (-1, False, 1, False), [(1, 1), (2, 2), (3, 3), (4, 4)]),
    ("testPositiveExclusiveAndPositiveExlusive", (1, False, 3, False), [(1, 3), (2, 4)]),
]


@pytest.mark.parametrize("lhs_first", [True, False], ids=["lhs-faster", "rhs-faster"])
@pytest.mark.parametrize("bounds, expected", [(b, e) for _, b, e in CASES], ids=[n for n, _, _ in CASES])
def test_bounds(bounds: tuple[int, bool, int, bool], expected: list[Any], lhs_first: bool) -> None:
    """IntervalJoinOperatorTest: the six inclusive/exclusive bound cases, each input first."""
    assert joined(*bounds, lhs_first) == expected


def test_implementation_mirrors_correctly() -> None:
    """IntervalJoinOperatorTest::testImplementationMirrorsCorrectly: [l, u] from the left is
    [-u, -l] from the right."""
    assert joined(1, True, 2, True, True) == [(1, 2), (1, 3), (2, 3), (2, 4), (3, 4)]
    assert joined(-2, True, -1, True, True) == [(2, 1), (3, 1), (3, 2), (4, 2), (4, 3)]


@pytest.mark.parametrize("bounds, after_1, after_4", [
    ((-1, True, 0, True), ([2, 3, 4, 5], [1, 2, 3, 4, 5]), ([5], [4, 5])),
    ((-2, False, 1, False), ([2, 3, 4, 5], [1, 2, 3, 4, 5]), ([5], [4, 5])),
    ((0, True, 1, True), ([1, 2, 3, 4, 5], [2, 3, 4, 5]), ([4, 5], [5])),
    ((-1, False, 2, False), ([1, 2, 3, 4, 5], [2, 3, 4, 5]), ([4, 5], [5])),
], ids=["testStateCleanupNegativeInclusiveNegativeInclusive", "testStateCleanupNegativePositiveNegativeExlusive",
        "testStateCleanupPositiveInclusivePositiveInclusive", "testStateCleanupPositiveExlusivePositiveExclusive"])
def test_state_cleanup(bounds: tuple[int, bool, int, bool], after_1: Any, after_4: Any) -> None:
    """IntervalJoinOperatorTest::testStateCleanup*: buffers shrink as the watermark passes."""
    lower, lower_inclusive, upper, upper_inclusive = bounds
    h = TwoInputHarness(IntervalJoinEngine(PassthroughJoin(), "join", lower, upper,
                                           lower_bound_inclusive=lower_inclusive, upper_bound_inclusive=upper_inclusive))
    for side in (1, 2):
        for i in range(1, 6):
            h.element(side, i)
    h.watermark(1, 1).watermark(2, 1)
    assert (h.buffer(1), h.buffer(2)) == after_1
    h.watermark(1, 4).watermark(2, 4)
    assert (h.buffer(1), h.buffer(2)) == after_4
    h.watermark(1, 6).watermark(2, 6)
    assert (h.buffer(1), h.buffer(2)) == ([], [])


def test_restore_from_snapshot() -> None:
    """IntervalJoinOperatorTest::testRestoreFromSnapshot."""
    h = TwoInputHarness(IntervalJoinEngine(PassthroughJoin(), "join", -1, 1))
    for i in (1, 2, 3):
        h.element(1, i).watermark(1, i).element(2, i).watermark(2, i)
    assert sorted(p for p, _ in h.output) == [(1, 1), (1, 2), (2, 1), (2, 2), (2, 3), (3, 2), (3, 3)]
    snapshot = h.engine.snapshot()
    engine = IntervalJoinEngine(PassthroughJoin(), "join", -1, 1)
    engine.restore([snapshot], KeyGroupRange.all())
    restored = TwoInputHarness(engine)
    restored.element(1, 4).watermark(1, 4).element(2, 4).watermark(2, 4)
    assert sorted(p for p, _ in restored.output) == [(3, 4), (4, 3), (4, 4)]


def test_late_elements_go_to_the_side_outputs() -> None:
    """IntervalJoinOperatorTest::testLateData (and sideOutputLeftLateData/RightLateData)."""
    engine = IntervalJoinEngine(PassthroughJoin(), "join", -1, 1, left_late_data_output_tag=OutputTag("left-late"),
                                right_late_data_output_tag=OutputTag("right-late"))
    h = TwoInputHarness(engine)
    h.watermark(1, 3).watermark(2, 3)
    h.element(1, 2).element(2, 1).element(1, 3)
    assert h.output == [] and [(tag, value) for tag, value, _ in h.side] == [
        ("left-late", (2, "lhs")), ("right-late", (1, "rhs"))]


def test_fails_with_no_timestamps() -> None:
    """IntervalJoinOperatorTest::testFailsWithNoTimestampsLeft/Right."""
    engine = IntervalJoinEngine(PassthroughJoin(), "join", -1, 1)
    with pytest.raises(JobError, match="operator 'join': an element has no timestamp"):
        engine.process_element1((1, "lhs"), None, key="key")


def test_lower_bound_above_upper_bound_is_refused() -> None:
    """IntervalJoinOperator: "lowerBound <= upperBound must be fulfilled"."""
    with pytest.raises(ConfigError, match="lowerBound <= upperBound must be fulfilled"):
        IntervalJoinEngine(PassthroughJoin(), "join", 1, 1, lower_bound_inclusive=False)
