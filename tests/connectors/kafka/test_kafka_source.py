"""KafkaSource against the embedded broker: splits, starting offsets, bounded reads,
checkpoint snapshots, offset commits and errors."""

from __future__ import annotations

import pickle
import threading
import time
from typing import Any
from collections.abc import Callable

import pytest

from accelflow._errors import ConfigError
from accelflow.connectors.kafka import (
    EmbeddedKafkaBroker,
    KafkaConnectorError,
    KafkaRecord,
    KafkaSource,
    KafkaSplit,
    PartitionPosition,
)
from kafka_helpers import ck, context, produce, read_all


def _values(n: int, prefix: str = "v") -> list[bytes]:
    return [f"{prefix}{i}".encode() for i in range(n)]


def test_splits_cover_every_partition_once_round_robin(broker: EmbeddedKafkaBroker, topic: str) -> None:
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True)
    splits = source.create_splits(3)
    assert len(splits) == 3
    assert [[p.partition for p in s.positions] for s in splits] == [[0, 3], [1], [2]]
    many = source.create_splits(6)
    assert len(many) == 6 and many[4] == KafkaSplit(()) and many[5] == KafkaSplit(())


def test_bounded_read_returns_every_record_once(broker: EmbeddedKafkaBroker, topic: str) -> None:
    produce(broker.bootstrap_servers, topic, _values(100))
    source = KafkaSource(broker.bootstrap_servers, [topic], group_id="g", bounded=True)
    got = [r for s in source.create_splits(3) for r in read_all(source, s)]
    assert sorted(got) == sorted(_values(100))


def test_latest_skips_what_was_there_and_committed_falls_back_to_earliest(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    produce(broker.bootstrap_servers, topic, _values(8), partition=0)
    latest = KafkaSource(broker.bootstrap_servers, topic, group_id="g", starting_offsets="latest", bounded=True)
    assert [read_all(latest, s) for s in latest.create_splits(1)] == [[]]
    committed = KafkaSource(broker.bootstrap_servers, topic, group_id="fresh-group",
                            starting_offsets="committed", bounded=True)
    assert [read_all(committed, s) for s in committed.create_splits(1)] == [_values(8)]


def test_committed_starts_at_the_groups_offsets(broker: EmbeddedKafkaBroker, topic: str) -> None:
    produce(broker.bootstrap_servers, topic, _values(8), partition=1)
    consumer = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": "half"})
    consumer.commit(offsets=[ck.TopicPartition(topic, 1, 5)], asynchronous=False)
    consumer.close()
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="half", starting_offsets="committed",
                         bounded=True)
    assert read_all(source, source.create_splits(1)[0]) == _values(8)[5:]


def test_bounded_stops_at_the_watermark_of_job_start_while_writes_go_on(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    produce(broker.bootstrap_servers, topic, _values(20), partition=2)
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True)
    (split,) = source.create_splits(1)
    stop = threading.Event()

    def keep_writing() -> None:
        producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers})
        while not stop.is_set():
            producer.produce(topic, b"late", partition=2)
            producer.poll(0.01)
        producer.flush(10)

    writer = threading.Thread(target=keep_writing)
    writer.start()
    try:
        assert read_all(source, split) == _values(20)
    finally:
        stop.set()
        writer.join()


def test_bounded_read_ends_after_transaction_markers(broker: EmbeddedKafkaBroker, topic: str) -> None:
    producer = ck.Producer({"bootstrap.servers": broker.bootstrap_servers, "transactional.id": f"{topic}-tx"})
    producer.init_transactions(10)
    producer.begin_transaction()
    for v in _values(5):
        producer.produce(topic, v, partition=3)
    producer.commit_transaction(10)  # a commit marker follows the records
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True)
    (split,) = source.create_splits(1)
    assert {p.partition: p.stop_offset for p in split.positions}[3] == 6
    assert read_all(source, split) == _values(5)


def _half_read(broker: EmbeddedKafkaBroker, topic: str) -> tuple[KafkaSource, Any, Any, list[bytes]]:
    """3000 records produced to partition 0, and a source's split read to at least half of
    them: ``(source, split, its open chunk iterator, the records read)``."""
    produce(broker.bootstrap_servers, topic, _values(3000), partition=0)
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True)
    (split,) = source.create_splits(1)
    chunks = source.read_chunks(split, context())
    first: list[bytes] = []
    while len(first) < 1500:
        first += next(chunks)
    return source, split, chunks, first


def test_snapshot_resumes_exactly_after_the_last_chunk(broker: EmbeddedKafkaBroker, topic: str) -> None:
    source, split, chunks, first = _half_read(broker, topic)
    snapshot = source.snapshot_split(split, 12345, checkpoint_id=1)  # records_read is not used
    chunks.close()
    assert isinstance(snapshot, KafkaSplit)
    restored = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True)
    assert first + read_all(restored, snapshot) == _values(3000)


