"""``KafkaSource``: read Kafka topics as a (bounded or unbounded) accelflow source."""

from __future__ import annotations

import logging
from collections.abc import Callable, Generator, Iterator, Mapping, Sequence
from typing import Any

from accelflow._errors import ConfigError
from accelflow.connectors.kafka._common import (
    DEFAULT_TIMEOUT_MS,
    DEFAULT_UNREACHABLE_MS,
    TIMEOUT_KEY,
    UNREACHABLE_KEY,
    KafkaConnectorError,
    check_text,
    consumer_conf,
    kafka,
    split_properties,
)
from accelflow.connectors.kafka._decode import Deserializers, KafkaRecord, TopicPartitionKey
from accelflow.connectors.kafka._reader import KafkaSplit, PartitionPosition, SplitReader
from accelflow.dataflow import RuntimeContext, Source, split_tagged, stamped

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
        value_deserializer: value bytes (or None) -> the record to emit, as in kafka-python;
            the default emits the value bytes. (A function written for a :class:`KafkaRecord`, as
            accelflow 0.1.0 gave it, still works until the next release, with a
            ``DeprecationWarning``: pass it as ``deserializer``.)
        properties: librdkafka consumer settings, plus ``accelflow.timeout.ms`` (how long a
            blocking broker call may take, default 30000) and
            ``accelflow.unreachable.timeout.ms`` (how long no broker may be reachable before
            the source fails, default 60000; 0: never).
        key_deserializer: key bytes (or None) -> key; when given, the source emits
            ``(key, value)`` pairs.
        deserializer: :class:`KafkaRecord` -> the record to emit (key, value, topic,
            partition, offset, timestamp, headers), as Flink's
            ``KafkaRecordDeserializationSchema``; not together with the other two.

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
        value_deserializer: Callable[[bytes | None], Any] | None = None,
        properties: Mapping[str, object] | None = None,
        *,
        key_deserializer: Callable[[bytes | None], Any] | None = None,
        deserializer: Callable[[KafkaRecord], Any] | None = None,
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
        self.deserializers = _deserializers(deserializer, value_deserializer, key_deserializer)
        self.properties, own = split_properties(
            properties, reserved=_RESERVED, own={TIMEOUT_KEY: DEFAULT_TIMEOUT_MS, UNREACHABLE_KEY: DEFAULT_UNREACHABLE_MS})
        self.timeout_s, self.unreachable_s = own[TIMEOUT_KEY], own[UNREACHABLE_KEY]
        self._reset_runtime()

    def __repr__(self) -> str:
        return (f"KafkaSource({self.bootstrap_servers!r}, {list(self.topics)!r}, group_id={self.group_id!r}, "
                f"starting_offsets={self.starting_offsets!r}, bounded={self.bounded})")

    # -- runtime state, per subtask (never pickled) ------------------------------------------

    def _reset_runtime(self) -> None:
        self._readers: dict[KafkaSplit, SplitReader] = {}
        self._pending: dict[int, dict[TopicPartitionKey, int]] = {}
        self._committer: Any = None
        self._commit_failures = 0  # failed offset commits in a row

    def __getstate__(self) -> dict[str, Any]:
        state = dict(self.__dict__)
        for name in ("_readers", "_pending", "_committer", "_commit_failures"):
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
        consumer = kafka().Consumer(consumer_conf(self._conf(), self.timeout_s))
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

    def read_chunks(self, split: KafkaSplit, ctx: RuntimeContext) -> Generator[Any, None, None]:
        """Lists of records as they arrive, each with its Kafka timestamp (the default event
        time: a ``WatermarkStrategy`` without a timestamp assigner keeps it) and its partition
        (Flink's per-partition watermarks: :class:`~accelflow.dataflow.SplitTagged`), ``[]`` when none
        came within 100 ms; ends when cancelled or (bounded) once every partition reached its
        stop offset."""
        if not isinstance(split, KafkaSplit):
            raise KafkaConnectorError(f"KafkaSource cannot read split {split!r} (expected a KafkaSplit)",
                                      bootstrap_servers=self.bootstrap_servers)
        reader = SplitReader(split, self._conf(), self.deserializers, timeout_s=self.timeout_s,
                             unreachable_s=self.unreachable_s)
        self._readers[split] = reader
        try:
            while not ctx.is_cancelled() and not (self.bounded and reader.finished()):
                records = reader.poll()  # with their record timestamps: the default event time
                if records:  # and their partitions: a watermark per partition
                    yield split_tagged(stamped(records, reader.timestamps), reader.partition_indices,
                                       reader.partitions)
                else:
                    yield records
        finally:
            reader.close()
            if self._readers.get(split) is reader:  # read again (a rollback in place): from the split
                del self._readers[split]

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> KafkaSplit:
        """The split with each partition's next offset after the last chunk yielded
        (``records_read`` is not needed: Kafka positions are exact)."""
        reader = self._readers.get(split)
        if reader is None:
            return split  # type: ignore[no-any-return]  # not started: nothing read yet
        self._pending.setdefault(checkpoint_id, {}).update(reader.offsets())
        return KafkaSplit(reader.positions())

    def notify_checkpoint_complete(self, checkpoint_id: int) -> None:
        """Commit the offsets snapshotted in ``checkpoint_id`` for ``group_id``, asynchronously
        (as Flink, for monitoring and ``starting_offsets="committed"``: recovery uses the
        checkpoint). Never waits for a broker; a failed commit is logged at the next one."""
        offsets: dict[TopicPartitionKey, int] = {}
        for cid in sorted(c for c in self._pending if c <= checkpoint_id):
            offsets.update(self._pending.pop(cid))
        if not offsets:
            return
        ck = kafka()
        try:
            if self._committer is None:
                self._committer = ck.Consumer(consumer_conf({**self._conf(), "on_commit": self._on_commit},
                                                            self.timeout_s))
            self._committer.poll(0)  # the outcome of earlier commits
            self._committer.commit(offsets=[ck.TopicPartition(t, p, o) for (t, p), o in offsets.items()],
                                   asynchronous=True)
        except ck.KafkaException as e:
            self._on_commit(e.args[0] if e.args else e, [])

    def _on_commit(self, error: Any, partitions: list[Any]) -> None:
        failed = [f"{tp.topic}[{tp.partition}]: {tp.error}" for tp in partitions or () if tp.error]
        if error is None and not failed:
            if self._commit_failures:
                _log.warning("KafkaSource: offsets are committed again for group %r (after %d failed commits)",
                             self.group_id, self._commit_failures)
            self._commit_failures = 0
            return
        self._commit_failures += 1
        if self._commit_failures == 1:  # one line per run of failures, not one per checkpoint
            _log.warning("KafkaSource: committing offsets for group %r to %s failed (%s); the job goes on (its "
                         "checkpoints hold the positions); further failures are counted until a commit works",
                         self.group_id, self.bootstrap_servers, error or "; ".join(failed))

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


def _deserializers(deserializer: Any, value_deserializer: Any, key_deserializer: Any) -> Deserializers:
    for name, fn in (("deserializer", deserializer), ("value_deserializer", value_deserializer),
                     ("key_deserializer", key_deserializer)):
        if fn is not None and not callable(fn):
            raise ConfigError(f"expected a callable, got {fn!r}", key=name)
    if deserializer is not None and (value_deserializer is not None or key_deserializer is not None):
        raise ConfigError("deserializer gets the whole KafkaRecord (key and value included): pass either it "
                          "or value_deserializer/key_deserializer, not both", key="deserializer")
    return Deserializers(deserializer, value_deserializer, key_deserializer)
