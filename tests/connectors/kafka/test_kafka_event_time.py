"""Kafka record timestamps as the default event time (issue 30, item 1), as real jobs on the
local cluster against the embedded broker: records produced with explicit, out-of-order Kafka
timestamps whose values hold no time go through ``env.from_source(KafkaSource(...),
WatermarkStrategy..., "kafka")`` into tumbling event-time windows; the expected windows are
computed here from the produced timestamps. As Flink's ``KafkaSource``, a strategy without a
timestamp assigner keeps the record timestamp, and ``with_timestamp_assigner`` overrides it
(getting the record timestamp as its second argument).

Watermarks are generated per partition (Flink's per-split watermarks): most jobs here read
each partition in a subtask of its own (the downstream minimum over the subtasks keeps a
lagging partition's records on time); the last one reads both in one subtask, whose
per-partition watermarks do the same.
"""

from __future__ import annotations

import ast
import itertools
import os
import random
import signal
import time
from collections import Counter
from collections.abc import Iterator
from contextlib import contextmanager
from datetime import timedelta
from typing import Any

import pytest

from accelflow import (
    DataStream,
    Environment,
    JobCancelledError,
    OutputTag,
    ProcessFunction,
    ProcessWindowFunction,
    Time,
    TumblingEventTimeWindows,
    WatermarkStrategy,
)
from accelflow.connectors.kafka import EmbeddedKafkaBroker, KafkaSink, KafkaSource
from kafka_helpers import ck

#: 2023-11-14T22:13:20Z, a multiple of the window size
BASE_MS = 1_700_000_000_000
WINDOW_MS = 5_000
KEYS = ("a", "b", "c")
BOUNDED_1S = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(seconds=1))
_topics = itertools.count()

#: (partition, value, Kafka timestamp in ms) as produced
Produced = list[tuple[int, str, int]]


def timestamps(rng: random.Random, n: int, start_ms: int) -> list[int]:
    """``n`` timestamps ~400 ms apart from ``start_ms``, out of order by up to 899 ms (less than
    the 1 s bound of the strategies below, so no record is late in its own partition)."""
    out = [start_ms + i * 400 + rng.randrange(900) for i in range(n)]
    assert out != sorted(out)  # really out of order
    return out


def produce_stamped(broker: EmbeddedKafkaBroker, topic: str, records: Produced) -> None:
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
    for partition, value, ts in records:
        producer.produce(topic, value.encode(), partition=partition, timestamp=ts)
    assert producer.flush(10) == 0


def new_topic(broker: EmbeddedKafkaBroker, records: Produced) -> str:
    name = f"event-time-{next(_topics)}"
    broker.create_topic(name, partitions=2)
    produce_stamped(broker, name, records)
    return name


def keyed_records(seed: int, n: int, starts: tuple[int, int]) -> Produced:
    """``n`` records per partition, keys only in the values, partition ``p`` from ``starts[p]``."""
    rng = random.Random(seed)
    return [(p, rng.choice(KEYS), ts) for p, start in enumerate(starts) for ts in timestamps(rng, n, start)]


def expected_windows(pairs: list[tuple[str, int]]) -> list[tuple[str, int, int, int]]:
    """``(key, window start, window end, count)`` of 5 s tumbling windows over ``(key, ts)``."""
    counts = Counter((key, ts - ts % WINDOW_MS) for key, ts in pairs)
    return sorted((key, start, start + WINDOW_MS, n) for (key, start), n in counts.items())


class CountPerWindow(ProcessWindowFunction):
    def process(self, key: Any, context: Any, elements: Any) -> Any:
        window = context.window()
        return [(key, window.start, window.end, len(list(elements)))]


class WithTimestamp(ProcessFunction):
    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value, ctx.timestamp()


def source(broker: EmbeddedKafkaBroker, topic: str, bounded: bool = True) -> KafkaSource:
    return KafkaSource(broker.bootstrap_servers, topic, group_id="event-time", bounded=bounded,
                       value_deserializer=bytes.decode)


def window_job(env: Environment, kafka: KafkaSource, strategy: WatermarkStrategy,
               key: Any = lambda v: v) -> DataStream:
    """Kafka (a subtask per partition) -> key_by -> 5 s tumbling windows counting records; late
    records come out too, as ``("late", value)``."""
    late = OutputTag("late")
    windows = env.from_source(kafka, strategy, "kafka").key_by(key) \
        .window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS))) \
        .side_output_late_data(late).process(CountPerWindow())
    return windows.union(windows.get_side_output(late).map(lambda v: ("late", v)))


