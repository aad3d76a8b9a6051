"""Partitioning: which downstream subtask each record of an output edge goes to."""

from __future__ import annotations

import pickle
import random
from collections.abc import Callable
from typing import Any

from accelflow._errors import JobError
from accelflow.dataflow import iter_records, rescale_targets, select, strided
from accelflow.runtime import ByValue, InputChannel, OutputEdge, send_pickled
from accelflow.runtime.subtask._calls import unhashable_key, unpicklable_record
from accelflow.runtime.subtask._channels import RelayedChannel, connect
from accelflow.runtime.subtask._keygroups import subtask_for_key
from accelflow.runtime.subtask._shm import ShmSender


class SubtaskOfKey:
    """``subtask_for_key(key, parallelism, max_parallelism)``, remembered for int and str keys
    (a key's murmur hash costs microseconds in Python, and a stream's keys repeat); other
    keys are computed each time (``1 == 1.0 == True`` in a dict, but such keys need not
    hash alike). At most ``size`` keys are remembered, then it starts again.

    Example:
        >>> subtask_of = SubtaskOfKey(2, 128)
        >>> subtask_of(42) == subtask_for_key(42, 2, 128), subtask_of(42), len(subtask_of.known)
        (True, 0, 1)
    """

    def __init__(self, parallelism: int, max_parallelism: int, size: int = 1 << 16) -> None:
        self.parallelism = parallelism
        self.max_parallelism = max_parallelism
        self.size = size
        self.known: dict[Any, int] = {}

    def __call__(self, key: Any) -> int:
        kind = type(key)
        if kind is not int and kind is not str:
            return subtask_for_key(key, self.parallelism, self.max_parallelism)
        target = self.known.get(key)
        if target is None:
            if len(self.known) >= self.size:
                self.known.clear()
            target = self.known[key] = subtask_for_key(key, self.parallelism, self.max_parallelism)
        return target


class Router:
    """Sends the records of one output edge to its downstream subtasks (Flink's partitioners).

    ``forward``: all to the subtask of the same index. ``rebalance``: round-robin *per
    record*, as in Flink (8 records into 4 subtasks give 2 each, whatever the chunking),
    continuing across chunks; each channel's share of a chunk leaves at once, so batching
    adds no latency. ``rescale``: round-robin over this subtask's own share of the
    downstream subtasks. ``hash``: to the subtask owning the key's key group (so keyed state
    and timers move with their keys on rescale). ``shuffle``: a random subtask per record.
    ``broadcast``: every record to every subtask. ``custom``: ``partitioner(key, n)``.

    The first message on every channel says which input of the downstream operator it feeds
    (:class:`InputChannel`).
    """

    def __init__(self, edge: OutputEdge, index: int, authkey: bytes, sender: Any = None,
                 parallelism: int = 1, meanwhile: Callable[[], None] | None = None) -> None:
        self.edge = edge
        addresses = edge.addresses
        if edge.partitioning == "forward":
            targets = [addresses[index]]
        elif edge.partitioning == "rescale":
            targets = [addresses[i] for i in rescale_targets(index, parallelism, len(addresses))]
        else:
            targets = list(addresses)
        self.conns: list[ShmSender | RelayedChannel] = []
        try:
            for address in targets:
                self.conns.append(connect(address, authkey, sender, meanwhile))
        except BaseException:  # e.g. a rollback arrived meanwhile: no channel of it stays open
            for conn in self.conns:
                conn.close()
            raise
        hello = InputChannel(edge.input_index)
        for conn in self.conns:
            conn.send(hello)
        self.next = index % len(self.conns)  # subtasks start at different channels
        self.partitioner = _partitioner(edge.partitioner) if edge.partitioning == "custom" else None
        self.random = random.Random(index)
        self.subtask_of: SubtaskOfKey | None = None
        #: records of a class that plain pickle cannot find by name go by value (``ByValue``)
        self.by_value = False

    def send(self, chunk: Any) -> None:
        """Send ``chunk``'s records to their subtasks.

        Raises:
            TypeError: a record cannot be pickled, or (``hash``) its key cannot be a key:
                the message names the edge's operators, the culprit's type and the fix.
        """
        try:
            self._send(chunk)
            return
        except (TypeError, AttributeError, pickle.PicklingError):  # as pickling fails
            sender, receiver = self.edge.names
            edge = f"from operator {sender!r} to operator {receiver!r} ({self.edge.partitioning})"
            if (error := unpicklable_record(edge, iter_records(chunk))) is None:
                raise
        raise error  # out of the except: not chained to multiprocessing's frames

    def _send(self, chunk: Any) -> None:
        n = len(self.conns)
        partitioning = self.edge.partitioning
        if n == 1:
            self._put(self.conns[0], chunk)
        elif partitioning == "broadcast":
            for conn in self.conns:
                self._put(conn, chunk)
        elif partitioning in ("hash", "custom", "shuffle"):
            self._send_selected(chunk, self._targets(chunk, n))
        else:
            size = len(chunk)
            for i in range(min(n, size)):
                self._put(self.conns[(self.next + i) % n], strided(chunk, i, n))
            self.next = (self.next + size) % n

    def _put(self, conn: ShmSender | RelayedChannel, part: Any) -> None:
        """``part`` to ``conn``; by value once a record's class was not found by name."""
        if self.by_value:
            conn.send(ByValue(part))
        else:
            self.by_value = send_pickled(conn.send, part)

    def _targets(self, chunk: Any, n: int) -> list[int]:
        """The channel of each record of ``chunk``."""
        if self.edge.partitioning == "shuffle":
            return [self.random.randrange(n) for _ in range(len(chunk))]
        key_fn = self.edge.key_fn
        if self.partitioner is None:
            if self.subtask_of is None or self.subtask_of.parallelism != n:
                self.subtask_of = SubtaskOfKey(n, self.edge.max_parallelism)
            subtask_of = self.subtask_of
            try:
                return [subtask_of(key_fn(r)) for r in iter_records(chunk)]
            except TypeError:  # a key that is no key (a list)? else the key selector's own error
                if (error := unhashable_key(self.edge.names[1], key_fn, iter_records(chunk))) is None:
                    raise
            raise error  # out of the except: not chained to the loop's error
        out = []
        for r in iter_records(chunk):
            target = self.partitioner(key_fn(r), n)
            if isinstance(target, bool) or not isinstance(target, int) or not 0 <= target < n:
                raise JobError(f"partition_custom: the partitioner returned {target!r} for the key of {r!r}; "
                               f"it must return a partition from 0 to {n - 1} (num_partitions is {n})")
            out.append(target)
        return out

    def _send_selected(self, chunk: Any, targets: list[int]) -> None:
        buckets: list[list[int]] = [[] for _ in self.conns]
        for i, target in enumerate(targets):
            buckets[target].append(i)
        for conn, bucket in zip(self.conns, buckets):
            if len(bucket) == len(targets):
                self._put(conn, chunk)
            elif bucket:
                self._put(conn, select(chunk, bucket))

    def broadcast(self, item: Any) -> None:
        """Send ``item`` (a checkpoint barrier, a watermark, a status) to every downstream
        subtask of this edge."""
        for conn in self.conns:
            conn.send(item)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
            conn.close()


def _partitioner(partitioner: Any) -> Any:
    """``fn(key, num_partitions)`` of a PyFlink ``Partitioner`` (its ``partition`` method) or a
    plain function."""
    return getattr(partitioner, "partition", partitioner)
