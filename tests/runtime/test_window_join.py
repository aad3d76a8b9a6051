"""The window join and co-group (``a.join(b).where(k).equal_to(k).window(w).apply(f)``) as real
jobs on the local cluster, at parallelism 1 and 2: Flink's CoGroupJoinITCase
(flink-tests/src/test/java/org/apache/flink/test/streaming/runtime/CoGroupJoinITCase.java)
with its expected output, the tumbling and sliding window joins of Flink's documentation
(docs/content/docs/dev/datastream/operators/joining.md, "Tumbling Window Join" and "Sliding
Window Join": an orange stream 0..7 and a green stream 0, 1, 3, 4), a trigger, and a job
killed (SIGKILL of a TaskExecutor) mid-window that still emits every window result once."""

from __future__ import annotations

from collections import defaultdict
from pathlib import Path
from typing import Any

import pytest
from join_jobs import LAST_FIELD, Concatenate, FirstAndSecond, FirstField, Opened, Summary
from runtime_jobs import CommitLog, Paced, published
from test_checkpointing import _completed, _conf, _kill_a_taskexecutor, _wait_until

from accelflow import (
    ConfigError, CountTrigger, Environment, EventTimeSessionWindows, GlobalWindows, SlidingEventTimeWindows, Time, TumblingEventTimeWindows,
    WatermarkStrategy,
)

PARALLELISM = pytest.mark.parametrize("p", [1, 2])
TUMBLING_3MS = TumblingEventTimeWindows.of(Time.milliseconds(3))

#: testCoGroup's sources
COGROUP_1 = [("a", 0), ("a", 1), ("a", 2), ("b", 3), ("b", 4), ("b", 5), ("a", 6), ("a", 7), ("a", 8)]
COGROUP_2 = [("a", 0), ("a", 1), ("b", 3), ("c", 6), ("c", 7), ("c", 8)]
#: testJoin's sources
JOIN_1 = [("a", "x", 0), ("a", "y", 1), ("a", "z", 2), ("b", "u", 3), ("b", "w", 5), ("a", "i", 6), ("a", "j", 7),
          ("a", "k", 8)]
JOIN_2 = [("a", "u", 0), ("a", "w", 1), ("b", "i", 3), ("b", "k", 5), ("a", "x", 6), ("a", "z", 8)]
#: joining.md's streams: (key, timestamp)
ORANGE = [(0, t) for t in range(8)]
GREEN = [(0, t) for t in (0, 1, 3, 4)]


def streams(p: int, *data: list[Any]) -> list[Any]:
    """One stream per list, each in one source subtask (in order) with timestamps from its last field."""
    env = Environment({"parallelism.default": p})
    return [env.from_collection(d, parallelism=1).assign_timestamps_and_watermarks(LAST_FIELD) for d in data]


@PARALLELISM
def test_co_group(p: int) -> None:
    """CoGroupJoinITCase::testCoGroup: a window with records of one stream only is co-grouped
    with an empty side ("F:(a,6)(a,7)(a,8) S:" and "F: S:(c,6)(c,7)(c,8)")."""
    one, two = streams(p, COGROUP_1, COGROUP_2)
    result = one.co_group(two).where(FirstField()).equal_to(FirstField()).window(TUMBLING_3MS) \
        .apply(FirstAndSecond()).execute_and_collect()
    assert sorted(result) == sorted([
        "F:(a,0)(a,1)(a,2) S:(a,0)(a,1)",
        "F:(b,3)(b,4)(b,5) S:(b,3)",
        "F:(a,6)(a,7)(a,8) S:",
        "F: S:(c,6)(c,7)(c,8)"])


@PARALLELISM
def test_join(p: int) -> None:
    """CoGroupJoinITCase::testJoin: every pair of a window's records of a key, one from each stream."""
    one, two = streams(p, JOIN_1, JOIN_2)
    result = one.join(two).where(FirstField()).equal_to(FirstField()).window(TUMBLING_3MS) \
        .apply(Concatenate()).execute_and_collect()
    assert sorted(result) == sorted([
        "(a,x,0):(a,u,0)", "(a,x,0):(a,w,1)", "(a,y,1):(a,u,0)", "(a,y,1):(a,w,1)", "(a,z,2):(a,u,0)",
        "(a,z,2):(a,w,1)", "(b,u,3):(b,i,3)", "(b,u,3):(b,k,5)", "(b,w,5):(b,i,3)", "(b,w,5):(b,k,5)",
        "(a,i,6):(a,x,6)", "(a,i,6):(a,z,8)", "(a,j,7):(a,x,6)", "(a,j,7):(a,z,8)", "(a,k,8):(a,x,6)",
        "(a,k,8):(a,z,8)"])


def test_self_join() -> None:
    """CoGroupJoinITCase::testSelfJoin: a stream joined with itself (PyFlink's key selectors: lambdas)."""
    (one,) = streams(1, JOIN_1)
    result = one.join(one).where(lambda t: t[0]).equal_to(lambda t: t[0]).window(TUMBLING_3MS) \
        .apply(Concatenate()).execute_and_collect()
    windows = [["(a,x,0)", "(a,y,1)", "(a,z,2)"], ["(b,u,3)", "(b,w,5)"], ["(a,i,6)", "(a,j,7)", "(a,k,8)"]]
    assert sorted(result) == sorted(f"{x}:{y}" for w in windows for x in w for y in w)


@PARALLELISM
def test_tumbling_window_join(p: int) -> None:
    """joining.md, "Tumbling Window Join" (2 ms windows): [6, 8) has no green record, so no pair."""
    orange, green = streams(p, ORANGE, GREEN)
    result = orange.join(green).where(lambda o: o[0]).equal_to(lambda g: g[0]) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(2))) \
        .apply(lambda o, g: f"{o[1]},{g[1]}").execute_and_collect()
    assert sorted(result) == sorted(["0,0", "0,1", "1,0", "1,1", "2,3", "3,3", "4,4", "5,4"])