def windowed(broker: EmbeddedKafkaBroker, topic: str, strategy: WatermarkStrategy,
             key: Any = lambda v: v) -> list[Any]:
    """The bounded :func:`window_job`'s records, sorted."""
    env = Environment({"parallelism.default": 2})
    return sorted(window_job(env, source(broker, topic), strategy, key).execute_and_collect(), key=repr)


@pytest.mark.parametrize("strategy", [
    BOUNDED_1S, WatermarkStrategy.no_watermarks()],
    ids=["bounded", "no-watermarks"])
def test_records_carry_their_kafka_timestamp_without_an_assigner(
    broker: EmbeddedKafkaBroker, strategy: WatermarkStrategy
) -> None:
    """``ctx.timestamp()`` of each record is the Kafka timestamp it was produced with."""
    records = keyed_records(seed=1, n=20, starts=(BASE_MS, BASE_MS))
    topic = new_topic(broker, records)
    env = Environment({"parallelism.default": 2})
    stream = env.from_source(source(broker, topic), strategy, "kafka").process(WithTimestamp())
    assert sorted(stream.execute_and_collect()) == sorted((value, ts) for _, value, ts in records)


def test_windows_follow_the_kafka_timestamps(broker: EmbeddedKafkaBroker) -> None:
    """The issue's job, bounded: every window result as computed from the produced timestamps
    (out of order within each partition, by less than the 1 s bound), none late."""
    records = keyed_records(seed=2, n=60, starts=(BASE_MS, BASE_MS + 1_300))
    topic = new_topic(broker, records)
    got = windowed(broker, topic, BOUNDED_1S)
    expected = expected_windows([(value, ts) for _, value, ts in records])
    assert len(expected) > 3 * len(KEYS)  # several windows per key
    assert got == expected


def test_a_timestamp_assigner_overrides_the_kafka_timestamp(broker: EmbeddedKafkaBroker) -> None:
    """The assigner's time is in the value, 1 h after the Kafka timestamp; the second record
    of each pair shifts by the Kafka timestamp it gets as ``record_timestamp``."""
    rng = random.Random(3)
    records = [(p, f"{rng.choice(KEYS)}@{ts + 3_600_000}", ts)
               for p in (0, 1) for ts in timestamps(rng, 30, BASE_MS)]
    topic = new_topic(broker, records)

    def from_value(value: str, record_timestamp: int) -> int:
        time_ms = int(value.split("@")[1])
        assert time_ms - record_timestamp == 3_600_000  # the Kafka timestamp comes in too
        return time_ms

    strategy = BOUNDED_1S.with_timestamp_assigner(from_value)
    got = windowed(broker, topic, strategy, key=lambda v: v.split("@")[0])
    expected = expected_windows([(value.split("@")[0], int(value.split("@")[1])) for _, value, _ in records])
    assert min(start for _, start, _, _ in expected) >= BASE_MS + 3_600_000
    assert got == expected


def test_a_partition_far_behind_the_other_loses_no_record_as_late(broker: EmbeddedKafkaBroker) -> None:
    """Partition 0 runs 30 s ahead of partition 1 (Flink: per-split watermarks keep the slow
    partition's records on time); here each partition has its own subtask and generator, and
    the window's input takes the minimum of their watermarks."""
    records = keyed_records(seed=4, n=60, starts=(BASE_MS + 30_000, BASE_MS))
    topic = new_topic(broker, records)
    got = windowed(broker, topic, BOUNDED_1S)
    assert [r for r in got if r[0] == "late"] == []
    assert got == expected_windows([(value, ts) for _, value, ts in records])


def read_until(consumer: Any, n: int, counted: Any = lambda r: True, timeout_s: float = 60) -> list[Any]:
    """The next records of ``consumer`` (window results written as their repr) until ``n``
    of them are ``counted``."""
    got: list[Any] = []
    deadline = time.monotonic() + timeout_s
    while sum(map(counted, got)) < n and time.monotonic() < deadline:
        msg = consumer.poll(0.1)
        if msg is not None and msg.error() is None:
            got.append(ast.literal_eval(msg.value().decode()))
    assert sum(map(counted, got)) == n, f"{len(got)} results, not {n} counted, within {timeout_s} s: {got}"
    return sorted(got, key=repr)