def test_a_split_read_again_by_the_same_source_is_snapshotted_where_the_new_read_is(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    """A source subtask rolled back in place reads its restored split again with the same
    ``KafkaSource`` (``docs/failover.md``): a checkpoint taken before the new read's first chunk
    (e.g. while restored records not yet pushed go out) keeps the split where it starts, not
    where the closed read of the aborted epoch had got to (records lost at a later restore)."""
    source, split, chunks, _ = _half_read(broker, topic)
    chunks.close()  # the rollback ends the aborted epoch's read
    assert source.snapshot_split(split, 0, checkpoint_id=2) == split
    assert read_all(source, split) == _values(3000)


def test_notify_checkpoint_complete_commits_the_snapshotted_offsets(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    produce(broker.bootstrap_servers, topic, _values(10), partition=1)
    source = KafkaSource(broker.bootstrap_servers, topic, group_id=f"{topic}-group")
    (split,) = source.create_splits(1)
    chunks = source.read_chunks(split, context())
    got: list[bytes] = []
    while len(got) < 10:
        got += next(chunks)
    source.snapshot_split(split, len(got), checkpoint_id=7)
    checker = ck.Consumer({"bootstrap.servers": broker.bootstrap_servers, "group.id": f"{topic}-group"})
    tp = ck.TopicPartition(topic, 1)
    assert checker.committed([tp], timeout=10)[0].offset < 0  # nothing until the checkpoint completes
    source.notify_checkpoint_complete(7)  # asynchronous: the commit lands a little later
    assert _eventually(lambda: checker.committed([tp], timeout=10)[0].offset) == 10
    assert source.lag()[(topic, 1)] == 0
    assert source.metrics()[f"kafka_lag:{topic}:1"] == 0.0
    chunks.close()
    checker.close()
    source.close()


def test_unbounded_yields_empty_chunks_and_stops_when_cancelled(broker: EmbeddedKafkaBroker, topic: str) -> None:
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g")
    (split,) = source.create_splits(1)
    cancelled = threading.Event()
    chunks = source.read_chunks(split, context(cancelled=cancelled))
    assert next(chunks) == [] and next(chunks) == []
    produce(broker.bootstrap_servers, topic, [b"x"], partition=0)
    got: list[bytes] = []
    while not got:
        got += next(chunks)
    assert got == [b"x"]
    cancelled.set()
    assert list(chunks) == []


def _eventually(read: Callable[[], int], want: int = 10, tries: int = 200) -> int:
    """``read()`` once it returns ``want`` (or its last value after ``tries`` reads 50 ms apart)."""
    for _ in range(tries):
        got = read()
        if got == want:
            return got
        time.sleep(0.05)
    return got


def _produce_keyed(bootstrap: str, topic: str, records: list[tuple[bytes | None, bytes | None]]) -> None:
    producer = ck.Producer({"bootstrap.servers": bootstrap})
    for key, value in records:
        producer.produce(topic, value, key, partition=2, headers=[("source", b"test")])
    assert producer.flush(10) == 0


def test_value_and_key_deserializers_get_bytes_as_in_kafka_python(broker: EmbeddedKafkaBroker, topic: str) -> None:
    _produce_keyed(broker.bootstrap_servers, topic, [(b"a", b"1"), (b"b", b"2"), (None, None)])
    values = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True,
                         value_deserializer=lambda v: None if v is None else int(v))
    assert read_all(values, values.create_splits(1)[0]) == [1, 2, None]
    pairs = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True,
                        key_deserializer=lambda k: k and k.decode(), value_deserializer=lambda v: v and int(v))
    assert read_all(pairs, pairs.create_splits(1)[0]) == [("a", 1), ("b", 2), (None, None)]
    keys_only = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True, key_deserializer=lambda k: k)
    assert read_all(keys_only, keys_only.create_splits(1)[0])[0] == (b"a", b"1")


def test_deserializer_gets_the_whole_record_and_its_error_names_the_record(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    _produce_keyed(broker.bootstrap_servers, topic, [(b"k", b"1"), (None, b"2"), (None, b"oops")])
    seen: list[KafkaRecord] = []

    def parse(record: KafkaRecord) -> int:
        seen.append(record)
        return int(record.value or b"")

    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True, deserializer=parse)
    with pytest.raises(KafkaConnectorError, match=rf"deserializer failed .*{topic}\[2\] offset 2.*ValueError") as info:
        read_all(source, source.create_splits(1)[0])
    assert (info.value.topic, info.value.partition, info.value.offset) == (topic, 2, 2)
    assert isinstance(info.value.__cause__, ValueError)
    assert [(r.key, r.partition, r.offset, r.value) for r in seen] == [
        (b"k", 2, 0, b"1"), (None, 2, 1, b"2"), (None, 2, 2, b"oops")]
    assert seen[0].timestamp is not None and seen[0].timestamp > 0
    assert seen[0].headers == (("source", b"test"),)


