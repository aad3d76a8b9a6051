"""Reading one :class:`KafkaSplit` in a source subtask: one consumer, positions per partition.

Invariants: ``next_offset`` of a partition is the offset after the last record handed out
(or a position the consumer reached past transaction markers), never beyond ``stop_offset``;
a partition whose ``next_offset`` reached its ``stop_offset`` is paused and yields nothing.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from accelflow.connectors.kafka._common import KafkaConnectorError, kafka

#: at most this many records per chunk, and how long one poll waits for them
POLL_RECORDS = 1024
POLL_TIMEOUT_S = 0.1

TopicPartitionKey = tuple[str, int]


@dataclass(frozen=True, slots=True)
class KafkaRecord:
    """One Kafka record, as a ``value_deserializer`` receives it.

    Attributes:
        timestamp: milliseconds since the epoch, or None when the record has none.
    """

    key: bytes | None
    value: bytes | None
    topic: str
    partition: int
    offset: int
    timestamp: int | None


@dataclass(frozen=True, slots=True)
class PartitionPosition:
    """Where reading one partition stands: the next offset to read and, for a bounded read,
    the offset to stop before (the high watermark when the job started)."""

    topic: str
    partition: int
    next_offset: int
    stop_offset: int | None = None

    @property
    def done(self) -> bool:
        return self.stop_offset is not None and self.next_offset >= self.stop_offset


@dataclass(frozen=True, slots=True)
class KafkaSplit:
    """The partitions one source subtask reads, each with its position (may be empty)."""

    positions: tuple[PartitionPosition, ...] = ()


class SplitReader:
    """Reads the partitions of one split with one consumer (``assign``, no group rebalance)."""

    def __init__(
        self,
        split: KafkaSplit,
        conf: dict[str, Any],
        deserialize: Callable[[KafkaRecord], Any] | None,
    ) -> None:
        self._bootstrap = str(conf["bootstrap.servers"])
        self._deserialize = deserialize
        self._next = {(p.topic, p.partition): p.next_offset for p in split.positions}
        self._stop = {(p.topic, p.partition): p.stop_offset for p in split.positions}
        #: partitions not (or no longer) fetched: those that reached their stop offset
        self._paused = {k for k in self._next if self._done(k)}
        self._consumer: Any = None
        todo = [k for k in self._next if k not in self._paused]
        if todo:
            ck = kafka()
            self._consumer = ck.Consumer(conf)
            self._consumer.assign([ck.TopicPartition(t, p, self._next[(t, p)]) for t, p in todo])

    def finished(self) -> bool:
        """True once every partition reached its stop offset (never for an unbounded read)."""
        return all(self._done(k) for k in self._next)

    def positions(self) -> tuple[PartitionPosition, ...]:
        return tuple(PartitionPosition(t, p, n, self._stop[(t, p)]) for (t, p), n in self._next.items())

    def offsets(self) -> dict[TopicPartitionKey, int]:
        return dict(self._next)

    def poll(self) -> list[Any]:
        """The records that have arrived, waiting up to :data:`POLL_TIMEOUT_S` for the first
        (maybe none)."""
        if self._consumer is None or len(self._paused) == len(self._next):
            time.sleep(POLL_TIMEOUT_S)
            return []
        out: list[Any] = []
        # what has arrived, at once; only when nothing has, wait for the first record (a batch
        # waiting to fill up would add up to the whole timeout to every record's latency)
        messages = self._consumer.consume(num_messages=POLL_RECORDS, timeout=0)
        if not messages:
            first = self._consumer.poll(POLL_TIMEOUT_S)
            if first is not None:
                messages = [first, *self._consumer.consume(num_messages=POLL_RECORDS - 1, timeout=0)]
        for msg in messages:
            self._take(msg, out)
        self._follow_positions()
        self._pause_done()
        return out

    def lag(self) -> dict[TopicPartitionKey, int]:
        """High watermark (as last fetched) minus the next offset, per partition being read."""
        if self._consumer is None:
            return {}
        ck = kafka()
        lags = {}
        for (t, p), n in self._next.items():
            _, high = self._consumer.get_watermark_offsets(ck.TopicPartition(t, p), cached=True)
            if high >= 0:
                lags[(t, p)] = max(0, high - n)
        return lags

    def close(self) -> None:
        consumer, self._consumer = self._consumer, None
        if consumer is not None:
            consumer.close()

    def _done(self, key: TopicPartitionKey) -> bool:
        stop = self._stop[key]
        return stop is not None and self._next[key] >= stop

    def _advance(self, key: TopicPartitionKey, offset: int) -> None:
        stop = self._stop[key]
        self._next[key] = max(self._next[key], offset if stop is None else min(offset, stop))

    def _take(self, msg: Any, out: list[Any]) -> None:
        key = (msg.topic(), msg.partition())
        error = msg.error()
        if error is not None:
            if error.code() == kafka().KafkaError._PARTITION_EOF:
                self._advance(key, msg.offset())  # everything before it was handed out
                return
            raise KafkaConnectorError(
                f"Kafka reported an error reading {key[0]}[{key[1]}] from {self._bootstrap}: {error.str()}",
                bootstrap_servers=self._bootstrap, topic=key[0], partition=key[1],
            )
        offset = msg.offset()
        stop = self._stop[key]
        if stop is not None and offset >= stop:  # written after the job started: not ours
            self._advance(key, stop)
            return
        out.append(self._value(msg, key, offset))
        self._next[key] = offset + 1

    def _value(self, msg: Any, key: TopicPartitionKey, offset: int) -> Any:
        if self._deserialize is None:
            return msg.value()
        kind, ts = msg.timestamp()
        record = KafkaRecord(msg.key(), msg.value(), key[0], key[1], offset,
                             None if kind == kafka().TIMESTAMP_NOT_AVAILABLE else ts)
        try:
            return self._deserialize(record)
        except Exception as e:
            raise KafkaConnectorError(
                f"value_deserializer failed on the record at {key[0]}[{key[1]}] offset {offset}: "
                f"{type(e).__name__}: {e}",
                bootstrap_servers=self._bootstrap, topic=key[0], partition=key[1], offset=offset,
            ) from e

    def _follow_positions(self) -> None:
        """Move past transaction markers: the consumer's position is after the last record it
        handed out, control records included."""
        ck = kafka()
        active = [ck.TopicPartition(t, p) for (t, p) in self._next if (t, p) not in self._paused]
        for tp in self._consumer.position(active):
            if tp.offset >= 0:
                self._advance((tp.topic, tp.partition), tp.offset)

    def _pause_done(self) -> None:
        ck = kafka()
        newly = [k for k in self._next if k not in self._paused and self._done(k)]
        if newly:
            self._consumer.pause([ck.TopicPartition(t, p) for t, p in newly])
            self._paused.update(newly)
