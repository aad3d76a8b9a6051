"""``WindowEngine.process_chunk`` (a subtask's chunk at once) against ``process_element`` one by
one: the same records and side outputs in the same order, the same state and timers (in
registration order) and the same dropped count, over random jobs mixing every assigner,
trigger, lateness, window function, late element and NaN key."""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import pytest

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow.eventtime import (
    MIN_TIMESTAMP, AggregateFunction, ContinuousEventTimeTrigger, CountTrigger, EventTimeSessionWindows,
    EventTimeTrigger, GlobalWindows, OutputTag, ProcessingTimeTrigger, ProcessWindowFunction, PurgingTrigger,
    SlidingEventTimeWindows, SlidingProcessingTimeWindows, TumblingEventTimeWindows,
    TumblingProcessingTimeWindows)
from accelflow.runtime.subtask import _window_chunks
from accelflow.runtime.subtask._window_engine import WindowEngine


class Average(AggregateFunction):
    def create_accumulator(self) -> Any:
        return (0, 0)

    def add(self, value: Any, acc: Any) -> Any:
        return (acc[0] + value[1], acc[1] + 1)

    def get_result(self, acc: Any) -> Any:
        return acc[0] / acc[1]

    def merge(self, a: Any, b: Any) -> Any:
        return (a[0] + b[0], a[1] + b[1])


class Listing(ProcessWindowFunction):
    """Every element of the pane, in order, with the key and the window."""

    def process(self, key: Any, context: Any, elements: Any) -> Any:
        yield (key, context.window(), [v[1] for v in elements])


ASSIGNERS = [
    lambda: TumblingEventTimeWindows.of(1000), lambda: TumblingEventTimeWindows.of(700, 300),
    lambda: SlidingEventTimeWindows.of(1500, 500), lambda: TumblingProcessingTimeWindows.of(1000),
    lambda: SlidingProcessingTimeWindows.of(1000, 250), lambda: EventTimeSessionWindows.with_gap(300),
    lambda: GlobalWindows.create(),
]
TRIGGERS = [None, None, lambda: CountTrigger.of(3), lambda: PurgingTrigger.of(CountTrigger.of(2)),
            lambda: ContinuousEventTimeTrigger.of(400), lambda: ProcessingTimeTrigger.create(),
            lambda: EventTimeTrigger.create()]
FUNCTIONS = [{"reduce_function": lambda a, b: (a[0], a[1] + b[1])}, {"aggregate_function": Average},
             {"window_function": Listing}]
KEY_SETS = [["a", "b", 3, 3.0, float("nan"), (1, float("nan")), None],
            [1, 2, 3, -7, 2**40],  # ints: grouped by sorting
            [1, 2, 2**70, True]]  # an int beyond int64, a bool: grouped one by one


def scenario(seed: int) -> tuple[dict[str, Any], list[tuple[str, Any]]]:
    """A random engine setup and a random script of chunks, watermarks and processing times."""
    rng = random.Random(seed)
    assigner = rng.choice(ASSIGNERS)()
    trigger = rng.choice(TRIGGERS)
    if isinstance(assigner, GlobalWindows):
        trigger = lambda: CountTrigger.of(3)  # noqa: E731 (a global window never fires by itself)
    setup = {"assigner": assigner, "trigger": trigger() if trigger else None,
             "allowed_lateness": rng.choice([0, 0, 400, 2500]),
             "late_data_output_tag": rng.choice([None, OutputTag("late")]), **rng.choice(FUNCTIONS)}
    script: list[tuple[str, Any]] = []
    keys = rng.choice(KEY_SETS)
    now = watermark = 0
    for _ in range(rng.randint(5, 25)):
        what = rng.random()
        if what < 0.6:
            chunk = []
            for _ in range(rng.randint(0, 40)):  # some late, some far ahead
                timestamp = max(0, watermark + rng.randint(-3000, 2500))
                chunk.append(((rng.choice(keys), rng.randint(1, 9)), timestamp))
            script.append(("chunk", chunk))
        elif what < 0.85:
            watermark += rng.randint(0, 1500)
            script.append(("watermark", watermark))
        else:
            now += rng.randint(0, 1500)
            script.append(("processing", now))
    return setup, script


def run(setup: dict[str, Any], script: list[tuple[str, Any]], chunked: bool) -> dict[str, Any]:
    engine = WindowEngine("w", **setup)
    engine.open()
    records: list[Any] = []
    side: list[Any] = []

    def take(out: Any) -> None:
        records.extend(out.records)
        side.extend(out.side)

    for what, arg in script:
        if what == "watermark":
            take(engine.advance_watermark(arg))
            records.append(("W", arg))
        elif what == "processing":
            take(engine.advance_processing_time(arg))
        elif chunked:
            take(engine.process_chunk([v for v, _ in arg], [t for _, t in arg], [v[0] for v, _ in arg]))
        else:
            for value, timestamp in arg:
                take(engine.process_element(value, timestamp, key=value[0]))
    return {"records": records, "side": side, "snapshot": engine.snapshot(),
            "dropped": engine.num_late_records_dropped}


@pytest.mark.parametrize("seed", range(400))
def test_a_chunk_at_once_is_its_elements_one_by_one(seed: int) -> None:
    setup, script = scenario(seed)
    assert repr(run(setup, script, chunked=True)) == repr(run(scenario(seed)[0], script, chunked=False))


def test_the_chunk_path_is_taken_for_event_time_windows(monkeypatch: pytest.MonkeyPatch) -> None:
    """A tumbling sum goes through ``add_chunk`` (not element by element): its reduce sees
    each (key, window)'s values folded in order, and one timer is registered per (key, window)."""
    taken = []
    original = _window_chunks.add_chunk

    def spy(*args: Any) -> Any:
        taken.append(result := original(*args))
        return result

    monkeypatch.setattr("accelflow.runtime.subtask._window_engine.add_chunk", spy)
    engine = WindowEngine("w", TumblingEventTimeWindows.of(1000), reduce_function=lambda a, b: a + b)
    engine.process_chunk([1, 2, 3, 5], np.array([10, 1500, 20, 999]), ["k", "k", "k", "j"])
    assert taken and taken[0] is not None
    assert engine.timers.num_event_time_timers() == 3
    assert engine.advance_watermark(999).records == [(4, 999), (5, 999)]


def test_a_record_without_timestamp_still_names_the_problem() -> None:
    engine = WindowEngine("w", TumblingEventTimeWindows.of(1000), reduce_function=lambda a, b: a + b)
    with pytest.raises(ConfigError, match="a record has no timestamp") as caught:
        engine.process_chunk([1, 2], np.array([10, MIN_TIMESTAMP]), ["k", "k"])
    assert caught.value.keys == ("TumblingEventTimeWindows",)


def test_none_in_a_process_window_is_refused_in_a_chunk_too() -> None:
    engine = WindowEngine("w", TumblingEventTimeWindows.of(1000), window_function=Listing)
    with pytest.raises(JobError, match="cannot hold None"):
        engine.process_chunk([1, None], [10, 20], ["k", "k"])
