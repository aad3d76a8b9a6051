"""Partitioning: which downstream subtask each record of an output edge goes to."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np

from accelflow.dataflow import iter_records, strided
from accelflow.runtime import OutputEdge
from accelflow.runtime.subtask._channels import RelayedChannel, connect
from accelflow.runtime.subtask._shm import ShmSender


#: the one NaN every NaN key becomes in this process (see :func:`canonical_key`)
_NAN = float("nan")
#: the hash of every NaN key (Python's own ``hash(nan)`` is the object's address since 3.10)
_NAN_HASH = 0x7FF8_0000_0000


def canonical_key(key: Any) -> Any:
    """``key`` with every NaN in it (a float, a NumPy float, complex, also inside tuples)
    made this process's one NaN object, so that NaN keys group as one key, as in Flink
    (Java's ``Double.equals`` holds for two NaNs): ``nan != nan`` in Python, but a dict finds
    the same object by identity. Other keys are returned as they are.

    Example:
        >>> d = {canonical_key(float("nan")): 1}
        >>> canonical_key(float("nan")) in d, canonical_key((1, np.float32("nan"))) == (1, _NAN)
        (True, True)
    """
    if isinstance(key, float | complex | np.inexact):
        return _NAN if key != key else key
    if isinstance(key, tuple):
        items = [canonical_key(item) for item in key]
        if all(a is b for a, b in zip(items, key)):
            return key
        return type(key)(*items) if hasattr(key, "_fields") else tuple(items)  # a namedtuple stays one
    return key


def stable_hash(key: Any) -> int:
    """A hash that is the same in every process (``hash(str)`` is salted per process, and
    ``hash(None)`` and ``hash(nan)`` are addresses, different in each TaskExecutor process);
    every NaN hashes alike (see :func:`canonical_key`)."""
    if key is None:
        return 0
    if isinstance(key, float | complex | np.inexact) and key != key:
        return _NAN_HASH
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
