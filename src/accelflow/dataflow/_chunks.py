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


class Positioned:
    """A chunk whose records carry their positions in the input, for
    ``execute_and_collect(ordered=True)``: ``data`` is the chunk (a list, an array or
    :class:`Columns`) and row *i* of ``positions`` (int64, one row per record) is record *i*'s
    position. A source row's position is ``[index]``; each ``flat_map`` adds the index of
    the output among its record's outputs (``[index, k]``), so comparing rows
    lexicographically gives the input's order, whichever subtasks the records went through.

    Operators call user functions with ``data`` only (a function never sees a position) and
    keep each output's position; the collected chunks are put in order at the end
    (:func:`in_order`).

    Example:
        >>> chunk = Positioned(np.array([[4], [5], [6]]), ["a", "b", "c"])
        >>> len(chunk), chunk[1:].data, chunk.kept([True, False, True]).positions.ravel().tolist()
        (3, ['b', 'c'], [4, 6])
        >>> chunk.expanded([["a1", "a2"], [], ["c1"]]).positions.tolist()
        [[4, 0], [4, 1], [6, 0]]
    """

    __slots__ = ("data", "positions")

    def __init__(self, positions: np.ndarray[Any, Any], data: Any) -> None:
        self.positions = positions
        self.data = data

    def __len__(self) -> int:
        return len(self.positions)

    def __getitem__(self, where: slice) -> Positioned:
        start, stop, _ = where.indices(len(self))
        data = self.data.slice(start, stop) if isinstance(self.data, Columns) else self.data[start:stop]
        return Positioned(self.positions[start:stop], data)

    def __reduce__(self) -> tuple[Any, ...]:
        return (Positioned, (self.positions, self.data))

    def kept(self, keep: Sequence[bool]) -> Positioned:
        """The records where ``keep`` is true (a filter's output: a list of records)."""
        records = [r for r, k in zip(iter_records(self.data), keep) if k]
        return Positioned(self.positions[np.fromiter(keep, bool, len(keep))], records)

    def expanded(self, outputs: Sequence[Sequence[Any]]) -> Positioned:
        """Each record's ``outputs`` (a flat_map's), each at its record's position followed
        by its index among them."""
        counts = np.fromiter((len(o) for o in outputs), np.int64, len(outputs))
        starts = np.cumsum(counts) - counts
        index = np.arange(int(counts.sum())) - np.repeat(starts, counts)
        positions = np.column_stack([np.repeat(self.positions, counts, axis=0), index])
        return Positioned(positions, [out for o in outputs for out in o])


def chunk_len(chunk: Any) -> int:
    return len(chunk)


def strided(chunk: Any, start: int, step: int) -> Any:
    """Records ``start, start + step, ...`` of ``chunk``, as a chunk of the same kind."""
    if isinstance(chunk, Positioned):
        return Positioned(chunk.positions[start::step], strided(chunk.data, start, step))
    if isinstance(chunk, Columns):
        return Columns(c[start::step] for c in chunk.columns())
    return chunk[start::step]


def iter_records(chunk: Any) -> Iterator[Any]:
    """The records of ``chunk`` (of a :class:`Positioned` chunk, without their positions)."""
    if isinstance(chunk, Positioned):
        return iter_records(chunk.data)
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