def test_a_value_deserializer_written_for_records_works_with_a_deprecation_warning(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    _produce_keyed(broker.bootstrap_servers, topic, [(b"k", b"1"), (None, b"2")])

    def old_style(record):  # type: ignore[no-untyped-def]  # as accelflow 0.1.0 called it
        return record.offset, int(record.value)

    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True, value_deserializer=old_style)
    with pytest.deprecated_call(match=r"old_style reads \.offset .*expects a KafkaRecord.*deserializer=old_style") as caught:
        assert read_all(source, source.create_splits(1)[0]) == [(0, 1), (1, 2)]
    assert [w.filename for w in caught] == [__file__]  # points at the function


def test_a_value_deserializer_failing_on_bytes_is_not_taken_for_an_old_one(
    broker: EmbeddedKafkaBroker, topic: str
) -> None:
    _produce_keyed(broker.bootstrap_servers, topic, [(None, b"1")])
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True,
                         value_deserializer=lambda v: v.decode().nope)
    with pytest.raises(KafkaConnectorError, match=r"value_deserializer failed .*AttributeError.*'nope'"):
        read_all(source, source.create_splits(1)[0])


@pytest.mark.timeout(60)  # a hang fails here instead of after the suite's 300 s
def test_unreachable_broker_is_a_clear_error_within_the_timeout() -> None:
    source = KafkaSource("127.0.0.1:1", "t", group_id="g", properties={"accelflow.timeout.ms": 1500})
    with pytest.raises(KafkaConnectorError, match=r"127\.0\.0\.1:1.*accelflow\.timeout\.ms") as info:
        source.create_splits(2)
    assert info.value.bootstrap_servers == "127.0.0.1:1"


@pytest.mark.timeout(60)
def test_a_source_that_reaches_no_broker_fails_naming_broker_and_partitions() -> None:
    source = KafkaSource("127.0.0.1:1", "t", group_id="g", properties={"accelflow.unreachable.timeout.ms": 500})
    chunks = source.read_chunks(KafkaSplit((PartitionPosition("t", 0, 0), PartitionPosition("t", 1, 0))), context())
    with pytest.raises(KafkaConnectorError, match=r"no Kafka broker of 127\.0\.0\.1:1 reachable for \d+ s while "
                       r"reading t\[0\], t\[1\] \(last error: .*Connection refused.*accelflow\.unreachable") as info:
        for _ in range(600):  # 100 ms each: a minute at most
            next(chunks)
    assert (info.value.bootstrap_servers, info.value.topic) == ("127.0.0.1:1", "t")


def test_unreachable_timeout_0_waits_for_the_brokers_for_ever() -> None:
    source = KafkaSource("127.0.0.1:1", "t", group_id="g", properties={"accelflow.unreachable.timeout.ms": 0})
    chunks = source.read_chunks(KafkaSplit((PartitionPosition("t", 0, 0),)), context())
    assert [next(chunks) for _ in range(20)] == [[]] * 20  # 2 s: four times the bound of the test above
    chunks.close()


def test_missing_topic_is_named(broker: EmbeddedKafkaBroker) -> None:
    source = KafkaSource(broker.bootstrap_servers, "no-such-topic", group_id="g")
    with pytest.raises(KafkaConnectorError, match="'no-such-topic' does not exist"):
        source.create_splits(1)


@pytest.mark.parametrize("kwargs, key", [
    ({"starting_offsets": "newest"}, "starting_offsets"),
    ({"topics": []}, "topics"),
    ({"group_id": ""}, "group_id"),
    ({"properties": {"enable.auto.commit": True}}, "properties['enable.auto.commit']"),
    ({"properties": {"accelflow.timeout.ms": "soon"}}, "properties['accelflow.timeout.ms']"),
    ({"properties": {"accelflow.unreachable.timeout.ms": -1}}, "properties['accelflow.unreachable.timeout.ms']"),
    ({"properties": {"accelflow.timout.ms": 5}}, "properties['accelflow.timout.ms']"),
    ({"deserializer": repr, "value_deserializer": repr}, "deserializer"),
    ({"key_deserializer": 42}, "key_deserializer"),
])
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], key: str) -> None:
    args: dict[str, object] = {"bootstrap_servers": "b:9092", "topics": "t", "group_id": "g", **kwargs}
    with pytest.raises(ConfigError) as info:
        KafkaSource(**args)  # type: ignore[arg-type]
    assert info.value.keys == (key,)


def test_a_pickled_source_carries_its_config_but_no_consumers(broker: EmbeddedKafkaBroker, topic: str) -> None:
    produce(broker.bootstrap_servers, topic, _values(3), partition=0)
    source = KafkaSource(broker.bootstrap_servers, topic, group_id="g", bounded=True)
    (split,) = source.create_splits(1)
    assert read_all(source, split) == _values(3)
    copy = pickle.loads(pickle.dumps(source))
    assert repr(copy) == repr(source) and copy.lag() == {}
    assert copy.snapshot_split(split, 0, checkpoint_id=1) is split  # this copy read nothing yet
    assert read_all(copy, pickle.loads(pickle.dumps(split))) == _values(3)
