"""Partitioning: which downstream subtask each record of an output edge goes to."""

from __future__ import annotations

import zlib
from typing import Any

from accelflow.dataflow import iter_records, strided
from accelflow.runtime import OutputEdge
from accelflow.runtime.subtask._channels import RelayedChannel, connect
from accelflow.runtime.subtask._shm import ShmSender


def stable_hash(key: Any) -> int:
    """A hash that is the same in every process (``hash(str)`` is salted per process, and
    ``hash(None)`` is an address, different in each TaskExecutor process)."""
    if key is None:
        return 0
    if isinstance(key, bool | int):
        return int(key)
    if isinstance(key, str):
        return zlib.crc32(key.encode("utf-8", "surrogatepass"))
    if isinstance(key, bytes):
        return zlib.crc32(key)
    if isinstance(key, tuple):
        h = 0x345678
        for item in key:
            h = (h * 1000003) ^ stable_hash(item)
        return h & 0xFFFFFFFFFFFF
    if isinstance(key, frozenset):
        h = 0
        for item in key:
            h ^= stable_hash(item)
        return h
    return hash(key)


class Router:
    """Sends the records of one output edge to its downstream subtasks.

    ``forward``: all to the subtask of the same index. ``rebalance``: round-robin *per
    record*, as in Flink (8 records into 4 subtasks give 2 each, whatever the chunking),
    continuing across chunks; each channel's share of a chunk leaves at once, so batching
    adds no latency. ``hash``: by the stable hash of the key.
    """

    def __init__(self, edge: OutputEdge, index: int, authkey: bytes, sender: Any = None) -> None:
        self.edge = edge
        targets = [edge.addresses[index]] if edge.partitioning == "forward" else list(edge.addresses)
        self.conns: list[ShmSender | RelayedChannel] = [connect(a, authkey, sender) for a in targets]
        self.next = index % len(self.conns)  # subtasks start at different channels

    def send(self, chunk: Any) -> None:
        n = len(self.conns)
        if n == 1:
            self.conns[0].send(chunk)
        elif self.edge.partitioning == "hash":
            self._send_hashed(chunk)
        else:
            size = len(chunk)
            for i in range(min(n, size)):
                self.conns[(self.next + i) % n].send(strided(chunk, i, n))
            self.next = (self.next + size) % n

    def _send_hashed(self, chunk: Any) -> None:
        n, key_fn = len(self.conns), self.edge.key_fn
        buckets: list[list[Any]] = [[] for _ in range(n)]
        for r in iter_records(chunk):
            buckets[stable_hash(key_fn(r)) % n].append(r)
        for conn, bucket in zip(self.conns, buckets):
            if bucket:
                conn.send(bucket)

    def broadcast(self, item: Any) -> None:
        """Send ``item`` (a checkpoint barrier) to every downstream subtask of this edge."""
        for conn in self.conns:
            conn.send(item)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
            conn.close()
