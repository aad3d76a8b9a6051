"""Chunks: how records travel. A chunk is a list of records, a NumPy array whose rows are
records, or :class:`Columns` (a tuple of equally long arrays whose rows zip into records).

Operators work chunk by chunk, so per-record overhead stays in tight loops and vectorized
operators (``map_batches``) never pay for records one at a time.
"""

from __future__ import annotations

import time
from collections.abc import Iterable, Iterator, Sequence
from typing import Any

import numpy as np

CHUNK_RECORDS = 1024
CHUNK_LATENCY_S = 0.05


class Columns(tuple):  # type: ignore[type-arg]
    """Equally long arrays whose rows form records ``(col0[i], col1[i], ...)``."""

    __slots__ = ()

    def __new__(cls, columns: Iterable[Any]) -> Columns:
        cols = tuple(np.asarray(c) for c in columns)
        if not cols or len({len(c) for c in cols}) != 1:
            raise ValueError("Columns needs at least one column and equal lengths")
        return super().__new__(cls, cols)

    def __len__(self) -> int:  # number of records, not of columns
        return len(tuple.__getitem__(self, 0))

    def columns(self) -> tuple[np.ndarray[Any, Any], ...]:
        return tuple(tuple.__iter__(self))

    def rows(self) -> Iterator[tuple[Any, ...]]:
        return zip(*tuple.__iter__(self))

    def slice(self, start: int, stop: int) -> Columns:
        return Columns(c[start:stop] for c in self.columns())

    def __reduce__(self) -> tuple[Any, ...]:
        return (Columns, (self.columns(),))


def chunk_len(chunk: Any) -> int:
    return len(chunk)


def strided(chunk: Any, start: int, step: int) -> Any:
    """Records ``start, start + step, ...`` of ``chunk``, as a chunk of the same kind."""
    if isinstance(chunk, Columns):
        return Columns(c[start::step] for c in chunk.columns())
    return chunk[start::step]


def iter_records(chunk: Any) -> Iterator[Any]:
    if isinstance(chunk, Columns):
        return chunk.rows()
    return iter(chunk)


def group_records(
    records: Iterable[Any], size: int = CHUNK_RECORDS, latency_s: float = CHUNK_LATENCY_S
) -> Iterator[list[Any]]:
    """Group records into lists of ``size``, or fewer once ``latency_s`` has passed."""
    chunk: list[Any] = []
    started = time.monotonic()
    for record in records:
        if not chunk:
            started = time.monotonic()
        chunk.append(record)
        if len(chunk) >= size or time.monotonic() - started >= latency_s:
            yield chunk
            chunk = []
    if chunk:
        yield chunk


def to_batch(chunks: Sequence[Any]) -> Any:
    """Join chunks into the batch a ``map_batches`` function receives.

    NumPy rows give one array; :class:`Columns` (or lists of tuples) give a tuple of column
    arrays; lists of numbers or arrays give one array; anything else stays a list.
    """
    if all(isinstance(c, Columns) for c in chunks):
        columns = zip(*(c.columns() for c in chunks))
        return tuple(np.concatenate(cs) for cs in columns)
    if all(isinstance(c, np.ndarray) for c in chunks):
        return chunks[0] if len(chunks) == 1 else np.concatenate(chunks)
    records = [r for c in chunks for r in iter_records(c)]
    if records and all(isinstance(r, tuple) for r in records):
        width = len(records[0])
        if all(len(r) == width for r in records):
            return tuple(_array([r[i] for r in records]) for i in range(width))
    if records and all(isinstance(r, (int, float, np.generic, np.ndarray)) and not isinstance(r, bool) for r in records):
        return _array(records)
    return records


def _array(values: list[Any]) -> Any:
    try:
        return np.asarray(values) if not isinstance(values[0], np.ndarray) else np.stack(values)
    except ValueError:
        return values


def from_batch(result: Any, operator: str) -> Any:
    """Turn what a ``map_batches`` function returned into a chunk."""
    if isinstance(result, np.ndarray):
        return result if result.ndim > 0 else result.reshape(1)
    if isinstance(result, tuple) and result and all(isinstance(c, np.ndarray) for c in result):
        try:
            return Columns(result)
        except ValueError:
            raise TypeError(
                f"{operator}: map_batches returned columns of different lengths "
                f"{[len(c) for c in result]}"
            ) from None
    if isinstance(result, list):
        return result
    if result is None:
        return []
    raise TypeError(
        f"{operator}: map_batches must return a NumPy array, a tuple of arrays or a list, "
        f"got {type(result).__name__}"
    )
