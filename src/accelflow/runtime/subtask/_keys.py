"""Keys as every process sees them alike: NaN keys are one key (:func:`canonical_key`) and
hash the same everywhere (:func:`stable_hash`), the basis of key groups
(:mod:`._keygroups`) and of hash partitioning."""

from __future__ import annotations

import zlib
from typing import Any

import numpy as np


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
    every NaN hashes alike (see :func:`canonical_key`). Equal numbers of every type hash alike
    (``-1``, ``-1.0`` and ``np.int64(-1)``: -1), so keys that are one key by ``==`` meet in one
    key group."""
    if key is None:
        return 0
    if isinstance(key, float | complex | np.inexact) and key != key:
        return _NAN_HASH
    if isinstance(key, bool | int | np.integer):
        return int(key)  # as Flink's Integer and Long keys, whose key groups tests/eventtime checks
    if isinstance(key, float | np.floating) and float(key).is_integer():
        return int(key)  # a whole float is its int's key: 1.0 == 1, -1.0 == -1
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
