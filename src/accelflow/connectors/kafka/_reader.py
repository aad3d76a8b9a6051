"""Reading one :class:`KafkaSplit` in a source subtask: one consumer, positions per partition.

Invariants: ``next_offset`` of a partition is the offset after the last record handed out
(or a position the consumer reached past transaction markers), never beyond ``stop_offset``;
a partition whose ``next_offset`` reached its ``stop_offset`` is paused and yields nothing.

A reader whose consumer sees no broker up (librdkafka's statistics, every
:data:`STATS_INTERVAL_MS`) for longer than ``accelflow.unreachable.timeout.ms`` fails, so the
job's restart strategy acts instead of the job idling on without a word.
"""

from __future__ import annotations

import json
import time
from dataclasses import dataclass
from typing import Any

from accelflow._loops import watched
from accelflow.connectors.kafka._common import UNREACHABLE_KEY, KafkaConnectorError, consumer_conf, kafka
from accelflow.connectors.kafka._decode import Deserializers, RecordDecoder, TopicPartitionKey

#: at most this many records per chunk, and how long one poll waits for them
POLL_RECORDS = 1024
POLL_TIMEOUT_S = 0.1
#: how often librdkafka reports its brokers' states (at most; a quarter of a short bound)
STATS_INTERVAL_MS = 1000


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
        functions: Deserializers,
        *,
        timeout_s: float,
        unreachable_s: float,
    ) -> None:
        self._bootstrap = str(conf["bootstrap.servers"])
        self._decoder = None if functions.none else RecordDecoder(functions, self._bootstrap)
        self._unreachable_s = unreachable_s
        self._last_up = time.monotonic()  # a broker was last seen up (or the reader started)
        self._last_error = ""
        self._next = {(p.topic, p.partition): p.next_offset for p in split.positions}
        self._stop = {(p.topic, p.partition): p.stop_offset for p in split.positions}
        #: partitions not (or no longer) fetched: those that reached their stop offset
        self._paused = {k for k in self._next if self._done(k)}
        self._consumer: Any = None
        #: the Kafka timestamps of the records the last poll gave (None: a record has none)
        self.timestamps: list[int | None] = []
        #: the partitions read, ``(topic, partition)``, and each record's index among them
        self.partitions: tuple[TopicPartitionKey, ...] = tuple(self._next)
        self.partition_indices: list[int] = []
        self._index = {key: i for i, key in enumerate(self.partitions)}
        todo = [k for k in self._next if k not in self._paused]
        if todo:
            ck = kafka()
            self._consumer = ck.Consumer(self._watching(consumer_conf(conf, timeout_s)))
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
        (maybe none); :attr:`timestamps` are theirs (the Kafka record timestamps, None where
        a record has none), :attr:`partition_indices` their partitions' in :attr:`partitions`."""
        if self._consumer is None or len(self._paused) == len(self._next):
            time.sleep(POLL_TIMEOUT_S)
            return []
        out: list[Any] = []
        self.timestamps, self.partition_indices = [], []
        # what has arrived, at once; only when nothing has, wait for the first record (a batch
        # waiting to fill up would add up to the whole timeout to every record's latency)
        messages = self._consumer.consume(num_messages=POLL_RECORDS, timeout=0)
        if not messages:
            first = self._consumer.poll(POLL_TIMEOUT_S)
            if first is not None:
                messages = [first, *self._consumer.consume(num_messages=POLL_RECORDS - 1, timeout=0)]
        if messages:
            self._last_up = time.monotonic()
        for msg in watched(iter(messages)):  # one deserializer call each (_loops.py)
            self._take(msg, out, self.timestamps)
        self._follow_positions()
        self._pause_done()
        self._check_reachable()
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

    def _take(self, msg: Any, out: list[Any], timestamps: list[int | None]) -> None:
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
        kind, timestamp = msg.timestamp()
        timestamps.append(None if kind == kafka().TIMESTAMP_NOT_AVAILABLE else timestamp)
        self.partition_indices.append(self._index[key])
        self._next[key] = offset + 1

    def _value(self, msg: Any, key: TopicPartitionKey, offset: int) -> Any:
        return msg.value() if self._decoder is None else self._decoder.decode(msg, key, offset)

    # -- is a broker reachable? ------------------------------------------------------------------

    def _watching(self, conf: dict[str, Any]) -> dict[str, Any]:
        """``conf`` with statistics and errors reported to this reader (the user's own
        ``stats_cb`` and ``error_cb`` still get theirs)."""
        theirs_stats, theirs_error = conf.get("stats_cb"), conf.get("error_cb")
        interval = STATS_INTERVAL_MS
        if self._unreachable_s:
            interval = min(interval, max(100, int(self._unreachable_s * 250)))
        user_interval = int(conf.get("statistics.interval.ms", 0) or 0)

        def on_stats(stats: str) -> None:
            brokers = json.loads(stats).get("brokers", {})
            if any(b.get("state") == "UP" for b in brokers.values()):
                self._last_up = time.monotonic()
            if theirs_stats is not None:
                theirs_stats(stats)

        def on_error(error: Any) -> None:
            self._last_error = error.str()
            if theirs_error is not None:
                theirs_error(error)

        return {**conf, "stats_cb": on_stats, "error_cb": on_error,
                "statistics.interval.ms": min(interval, user_interval) if user_interval > 0 else interval}

    def _check_reachable(self) -> None:
        down = time.monotonic() - self._last_up
        if not self._unreachable_s or down <= self._unreachable_s:
            return
        partitions = ", ".join(f"{t}[{p}]" for t, p in self._next if (t, p) not in self._paused)
        raise KafkaConnectorError(
            f"no Kafka broker of {self._bootstrap} reachable for {down:.0f} s while reading {partitions}"
            + (f" (last error: {self._last_error})" if self._last_error else "")
            + f": the source fails so that the restart strategy acts. Check that the brokers run, or set "
            f"properties[{UNREACHABLE_KEY!r}] (now {self._unreachable_s * 1000:.0f}; 0: wait for ever)",
            bootstrap_servers=self._bootstrap, topic=next(iter(self._next))[0])

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
