"""A rollback in place (issue 28) drops what an event-time window operator gathered after the
checkpoint (issue 30's chunked windows): the records are replayed from the sources, so keeping
them would count them twice."""

from __future__ import annotations

from typing import Any

from accelflow import Environment, RuntimeContext, Time, TumblingEventTimeWindows
from accelflow.dataflow._chunks import stamped
from accelflow.runtime import ChainPlan
from accelflow.runtime.subtask._event_operators import WindowOp


def _window_op() -> WindowOp:
    env = Environment()
    (env.from_collection([("a", 1)]).key_by(lambda r: r[0])
        .window(TumblingEventTimeWindows.of(Time.milliseconds(100))).reduce(lambda a, b: (a[0], a[1] + b[1]),
                                                                            name="sums"))
    node = env._transformations[-1]
    op = WindowOp(node, ChainPlan("sums", [node], (), rolling=False))
    op.open(RuntimeContext(task_name="t", index_of_this_subtask=0, number_of_parallel_subtasks=1,
                           attempt_number=0, assigned={}, taskexecutor_infos={}, taskexecutor_id="te"))
    return op


def _values(out: Any) -> list[Any]:
    return list(out.stripped()) if hasattr(out, "stripped") else list(out)


def test_a_rollback_drops_the_records_a_window_gathered() -> None:
    op = _window_op()
    assert op.process_input(stamped([("a", 1), ("a", 2)], [10, 20]), 0) == []  # gathered, not added yet
    assert op.holds()
    op.reset()
    assert not op.holds()
    op.process_input(stamped([("a", 5)], [30]), 0)  # the replay after the rollback
    assert _values(op.process_watermark(1000)) == [("a", 5)]