@PARALLELISM
def test_sliding_window_join(p: int) -> None:
    """joining.md, "Sliding Window Join" (2 ms windows every 1 ms): a pair in two windows is emitted twice."""
    orange, green = streams(p, ORANGE, GREEN)
    result = orange.join(green).where(lambda o: o[0]).equal_to(lambda g: g[0]) \
        .window(SlidingEventTimeWindows.of(Time.milliseconds(2), Time.milliseconds(1))) \
        .apply(lambda o, g: f"{o[1]},{g[1]}").execute_and_collect()
    assert sorted(result) == sorted([
        "0,0",                        # [-1, 1)
        "0,0", "0,1", "1,0", "1,1",   # [0, 2)
        "1,1", "2,1",                 # [1, 3)
        "2,3", "3,3",                 # [2, 4)
        "3,3", "3,4", "4,3", "4,4",   # [3, 5)
        "4,4", "5,4"])                # [4, 6)


def test_session_window_join() -> None:
    """Session windows (merging) over both streams' records of a key: gaps of 3 ms part
    [1, 5) (orange 1, 2; green 2) from [10, 15) (orange 10, 11; green 12)."""
    orange, green = streams(2, [(0, 1), (0, 2), (0, 10), (0, 11)], [(0, 2), (0, 12)])
    result = orange.join(green).where(lambda o: o[0]).equal_to(lambda g: g[0]) \
        .window(EventTimeSessionWindows.with_gap(Time.milliseconds(3))) \
        .apply(lambda o, g: f"{o[1]},{g[1]}").execute_and_collect()
    assert sorted(result) == sorted(["1,2", "2,2", "10,12", "11,12"])


def test_a_trigger_fires_the_joined_window() -> None:
    """``.trigger()`` on the join: a global window fires once key "a" has its 10 records (6 + 4);
    key "b" (4 records) never fires."""
    one, two = streams(2, JOIN_1, JOIN_2)
    result = one.join(two).where(FirstField()).equal_to(FirstField()).window(GlobalWindows.create()) \
        .trigger(CountTrigger.of(10)).apply(lambda x, y: (x[1], y[1])).execute_and_collect()
    assert sorted(result) == sorted((x[1], y[1]) for x in JOIN_1 for y in JOIN_2 if x[0] == y[0] == "a")


def test_a_rich_join_function_is_opened_in_its_subtask() -> None:
    one, two = streams(2, JOIN_1[:1], JOIN_2[:1])
    result = one.join(two).where(FirstField()).equal_to(FirstField()).window(TUMBLING_3MS) \
        .apply(Opened, name="opened join").execute_and_collect()
    assert result == [("a", 2)]


def test_keys_of_two_types_fail_the_job_naming_the_operator() -> None:
    """Flink requires one key type for both inputs ("The keys for the two inputs are not equal")."""
    one, two = streams(1, JOIN_1, JOIN_2)
    joined = one.join(two).where(lambda t: t[0]).equal_to(lambda t: len(t[0])).window(TUMBLING_3MS) \
        .apply(Concatenate(), name="typed join")
    with pytest.raises(ConfigError, match=r"(?s)operator 'typed join'.*not of one type: where\(\) gives str, "
                                       r"equal_to\(\) gives int"):
        joined.execute_and_collect()


def _expected_summaries(n: int) -> list[Any]:
    """What an uninterrupted run of :func:`summary_job` gives: one summary per key and window."""
    windows: dict[tuple[int, int], list[int]] = defaultdict(list)
    for x in range(n):
        windows[(x % 5, x // 500)].append(x)
    return sorted([k, min(xs), len(xs), len([x for x in xs if x % 3 == 0]), sum(x for x in xs if x % 3 == 0)]
                  for (k, _), xs in windows.items())


def summary_job(env: Environment, out: Path, source: Any) -> None:
    """Numbers co-grouped with their multiples of 3 by ``x % 5`` in tumbling 500 ms windows,
    into an exactly-once sink."""
    stamps = WatermarkStrategy.for_bounded_out_of_orderness(Time.milliseconds(10)) \
        .with_timestamp_assigner(lambda x, ts: x)
    numbers = env.from_source(source, name="numbers").assign_timestamps_and_watermarks(stamps)
    threes = numbers.filter(lambda x: x % 3 == 0, name="threes")
    numbers.co_group(threes).where(lambda x: x % 5).equal_to(lambda x: x % 5) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(500))) \
        .apply(Summary(), name="summaries").uid("summaries").sink_to(CommitLog(str(out)), name="log")


@pytest.mark.slow
def test_a_co_group_killed_mid_window_emits_every_window_once_as_an_uninterrupted_run(tmp_path: Path) -> None:
    """The co-group's window contents (both inputs') are in the checkpoints: after a SIGKILL of
    a TaskExecutor mid-window the job restores them, and its exactly-once sink shows each
    window's summary once, equal to an uninterrupted run's."""
    n = 6000
    out = tmp_path / "out"
    out.mkdir()
    env = Environment(_conf(tmp_path, **{"restart-strategy": "fixed-delay"}))
    summary_job(env, out, Paced(n, chunk=20, delay=0.01))
    client = env.execute_async("co_group")
    _wait_until(lambda: _completed(client) >= 3, "three checkpoints")
    _kill_a_taskexecutor(client)
    result = client.wait(120)
    assert result.attempts == 2
    assert sorted(published(out)) == _expected_summaries(n)
