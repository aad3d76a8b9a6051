"""KafkaSink against the embedded broker: at-least-once flushes, and exactly-once publishes
each checkpoint's records once, whatever crashes between prepare_commit and commit."""

from __future__ import annotations

import pickle

import pytest

from accelflow._errors import ConfigError
from accelflow.connectors.kafka import EmbeddedKafkaBroker, KafkaCommittable, KafkaConnectorError, KafkaSink
from kafka_helpers import context, read_committed


def _exactly_once(broker: EmbeddedKafkaBroker, topic: str, prefix: str | None = None) -> KafkaSink:
    sink = KafkaSink(broker.bootstrap_servers, topic, delivery_guarantee="exactly-once",
                     transactional_id_prefix=prefix or f"{topic}-job")
    sink.open(context(index=1, parallelism=2))
    return sink


def test_at_least_once_records_are_there_after_prepare_commit(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = KafkaSink(broker.bootstrap_servers, topic, key_serializer=lambda r: bytes(r, "utf-8")[:1] if isinstance(r, str) else r[:1])
    sink.open(context())
    sink.write(["a1", "b2"])
    sink.write([b"c3"])
    assert sink.prepare_commit(1) == []
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"a1", b"b2", b"c3"]
    sink.close()


def test_at_least_once_delivery_failure_raises_at_prepare_commit(broker: EmbeddedKafkaBroker) -> None:
    sink = KafkaSink(broker.bootstrap_servers, "never-created-topic",
                     properties={"message.timeout.ms": 500, "allow.auto.create.topics": False,
                                 "topic.metadata.propagation.max.ms": 100})
    sink.open(context())
    sink.write(["x"])
    with pytest.raises(KafkaConnectorError, match="'never-created-topic'.*failed"):
        sink.prepare_commit(1)
    sink.close()


def test_default_serializer_names_the_record_type(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = KafkaSink(broker.bootstrap_servers, topic)
    sink.open(context())
    with pytest.raises(KafkaConnectorError, match="cannot write a dict.*value_serializer") as info:
        sink.write([{"a": 1}])
    assert isinstance(info.value.__cause__, TypeError)
    sink.close()


def test_exactly_once_records_appear_only_when_committed(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = _exactly_once(broker, topic)
    sink.write(["a", "b"])
    (committable,) = sink.prepare_commit(1)
    assert committable == KafkaCommittable(1, 1, ((None, b"a"), (None, b"b")))
    sink.write(["c"])
    assert read_committed(broker.bootstrap_servers, topic) == []
    sink.commit([committable])
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"a", b"b"]
    sink.close()  # "c" was never prepared: it is dropped
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"a", b"b"]


def test_exactly_once_commit_twice_publishes_once(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = _exactly_once(broker, topic)
    sink.write(["a"])
    first = sink.prepare_commit(1)
    sink.write(["b"])
    second = sink.prepare_commit(2)
    sink.commit(second + first)  # any order: published by checkpoint id
    sink.commit(first + second)
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"a", b"b"]
    sink.close()


def test_crash_after_commit_then_a_new_process_commits_again(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = _exactly_once(broker, topic)
    sink.write(["a", "b"])
    committables = sink.prepare_commit(3)
    sink.commit(committables)
    del sink  # crashed before the runtime learned that checkpoint 3's commit went through
    restarted = _exactly_once(broker, topic)
    restarted.commit(committables)
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"a", b"b"]
    restarted.close()


def test_crash_after_prepare_then_a_new_process_commits(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = _exactly_once(broker, topic)
    sink.write(["a", "b"])
    committables = sink.prepare_commit(4)
    del sink  # crashed before the commit: the committables live on in the checkpoint
    restarted = _exactly_once(broker, topic)
    restarted.commit(committables)
    restarted.commit(committables)
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"a", b"b"]
    restarted.close()


def test_each_subtask_has_its_own_marker(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = _exactly_once(broker, topic)
    mine = KafkaCommittable(5, 0, ((None, b"from-0"),))
    other = KafkaCommittable(5, 1, ((b"k", b"from-1"),))
    sink.commit([mine, other])
    sink.commit([mine, other])
    assert sorted(read_committed(broker.bootstrap_servers, topic)) == [b"from-0", b"from-1"]
    sink.close()


@pytest.mark.parametrize("kwargs, key", [
    ({"delivery_guarantee": "exactly-once"}, "transactional_id_prefix"),
    ({"delivery_guarantee": "twice"}, "delivery_guarantee"),
    ({"topic": " "}, "topic"),
    ({"properties": {"transactional.id": "x"}}, "properties['transactional.id']"),
    ({"properties": {"accelflow.unreachable.timeout.ms": 5}}, "properties['accelflow.unreachable.timeout.ms']"),
])
def test_bad_arguments_are_config_errors(kwargs: dict[str, object], key: str) -> None:
    args: dict[str, object] = {"bootstrap_servers": "b:9092", "topic": "t", **kwargs}
    with pytest.raises(ConfigError) as info:
        KafkaSink(**args)  # type: ignore[arg-type]
    assert info.value.keys == (key,)


def test_a_pickled_sink_carries_no_producer_nor_records(broker: EmbeddedKafkaBroker, topic: str) -> None:
    sink = _exactly_once(broker, topic)
    sink.write(["not prepared"])
    copy = pickle.loads(pickle.dumps(sink))
    assert repr(copy) == repr(sink)
    assert copy.prepare_commit(1) == []
    sink.close()
