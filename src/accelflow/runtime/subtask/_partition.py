"""Partitioning: which downstream subtask each record of an output edge goes to."""

from __future__ import annotations

import zlib
from multiprocessing.connection import Connection
from typing import Any

from accelflow.dataflow import iter_records
from accelflow.runtime import OutputEdge
from accelflow.runtime.subtask._channels import RelayedChannel, connect


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
    """Sends chunks to the downstream subtasks of one output edge."""

    def __init__(self, edge: OutputEdge, index: int, authkey: bytes, sender: Any = None) -> None:
        self.edge = edge
        targets = [edge.addresses[index]] if edge.partitioning == "forward" else list(edge.addresses)
        self.conns: list[Connection | RelayedChannel] = [connect(a, authkey, sender) for a in targets]
        self.next = index % len(self.conns)

    def send(self, chunk: Any) -> None:
        if self.edge.partitioning == "hash" and len(self.conns) > 1:
            n, key_fn = len(self.conns), self.edge.key_fn
            buckets: list[list[Any]] = [[] for _ in range(n)]
            for r in iter_records(chunk):
                buckets[stable_hash(key_fn(r)) % n].append(r)
            for conn, bucket in zip(self.conns, buckets):
                if bucket:
                    conn.send(bucket)
            return
        self.conns[self.next].send(chunk)
        self.next = (self.next + 1) % len(self.conns)

    def close(self) -> None:
        for conn in self.conns:
            conn.send(None)
            conn.close()


