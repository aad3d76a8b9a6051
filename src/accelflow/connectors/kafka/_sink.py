"""``KafkaSink``: write records to a Kafka topic, at least once or exactly once.

Exactly once, without resuming another process's transaction (confluent-kafka cannot; Flink's
Java client does it by reflection): the records of a checkpoint travel *in the checkpoint*
(the committable is a write-ahead log) and are produced only by :meth:`KafkaSink.commit`, in
one transaction that also moves a marker: the offset ``checkpoint_id + 1`` committed for the
consumer group ``f"{prefix}-{subtask}"`` on partition 0 of the sink topic. Invariant: the
marker is at least ``n + 1`` exactly when the records of checkpoint ``n`` were published, so a
commit repeated after any crash skips them. ``init_transactions`` when a producer starts
aborts whatever transaction an earlier process left open.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from accelflow._errors import ConfigError
from accelflow.connectors.kafka._common import (
    DEFAULT_TIMEOUT_MS,
    TIMEOUT_KEY,
    KafkaConnectorError,
    check_text,
    consumer_conf,
    kafka,
    split_properties,
)
from accelflow.connectors.kafka._log import with_logger
from accelflow.dataflow import RuntimeContext, Sink, iter_records

DELIVERY_GUARANTEES = ("none", "at-least-once", "exactly-once")
_RESERVED = {"bootstrap.servers": "pass bootstrap_servers",
             "transactional.id": "built from transactional_id_prefix and the subtask index"}

Record = tuple[bytes | None, bytes]


@dataclass(frozen=True, slots=True)
class KafkaCommittable:
    """The records one sink subtask wrote before checkpoint ``checkpoint_id``'s barrier
    (serialized ``(key, value)`` pairs), to be produced in one transaction."""

    checkpoint_id: int
    subtask: int
    records: tuple[Record, ...]

    def __repr__(self) -> str:
        return f"KafkaCommittable(checkpoint_id={self.checkpoint_id}, subtask={self.subtask}, records={len(self.records)})"


def _default_value_serializer(record: Any) -> bytes:
    if isinstance(record, bytes | bytearray | memoryview):
        return bytes(record)
    if isinstance(record, str):
        return record.encode("utf-8")
    raise TypeError(f"cannot write a {type(record).__name__} to Kafka: pass value_serializer= "
                    f"(a function returning bytes); only bytes and str are written as they are")


class KafkaSink(Sink[Any]):
    """Write records to ``topic``; attach with ``stream.sink_to(KafkaSink(...))``.

    Example:
        >>> KafkaSink("broker:9092", "scores", delivery_guarantee="exactly-once",
        ...           transactional_id_prefix="scoring-job")
        KafkaSink('broker:9092', 'scores', delivery_guarantee='exactly-once')

    Args:
        delivery_guarantee: ``none`` (produce, never wait), ``at-least-once`` (each checkpoint
            waits until every record is acknowledged) or ``exactly-once`` (records appear when
            their checkpoint completes, once; readers should use ``read_committed``).
        transactional_id_prefix: required for exactly-once, unique per job writing the topic;
            subtask ``i`` uses ``transactional.id = f"{prefix}-{i}"``.
        value_serializer: record -> bytes; the default takes bytes as they are and str as UTF-8.
        key_serializer: record -> bytes (or None); no key by default.
        properties: librdkafka producer settings, plus ``accelflow.timeout.ms`` (flush,
            transaction steps, offset commits, and how long a full local queue may stay full,
            default 30000).

    Raises:
        ConfigError: an argument is invalid.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topic: str,
        delivery_guarantee: str = "at-least-once",
        transactional_id_prefix: str | None = None,
        value_serializer: Callable[[Any], bytes] | None = None,
        key_serializer: Callable[[Any], bytes | None] | None = None,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        self.bootstrap_servers = check_text("bootstrap_servers", bootstrap_servers)
        self.topic = check_text("topic", topic)
        if delivery_guarantee not in DELIVERY_GUARANTEES:
            raise ConfigError(f"expected one of {', '.join(DELIVERY_GUARANTEES)}, got {delivery_guarantee!r}",
                              key="delivery_guarantee")
        self.delivery_guarantee = delivery_guarantee
        if delivery_guarantee == "exactly-once":
            if transactional_id_prefix is None:
                raise ConfigError("exactly-once needs a transactional_id_prefix unique to this job "
                                  "(e.g. 'scoring-job')", key="transactional_id_prefix")
            check_text("transactional_id_prefix", transactional_id_prefix)
        self.transactional_id_prefix = transactional_id_prefix
        for name, fn in (("value_serializer", value_serializer), ("key_serializer", key_serializer)):
            if fn is not None and not callable(fn):
                raise ConfigError(f"expected a callable, got {fn!r}", key=name)
        self.value_serializer = value_serializer or _default_value_serializer
        self.key_serializer = key_serializer
        self.properties, own = split_properties(properties, reserved=_RESERVED,
                                                own={TIMEOUT_KEY: DEFAULT_TIMEOUT_MS})
        self.timeout_s = own[TIMEOUT_KEY]
        self._reset_runtime()

    def __repr__(self) -> str:
        return f"KafkaSink({self.bootstrap_servers!r}, {self.topic!r}, delivery_guarantee={self.delivery_guarantee!r})"

    def _reset_runtime(self) -> None:
        self._subtask = 0
        self._producer: Any = None
        self._transactional: dict[int, Any] = {}
        self._marker_consumers: dict[int, Any] = {}  # one per subtask, kept: joining a group is slow
        self._in_transaction: Any = None
        self._buffer: list[Record] = []
        self._errors: list[str] = []

    def __getstate__(self) -> dict[str, Any]:
        keep = {"_subtask"}
        return {k: v for k, v in self.__dict__.items() if not k.startswith("_") or k in keep}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    # -- the Sink contract ------------------------------------------------------------------------

    def open(self, ctx: RuntimeContext) -> None:
        self._subtask = ctx.index_of_this_subtask
        if self.delivery_guarantee == "exactly-once":
            self._transactional_producer(self._subtask)  # aborts what an earlier attempt left open
            self._marker(self._subtask)  # finds the group's coordinator now, not at the first commit
        else:
            self._producer = kafka().Producer(self._conf())

    def write(self, chunk: Any) -> None:
        for record in iter_records(chunk):
            entry = self._serialize(record)
            if self.delivery_guarantee == "exactly-once":
                self._buffer.append(entry)
            else:
                self._produce(self._plain(), entry, self._on_delivery)
        if self._producer is not None:
            self._producer.poll(0)

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        """At-least-once: wait for every acknowledgement (a delivery error raises).
        Exactly-once: hand the buffered records over as one :class:`KafkaCommittable`."""
        if self.delivery_guarantee == "exactly-once":
            records, self._buffer = tuple(self._buffer), []
            return [KafkaCommittable(checkpoint_id, self._subtask, records)] if records else []
        if self.delivery_guarantee == "at-least-once":
            self._flush()
        return []

    def commit(self, committables: Sequence[Any]) -> None:
        """Produce each committable not yet published, in its own transaction (idempotent)."""
        for c in sorted(committables, key=lambda c: (c.checkpoint_id, c.subtask)):
            if not isinstance(c, KafkaCommittable):
                raise KafkaConnectorError(f"KafkaSink cannot commit {c!r} (expected a KafkaCommittable)",
                                          bootstrap_servers=self.bootstrap_servers, topic=self.topic)
            if self._marker(c.subtask) <= c.checkpoint_id:
                self._publish(c)

    def close(self) -> None:
        """At-least-once: flush what is pending (best effort). Exactly-once: abort an open
        transaction and drop the records no checkpoint took."""
        self._buffer = []
        producer, self._producer = self._producer, None
        if producer is not None and self.delivery_guarantee == "at-least-once":
            producer.flush(self.timeout_s)
        self._abort_open()
        self._transactional = {}
        consumers, self._marker_consumers = self._marker_consumers, {}
        for consumer in consumers.values():
            consumer.close()

    def _abort_open(self) -> None:
        producer, self._in_transaction = self._in_transaction, None
        if producer is not None:
            try:
                producer.abort_transaction(self.timeout_s)
            except kafka().KafkaException:  # the next init_transactions aborts it anyway
                pass

    # -- helpers ----------------------------------------------------------------------------------

    def _conf(self) -> dict[str, Any]:
        return with_logger({**self.properties, "bootstrap.servers": self.bootstrap_servers})

    def _plain(self) -> Any:
        if self._producer is None:
            self._producer = kafka().Producer(self._conf())
        return self._producer

    def _serialize(self, record: Any) -> Record:
        try:
            value = self.value_serializer(record)
            key = self.key_serializer(record) if self.key_serializer is not None else None
        except Exception as e:
            raise KafkaConnectorError(f"serializing a {type(record).__name__} for topic {self.topic!r} failed: "
                                      f"{type(e).__name__}: {e}",
                                      bootstrap_servers=self.bootstrap_servers, topic=self.topic) from e
        if not isinstance(value, bytes) or not (key is None or isinstance(key, bytes)):
            raise KafkaConnectorError(f"a serializer for topic {self.topic!r} returned "
                                      f"{type(value).__name__}/{type(key).__name__}, expected bytes",
                                      bootstrap_servers=self.bootstrap_servers, topic=self.topic)
        return key, value

    def _produce(self, producer: Any, entry: Record, on_delivery: Any = None) -> None:
        deadline = None
        while True:
            try:
                producer.produce(self.topic, entry[1], entry[0], on_delivery=on_delivery)
                return
            except BufferError:  # the local queue is full: let deliveries drain it
                now = time.monotonic()
                deadline = deadline or now + self.timeout_s
                if now > deadline:
                    raise KafkaConnectorError(
                        f"writing to topic {self.topic!r}: the producer's local queue stayed full for "
                        f"{self.timeout_s:g} s, {self.bootstrap_servers} takes no records. Check that the "
                        f"brokers run (or raise properties[{TIMEOUT_KEY!r}])",
                        bootstrap_servers=self.bootstrap_servers, topic=self.topic) from None
                producer.poll(0.1)

    def _on_delivery(self, error: Any, msg: Any) -> None:
        if error is not None:
            self._errors.append(str(error))

    def _flush(self) -> None:
        left = self._plain().flush(self.timeout_s)
        errors, self._errors = self._errors, []
        if left or errors:
            why = f"{left} records still unacknowledged after {self.timeout_s:g} s" if left else ""
            if errors:
                why = f"{len(errors)} records failed (first: {errors[0]})" + (f"; {why}" if why else "")
            raise KafkaConnectorError(f"writing to topic {self.topic!r} at {self.bootstrap_servers} failed: {why}",
                                      bootstrap_servers=self.bootstrap_servers, topic=self.topic)

    def _marker_group(self, subtask: int) -> str:
        return f"{self.transactional_id_prefix}-{subtask}"

    def _transactional_producer(self, subtask: int) -> Any:
        producer = self._transactional.get(subtask)
        if producer is None:
            ck = kafka()
            producer = ck.Producer({**self._conf(), "transactional.id": self._marker_group(subtask)})
            self._call("init_transactions", lambda: producer.init_transactions(self.timeout_s))
            self._transactional[subtask] = producer
        return producer

    def _marker_consumer(self, subtask: int) -> Any:
        consumer = self._marker_consumers.get(subtask)
        if consumer is None:
            consumer = kafka().Consumer(consumer_conf(
                {**self.properties, "bootstrap.servers": self.bootstrap_servers,
                 "group.id": self._marker_group(subtask), "enable.auto.commit": False}, self.timeout_s))
            self._marker_consumers[subtask] = consumer
        return consumer

    def _marker(self, subtask: int) -> int:
        """The checkpoint id after the last one published by ``subtask`` (0 if none)."""
        ck = kafka()
        consumer = self._marker_consumer(subtask)
        tps = self._call("read the commit marker", lambda: consumer.committed(
            [ck.TopicPartition(self.topic, 0)], timeout=self.timeout_s))
        return max(0, int(tps[0].offset))

    def _publish(self, c: KafkaCommittable) -> None:
        ck = kafka()
        producer = self._transactional_producer(c.subtask)
        marker = [ck.TopicPartition(self.topic, 0, c.checkpoint_id + 1)]
        consumer = self._marker_consumer(c.subtask)
        try:
            self._call("begin a transaction", producer.begin_transaction)
            self._in_transaction = producer
            for entry in c.records:
                self._produce(producer, entry)
            self._call(f"send the marker of checkpoint {c.checkpoint_id}", lambda: producer.send_offsets_to_transaction(
                marker, consumer.consumer_group_metadata(), self.timeout_s))
            self._call(f"commit checkpoint {c.checkpoint_id}", lambda: producer.commit_transaction(self.timeout_s))
            self._in_transaction = None
        except BaseException:
            self._abort_open()
            raise
        # Brokers that ignore offsets sent in a transaction (librdkafka's mock cluster) see the
        # marker through this plain commit; on Kafka it repeats the same value. It waits for the
        # group's coordinator at most session.timeout.ms (= accelflow.timeout.ms, see consumer_conf).
        self._call("commit the marker", lambda: consumer.commit(offsets=marker, asynchronous=False))

    def _call(self, what: str, fn: Callable[[], Any]) -> Any:
        try:
            return fn()
        except kafka().KafkaException as e:
            raise KafkaConnectorError(f"exactly-once KafkaSink for topic {self.topic!r} at {self.bootstrap_servers}: "
                                      f"cannot {what}: {e}",
                                      bootstrap_servers=self.bootstrap_servers, topic=self.topic) from e