@contextmanager
def streaming(broker: EmbeddedKafkaBroker, topic: str, strategy: WatermarkStrategy,
              parallelism: int = 2) -> Iterator[Any]:
    """The unbounded :func:`window_job` running, its results written to a topic: yields a
    consumer of them (cancels the job at the end)."""
    out = new_topic(broker, [])
    env = Environment({"parallelism.default": parallelism})
    window_job(env, source(broker, topic, bounded=False), strategy).sink_to(
        KafkaSink(broker.bootstrap_servers, out, delivery_guarantee="none", value_serializer=lambda r: repr(r).encode()))
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "results"})
    consumer.assign([ck.TopicPartition(out, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
    client = env.execute_async("kafka event time")
    try:
        yield consumer
    finally:
        consumer.close()
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)


def windows_then_ahead(broker: EmbeddedKafkaBroker, seed: int) -> tuple[str, Produced, Produced]:
    """A topic with 30 records per partition, and records 21 s after all of them in both
    partitions (to produce once the job runs: they move the watermark past every window of
    the first ones)."""
    first = keyed_records(seed=seed, n=30, starts=(BASE_MS, BASE_MS))
    ahead = max(ts for _, _, ts in first) + 21_000
    return new_topic(broker, first), first, [(0, "a", ahead), (1, "b", ahead)]


def test_watermarks_from_kafka_timestamps_fire_windows_while_the_job_runs(broker: EmbeddedKafkaBroker) -> None:
    """Unbounded: records 21 s later in both partitions move the watermark past the first
    windows, which fire while the job goes on; a record produced afterwards into the first
    window is late by its Kafka timestamp and reaches the late-data output."""
    topic, first, ahead = windows_then_ahead(broker, seed=5)
    expected = expected_windows([(value, ts) for _, value, ts in first])
    assert ("c", BASE_MS) in [(key, start) for key, start, _, _ in expected]  # then c@BASE_MS is late
    with streaming(broker, topic, BOUNDED_1S) as results:
        produce_stamped(broker, topic, ahead)
        assert read_until(results, len(expected)) == expected
        produce_stamped(broker, topic, [(1, "c", BASE_MS + 10)])
        assert read_until(results, 1) == [("late", "c")]


def test_a_subtask_without_partitions_holds_windows_back_only_until_idle(broker: EmbeddedKafkaBroker) -> None:
    """As Flink's Kafka source (its docs, "Idleness"): with more source subtasks than
    partitions, the one without a partition sends no watermark, so the windows wait for it
    unless the strategy has an idle timeout, after which it no longer counts. (The timeout is
    long enough for the other subtasks to read their records first: once every input is
    idle, the largest watermark among them would pass.)"""
    topic, first, ahead = windows_then_ahead(broker, seed=6)
    expected = expected_windows([(value, ts) for _, value, ts in first])
    with streaming(broker, topic, BOUNDED_1S.with_idleness(timedelta(seconds=3)), parallelism=3) as results:
        produce_stamped(broker, topic, ahead)
        assert read_until(results, len(expected)) == expected


def per_partition_job(broker: EmbeddedKafkaBroker, topic: str, out: str, conf: dict[str, Any]) -> Environment:
    """Unbounded Kafka read by ONE source subtask (1 s out-of-orderness) -> 5 s tumbling
    windows with late data as ``("late", value)``, and every record read as ``("seen",
    value)``, written to topic ``out``."""
    env = Environment({"parallelism.default": 2, "pipeline.auto-watermark-interval": "50 ms", **conf})
    late = OutputTag("late")
    stream = env.from_source(source(broker, topic, bounded=False), BOUNDED_1S, "kafka", parallelism=1)
    windows = stream.key_by(lambda v: v).window(TumblingEventTimeWindows.of(Time.milliseconds(WINDOW_MS))) \
        .side_output_late_data(late).process(CountPerWindow())
    windows.union(windows.get_side_output(late).map(lambda v: ("late", v)), stream.map(lambda v: ("seen", v))) \
        .sink_to(KafkaSink(broker.bootstrap_servers, out, delivery_guarantee="none",
                           value_serializer=lambda r: repr(r).encode()))
    return env


def results_of(broker: EmbeddedKafkaBroker, out: str) -> Any:
    """A consumer of topic ``out`` from its start."""
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "results"})
    consumer.assign([ck.TopicPartition(out, p, ck.OFFSET_BEGINNING) for p in (0, 1)])
    return consumer


def test_one_subtask_keeps_a_lagging_partition_on_time_with_per_partition_watermarks(
    broker: EmbeddedKafkaBroker,
) -> None:
    lagging_partition_stays_on_time(broker, {})


