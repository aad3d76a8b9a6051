"""``KafkaSource``: read Kafka topics as a (bounded or unbounded) accelflow source."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from accelflow._errors import ConfigError
from accelflow.connectors.kafka._common import KafkaConnectorError, check_text, kafka, split_properties
from accelflow.connectors.kafka._reader import (
    KafkaRecord,
    KafkaSplit,
    PartitionPosition,
    SplitReader,
    TopicPartitionKey,
)
from accelflow.dataflow import RuntimeContext, Source

STARTING_OFFSETS = ("earliest", "latest", "committed")
_RESERVED = {
    "bootstrap.servers": "pass bootstrap_servers", "group.id": "pass group_id",
    "enable.auto.commit": "offsets are committed when a checkpoint completes",
    "isolation.level": "the source reads committed records only (read_committed)",
}
_log = logging.getLogger(__name__)


class KafkaSource(Source[Any]):
    """Read ``topics`` from Kafka; each source subtask reads some partitions with its own
    consumer (no group rebalance: partitions are assigned when the job starts).

    Use it with ``env.from_source(source)``; checkpoints keep each partition's position.

    Example:
        >>> KafkaSource("broker:9092", "events", group_id="classify", starting_offsets="committed")
        KafkaSource('broker:9092', ['events'], group_id='classify', starting_offsets='committed', bounded=False)

    Args:
        bootstrap_servers: ``host:port[,host:port...]``.
        topics: one topic or several.
        group_id: the consumer group offsets are committed for (monitoring only: positions
            come back from checkpoints, not from Kafka).
        starting_offsets: ``earliest``, ``latest`` or ``committed`` (the group's committed
            offsets, ``earliest`` for partitions without one).
        bounded: stop at the high watermarks found when the job started.
        value_deserializer: gets a :class:`KafkaRecord`, returns the record to emit; the
            default emits the value bytes.
        properties: librdkafka consumer settings, plus ``accelflow.timeout.ms`` (how long a
            blocking broker call may take, default 30000).

    Raises:
        ConfigError: an argument is invalid.
    """

    def __init__(
        self,
        bootstrap_servers: str,
        topics: str | Sequence[str],
        group_id: str,
        starting_offsets: str = "earliest",
        bounded: bool = False,
        value_deserializer: Callable[[KafkaRecord], Any] | None = None,
        properties: Mapping[str, object] | None = None,
    ) -> None:
        self.bootstrap_servers = check_text("bootstrap_servers", bootstrap_servers)
        names = [topics] if isinstance(topics, str) else list(topics)
        if not names:
            raise ConfigError("expected at least one topic", key="topics")
        self.topics = tuple(check_text("topics", t) for t in names)
        self.group_id = check_text("group_id", group_id)
        if starting_offsets not in STARTING_OFFSETS:
            raise ConfigError(f"expected one of {', '.join(STARTING_OFFSETS)}, got {starting_offsets!r}",
                              key="starting_offsets")
        self.starting_offsets = starting_offsets
        self.bounded = bool(bounded)
        if value_deserializer is not None and not callable(value_deserializer):
            raise ConfigError(f"expected a callable, got {value_deserializer!r}", key="value_deserializer")
        self.value_deserializer = value_deserializer
        self.properties, self.timeout_s = split_properties(properties, reserved=_RESERVED)
        self._reset_runtime()

    def __repr__(self) -> str:
        return (f"KafkaSource({self.bootstrap_servers!r}, {list(self.topics)!r}, group_id={self.group_id!r}, "
                f"starting_offsets={self.starting_offsets!r}, bounded={self.bounded})")

    # -- runtime state, per subtask (never pickled) ------------------------------------------

    def _reset_runtime(self) -> None:
        self._readers: dict[KafkaSplit, SplitReader] = {}
        self._pending: dict[int, dict[TopicPartitionKey, int]] = {}
        self._committer: Any = None

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_readers", "_pending", "_committer"):
            state.pop(name, None)
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        self._reset_runtime()

    def _conf(self) -> dict[str, Any]:
        return {**self.properties, "bootstrap.servers": self.bootstrap_servers, "group.id": self.group_id,
                "enable.auto.commit": False, "isolation.level": "read_committed",
                "enable.partition.eof": True, "auto.offset.reset": "earliest"}

    # -- in the client -------------------------------------------------------------------------

    def create_splits(self, parallelism: int) -> list[KafkaSplit]:
        """Exactly ``parallelism`` splits; the topics' partitions spread round-robin.

        Raises:
            KafkaConnectorError: the brokers cannot be reached within the timeout, or a topic
                does not exist.
        """
        if isinstance(parallelism, bool) or not isinstance(parallelism, int) or parallelism < 1:
            raise ConfigError(f"expected a positive integer, got {parallelism!r}", key="parallelism")
        consumer = kafka().Consumer(self._conf())
        try:
            positions = self._positions(consumer)
        finally:
            consumer.close()
        return [KafkaSplit(tuple(positions[i::parallelism])) for i in range(parallelism)]

    def _positions(self, consumer: Any) -> list[PartitionPosition]:
        ck = kafka()
        try:
            metadata = consumer.list_topics(timeout=self.timeout_s)
        except ck.KafkaException as e:
            raise self._unreachable(e) from e
        tps = []
        for topic in self.topics:
            found = metadata.topics.get(topic)
            if found is None or found.error is not None or not found.partitions:
                raise KafkaConnectorError(
                    f"topic {topic!r} does not exist on {self.bootstrap_servers}: create it first "
                    f"(or check the name; {len(metadata.topics)} topics exist there)",
                    bootstrap_servers=self.bootstrap_servers, topic=topic)
            tps += [ck.TopicPartition(topic, p) for p in sorted(found.partitions)]
        try:
            marks = [consumer.get_watermark_offsets(tp, timeout=self.timeout_s) for tp in tps]
            committed = (consumer.committed(tps, timeout=self.timeout_s)
                         if self.starting_offsets == "committed" else tps)
        except ck.KafkaException as e:
            raise self._unreachable(e) from e
        return [
            PartitionPosition(tp.topic, tp.partition, self._start(low, high, c.offset),
                              high if self.bounded else None)
            for tp, (low, high), c in zip(tps, marks, committed, strict=True)
        ]

    def _start(self, low: int, high: int, committed: int) -> int:
        if self.starting_offsets == "latest":
            return high
        if self.starting_offsets == "committed" and committed >= 0:
            return max(low, min(committed, high))
        return low

    def _unreachable(self, e: Exception) -> KafkaConnectorError:
        return KafkaConnectorError(
            f"cannot read metadata of {', '.join(self.topics)} from Kafka at {self.bootstrap_servers} "
            f"within {self.timeout_s:g} s: {e}. Check bootstrap_servers and that the brokers run "
            f"(or raise properties['accelflow.timeout.ms'])",
            bootstrap_servers=self.bootstrap_servers)

    # -- in the source subtask ------------------------------------------------------------------

    def read(self, split: KafkaSplit, ctx: RuntimeContext) -> Iterator[Any]:
        for chunk in self.read_chunks(split, ctx):
            yield from chunk

    def read_chunks(self, split: KafkaSplit, ctx: RuntimeContext) -> Generator[list[Any], None, None]:
        """Lists of records as they arrive, ``[]`` when none came within 100 ms; ends when
        cancelled or (bounded) once every partition reached its stop offset."""
        if not isinstance(split, KafkaSplit):
            raise KafkaConnectorError(f"KafkaSource cannot read split {split!r} (expected a KafkaSplit)",
                                      bootstrap_servers=self.bootstrap_servers)
        reader = SplitReader(split, self._conf(), self.value_deserializer)
        self._readers[split] = reader
        try:
            while not ctx.is_cancelled() and not (self.bounded and reader.finished()):
                yield reader.poll()
        finally:
            reader.close()

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> KafkaSplit:
        """The split with each partition's next offset after the last chunk yielded
        (``records_read`` is not needed: Kafka positions are exact)."""
        reader = self._readers.get(split)
        if reader is None:
            return split  # type: ignore[no-any-return]  # not started: nothing read yet
        self._pending.setdefault(checkpoint_id, {}).update(reader.offsets())
        return KafkaSplit(reader.positions())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit the offsets snapshotted in ``checkpoint_id`` for ``group_id`` (best effort:
        for monitoring and ``starting_offsets="committed"``; recovery uses the checkpoint)."""
        offsets: dict[TopicPartitionKey, int] = {}
        for cid in sorted(c for c in self._pending if c <= checkpoint_id):
            offsets.update(self._pending.pop(cid))
        if not offsets:
            return
        ck = kafka()
        try:
            if self._committer is None:
                self._committer = ck.Consumer(self._conf())
            self._committer.commit(offsets=[ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                   asynchronous=False)
        except ck.KafkaException as e:
            _log.warning("KafkaSource: committing offsets of checkpoint %d for group %r failed: %s",
                         checkpoint_id, self.group_id, e)

    def lag(self) -> dict[TopicPartitionKey, int]:
        """``{(topic, partition): high watermark - next offset}`` for every partition this
        subtask is reading now (watermarks as last fetched, so no broker round trip)."""
        lags: dict[TopicPartitionKey, int] = {}
        for reader in self._readers.values():
            lags.update(reader.lag())
        return lags

    def metrics(self) -> dict[str, float]:
        """:meth:`lag` as the runtime's gauges: ``{"kafka_lag:<topic>:<partition>": lag}``."""
        return {f"kafka_lag:{t}:{p}": float(n) for (t, p), n in self.lag().items()}

    def close(self) -> None:
        """Close the offset committer (the readers close when their splits end)."""
        committer, self._committer = self._committer, None
        if committer is not None:
            committer.close()
