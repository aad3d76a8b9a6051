"""Partitioning: which downstream subtask each record of an output edge goes to."""

from __future__ import annotations

import random
from typing import Any

from accelflow._errors import JobError
from accelflow.dataflow import iter_records, rescale_targets, select, strided
from accelflow.runtime import InputChannel, OutputEdge
from accelflow.runtime.subtask._channels import RelayedChannel, connect
from accelflow.runtime.subtask._keygroups import subtask_for_key
from accelflow.runtime.subtask._shm import ShmSender


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
                 parallelism: int = 1) -> None:
        self.edge = edge
        addresses = edge.addresses
        if edge.partitioning == "forward":
            targets = [addresses[index]]
        elif edge.partitioning == "rescale":
            targets = [addresses[i] for i in rescale_targets(index, parallelism, len(addresses))]
        else:
            targets = list(addresses)
        self.conns: list[ShmSender | RelayedChannel] = [connect(a, authkey, sender) for a in targets]
        hello = InputChannel(edge.input_index)
        for conn in self.conns:
            conn.send(hello)
        self.next = index % len(self.conns)  # subtasks start at different channels
        self.partitioner = _partitioner(edge.partitioner) if edge.partitioning == "custom" else None
        self.random = random.Random(index)

    def send(self, chunk: Any) -> None:
        n = len(self.conns)
        partitioning = self.edge.partitioning
        if n == 1:
            self.conns[0].send(chunk)
        elif partitioning == "broadcast":
            for conn in self.conns:
                conn.send(chunk)
        elif partitioning in ("hash", "custom", "shuffle"):
            self._send_selected(chunk, self._targets(chunk, n))
        else:
            size = len(chunk)
            for i in range(min(n, size)):
                self.conns[(self.next + i) % n].send(strided(chunk, i, n))
            self.next = (self.next + size) % n

    def _targets(self, chunk: Any, n: int) -> list[int]:
        """The channel of each record of ``chunk``."""
        if self.edge.partitioning == "shuffle":
            return [self.random.randrange(n) for _ in range(len(chunk))]
        key_fn = self.edge.key_fn
        if self.partitioner is None:
            maxp = self.edge.max_parallelism
            return [subtask_for_key(key_fn(r), n, maxp) for r in iter_records(chunk)]
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
                conn.send(chunk)
            elif bucket:
                conn.send(select(chunk, bucket))

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