def lagging_partition_stays_on_time(broker: EmbeddedKafkaBroker, conf: dict[str, Any]) -> None:
    """ONE source subtask reads both partitions; partition 0 runs 30 s ahead of partition 1
    (1 s out-of-orderness). As Flink's Kafka source, the watermark is made per partition and
    the subtask sends the minimum, so no record of the lagging partition is late.

    Partition 0's records are produced first, and the job reads them (each one comes out
    as ``("seen", value)``) and has its watermark tick before partition 1's are produced: one
    watermark over both partitions would be past all of partition 1's windows by then. Then
    records 21 s after everything in both partitions fire the windows of the first ones."""
    rng = random.Random(7)
    ahead_first = [(0, rng.choice(KEYS), ts) for ts in timestamps(rng, 30, BASE_MS + 30_000)]
    behind = [(1, rng.choice(KEYS), ts) for ts in timestamps(rng, 30, BASE_MS)]
    first = ahead_first + behind
    ahead = max(ts for _, _, ts in first) + 21_000
    last = [(0, "a", ahead), (1, "b", ahead)]
    expected = expected_windows([(value, ts) for _, value, ts in first])
    topic, out = new_topic(broker, []), new_topic(broker, [])
    env = per_partition_job(broker, topic, out, conf)
    consumer = results_of(broker, out)
    client = env.execute_async("per-partition watermarks")
    try:
        produce_stamped(broker, topic, ahead_first)
        got = read_until(consumer, len(ahead_first), lambda r: r[0] == "seen")
        time.sleep(1)  # several watermark ticks: partition 0's watermark is made (not a timing assertion)
        produce_stamped(broker, topic, behind + last)
        got += read_until(consumer, len(behind) + len(last) + len(expected))
    finally:
        consumer.close()
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)
    assert [r for r in got if r[0] == "late"] == []
    assert sorted((r for r in got if r[0] != "seen"), key=repr) == expected
    assert sorted(r for r in got if r[0] == "seen") == sorted(("seen", v) for _, v, _ in first + last)


def test_a_restored_subtask_keeps_the_lagging_partition_on_time(broker: EmbeddedKafkaBroker, tmp_path: Any) -> None:
    """Per-partition watermarks are not checkpointed (Flink regenerates them): a TaskExecutor
    is SIGKILLed once checkpoints hold both partitions' records (partition 0 30 s ahead), the
    job restarts from its checkpoint with nothing new to read for a while, and must not send
    partition 0's watermark meanwhile: partition 1's records produced after the restore are
    on time, and the windows are those of an uninterrupted run. (No window fires before the
    kill: partition 1's first records stay inside its first window.)"""
    rng = random.Random(8)
    ahead_first = [(0, rng.choice(KEYS), ts) for ts in timestamps(rng, 30, BASE_MS + 30_000)]
    behind = [(1, rng.choice(KEYS), ts) for ts in timestamps(rng, 30, BASE_MS)]
    before = ahead_first + [r for r in behind if r[2] < BASE_MS + 3_900]
    after = [r for r in behind if r[2] >= BASE_MS + 3_900]
    ahead = max(ts for _, _, ts in before + after) + 21_000
    last = [(0, "a", ahead), (1, "b", ahead)]
    expected = expected_windows([(value, ts) for _, value, ts in before + after])
    topic, out = new_topic(broker, []), new_topic(broker, [])
    env = per_partition_job(broker, topic, out, {
        "local.number-taskmanager": 2, "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.dir": str(tmp_path / "checkpoints"), "restart-strategy": "fixed-delay",
        "restart-strategy.fixed-delay.delay": "0 s"})
    consumer = results_of(broker, out)
    client = env.execute_async("per-partition watermarks, restored")
    try:
        produce_stamped(broker, topic, before)
        seen = read_until(consumer, len(before), lambda r: r[0] == "seen")
        assert [r for r in seen if r[0] != "seen"] == []  # no window fired before the kill
        job = next(iter(client.jobmanager.jobs.values()))
        done = job.checkpoints.completed
        deadline = time.monotonic() + 60
        while job.checkpoints.completed < done + 2:  # checkpoints after every record was read
            assert time.monotonic() < deadline, "no checkpoint completed"
            time.sleep(0.02)
        te = sorted(client.jobmanager.taskexecutors.values(), key=lambda t: t.id)[-1]
        os.kill(te.registration.pid, signal.SIGKILL)
        while job.checkpoints.completed < done + 4:  # restored, and ticking with nothing to read
            assert time.monotonic() < deadline, "no checkpoint completed after the restore"
            time.sleep(0.02)
        assert len(job.failovers) == 1  # it failed and was restored from a checkpoint
        produce_stamped(broker, topic, after + last)
        got = read_until(consumer, len(expected), lambda r: r[0] != "seen")
    finally:
        consumer.close()
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)
    assert sorted((r for r in got if r[0] != "seen"), key=repr) == expected
