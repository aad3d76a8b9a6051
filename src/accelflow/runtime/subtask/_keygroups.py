"""Key groups, as Flink's ``KeyGroupRangeAssignment``: keyed state and timers are kept per key
group, the unit that moves between subtasks on rescale.

A key's group is ``murmur(stable_hash(key)) % max_parallelism`` (Flink mixes Java's
``hashCode`` the same way, so an int key in Java's int range gets Flink's own group), and
subtask ``i`` of ``p`` owns the contiguous range of groups whose ``group * p //
max_parallelism == i``. Routing a record by :func:`subtask_for_key` (phase 2's hash
partitioner) therefore sends it to the subtask that holds its state at any parallelism;
every NaN key is one key (:func:`~accelflow.runtime.subtask._partition.stable_hash`).

Example:
    >>> key_group_of(42, 128), subtask_for_key(42, parallelism=2)
    (29, 0)
    >>> key_group_range(128, 2, 1)
    KeyGroupRange(start=64, end=127)
"""

from __future__ import annotations

from typing import Any, NamedTuple

from accelflow.dataflow import DEFAULT_MAX_PARALLELISM, default_max_parallelism
from accelflow.runtime.subtask._keys import stable_hash

_M32 = 0xFFFFFFFF


def _rotl32(x: int, r: int) -> int:
    return ((x << r) | (x >> (32 - r))) & _M32


def _java_int(h: int) -> int:
    """``h`` as Java's ``hashCode()`` of an int/long would be (folded to 32 bits)."""
    if -(2**31) <= h < 2**31:
        return h & _M32
    h &= 0xFFFFFFFFFFFFFFFF  # Long.hashCode: (int)(value ^ (value >>> 32))
    return (h ^ (h >> 32)) & _M32


def murmur_hash(code: int) -> int:
    """Flink's ``MathUtils.murmurHash(int)``: a non-negative int mixing ``code``'s bits."""
    code = (code * 0xCC9E2D51) & _M32
    code = _rotl32(code, 15)
    code = (code * 0x1B873593) & _M32
    code = _rotl32(code, 13)
    code = (code * 5 + 0xE6546B64) & _M32
    code ^= 4
    code ^= code >> 16
    code = (code * 0x85EBCA6B) & _M32
    code ^= code >> 13
    code = (code * 0xC2B2AE35) & _M32
    code ^= code >> 16
    signed = code - (1 << 32) if code & 0x80000000 else code
    if signed >= 0:
        return signed
    return -signed if signed != -(2**31) else 0


def key_group_of(key: Any, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> int:
    """The key group of ``key`` (``assignToKeyGroup``)."""
    return murmur_hash(_java_int(stable_hash(key))) % max_parallelism


def operator_index_for_key_group(max_parallelism: int, parallelism: int, key_group: int) -> int:
    """The subtask that owns ``key_group`` (``computeOperatorIndexForKeyGroup``)."""
    return key_group * parallelism // max_parallelism


def subtask_for_key(key: Any, parallelism: int, max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> int:
    """The subtask a keyed record goes to: the owner of its key group."""
    return operator_index_for_key_group(max_parallelism, parallelism, key_group_of(key, max_parallelism))


class KeyGroupRange(NamedTuple):
    """Key groups ``start..end``, both inclusive (empty when ``end < start``)."""

    start: int
    end: int

    def __contains__(self, key_group: object) -> bool:
        return isinstance(key_group, int) and self.start <= key_group <= self.end

    def __len__(self) -> int:
        return max(0, self.end - self.start + 1)

    def __iter__(self) -> Any:
        return iter(range(self.start, self.end + 1))

    @staticmethod
    def all(max_parallelism: int = DEFAULT_MAX_PARALLELISM) -> KeyGroupRange:
        return KeyGroupRange(0, max_parallelism - 1)


def key_group_range(max_parallelism: int, parallelism: int, index: int) -> KeyGroupRange:
    """The key groups subtask ``index`` of ``parallelism`` owns
    (``computeKeyGroupRangeForOperatorIndex``)."""
    if not 0 < parallelism <= max_parallelism:
        raise ValueError(f"parallelism {parallelism} must be from 1 to the max parallelism {max_parallelism}")
    start = (index * max_parallelism + parallelism - 1) // parallelism
    end = ((index + 1) * max_parallelism - 1) // parallelism
    return KeyGroupRange(start, end)


__all__ = [
    "DEFAULT_MAX_PARALLELISM", "KeyGroupRange", "default_max_parallelism", "key_group_of",
    "key_group_range", "murmur_hash", "operator_index_for_key_group", "subtask_for_key",
]
