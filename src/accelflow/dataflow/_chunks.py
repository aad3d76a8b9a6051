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

from accelflow.dataflow._time import MIN_TIMESTAMP

CHUNK_RECORDS = 1024
#: ``execution.buffer-timeout``'s default (Flink's 100 ms), in seconds
CHUNK_LATENCY_S = 0.1


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


class Annotated:
    """A chunk whose records carry an int64 row each beside them: ``data`` is the chunk (a
    list, an array, :class:`Columns`, or another annotated chunk) and row *i* of ``rows`` is
    record *i*'s. Operators call user functions with the records only and keep each
    output's row; what the rows mean is the subclass's: :class:`Positioned` (positions in
    the input) and :class:`Timestamped` (event timestamps). A timestamped chunk wraps a
    positioned one, never the other way round.

    Example:
        >>> chunk = Timestamped(np.array([10, 20, 30]), Positioned(np.array([[4], [5], [6]]), ["a", "b", "c"]))
        >>> part = chunk[1:]
        >>> part.timestamps.tolist(), part.data.positions.ravel().tolist(), list(iter_records(part))
        ([20, 30], [5, 6], ['b', 'c'])
        >>> chunk.with_data(["A", "B", "C"]).data.data
        ['A', 'B', 'C']
    """

    __slots__ = ("data", "rows")

    def __init__(self, rows: np.ndarray[Any, Any], data: Any) -> None:
        self.rows = rows
        self.data = data

    def __len__(self) -> int:
        return len(self.rows)

    def __iter__(self) -> Iterator[Any]:
        return iter_records(self.data)

    def __getitem__(self, where: slice) -> Any:
        start, stop, _ = where.indices(len(self))
        data = self.data.slice(start, stop) if isinstance(self.data, Columns) else self.data[start:stop]
        return self._like(self.rows[start:stop], data)

    def _like(self, rows: np.ndarray[Any, Any], data: Any) -> Any:
        """A chunk of this kind with ``rows`` and ``data`` (a subclass keeps its other fields)."""
        return type(self)(rows, data)

    def __reduce__(self) -> tuple[Any, ...]:
        return (type(self), (self.rows, self.data))

    def with_data(self, records: Any) -> Any:
        """The same annotations around ``records``: one output per record, in order."""
        inner = self.data.with_data(records) if isinstance(self.data, Annotated) else records
        return self._like(self.rows, inner)

    def stripped(self) -> Any:
        """The records without any annotation (a list, an array or :class:`Columns`)."""
        return self.data.stripped() if isinstance(self.data, Annotated) else self.data

    def kept(self, keep: Sequence[bool]) -> Any:
        """The records where ``keep`` is true (a filter's output: a list of records)."""
        mask = np.fromiter(keep, bool, len(keep))
        if isinstance(self.data, Annotated):
            return self._like(self.rows[mask], self.data.kept(keep))
        return self._like(self.rows[mask], [r for r, k in zip(iter_records(self.data), keep) if k])

    def expanded(self, outputs: Sequence[Sequence[Any]]) -> Any:
        """Each record's ``outputs`` (a flat_map's), each with its record's row (see
        :meth:`_expanded_rows`)."""
        counts = np.fromiter((len(o) for o in outputs), np.int64, len(outputs))
        inner = self.data.expanded(outputs) if isinstance(self.data, Annotated) else [out for o in outputs for out in o]
        return self._like(self._expanded_rows(counts), inner)

    def _expanded_rows(self, counts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        return np.repeat(self.rows, counts, axis=0)


class Positioned(Annotated):
    """A chunk whose records carry their positions in the input, for
    ``execute_and_collect(ordered=True)``: row *i* of ``positions`` (int64) is record *i*'s
    position. A source row's position is ``[index]``; each ``flat_map`` adds the index of
    the output among its record's outputs (``[index, k]``), so comparing rows
    lexicographically gives the input's order, whichever subtasks the records went through.
    The collected chunks are put in order at the end (:func:`in_order`).

    Example:
        >>> chunk = Positioned(np.array([[4], [5], [6]]), ["a", "b", "c"])
        >>> len(chunk), chunk[1:].data, chunk.kept([True, False, True]).positions.ravel().tolist()
        (3, ['b', 'c'], [4, 6])
        >>> chunk.expanded([["a1", "a2"], [], ["c1"]]).positions.tolist()
        [[4, 0], [4, 1], [6, 0]]
    """

    __slots__ = ()

    @property
    def positions(self) -> np.ndarray[Any, Any]:
        return self.rows

    def _expanded_rows(self, counts: np.ndarray[Any, Any]) -> np.ndarray[Any, Any]:
        starts = np.cumsum(counts) - counts
        index = np.arange(int(counts.sum())) - np.repeat(starts, counts)
        return np.column_stack([np.repeat(self.rows, counts, axis=0), index])


class Timestamped(Annotated):
    """A chunk whose records carry their event timestamps (epoch ms, int64; ``MIN_TIMESTAMP``
    for a record without one): made by ``assign_timestamps_and_watermarks``, a Kafka source
    (the records' own timestamps) and the event-time operators; ``map``, ``filter`` and
    ``flat_map`` keep each record's timestamp for its outputs, as in Flink.

    Example:
        >>> stamped([("a", 1), ("b", 2)], [1000, None]).timestamps.tolist() == [1000, MIN_TIMESTAMP]
        True
    """

    __slots__ = ()

    @property
    def timestamps(self) -> np.ndarray[Any, Any]:
        return self.rows


def stamped(records: Any, timestamps: Sequence[int | None] | np.ndarray[Any, Any]) -> Timestamped:
    """``records`` with ``timestamps`` (``None``: no timestamp) as a :class:`Timestamped` chunk;
    ``records`` may be positioned (its positions are kept)."""
    if isinstance(records, Timestamped):
        records = records.data
    if isinstance(timestamps, np.ndarray):
        return Timestamped(timestamps.astype(np.int64, copy=False), records)
    rows = np.fromiter((MIN_TIMESTAMP if t is None else t for t in timestamps), np.int64, len(timestamps))
    return Timestamped(rows, records)


class SplitTagged(Annotated):
    """A source's chunk whose records say which of the source's splits (e.g. Kafka
    partitions) they come from, for per-split watermarks (Flink's ``SourceOutput`` per
    split): ``splits`` are every split the reader reads now (also those without a record in
    this chunk), row *i* (int64) is the index in ``splits`` of record *i*'s. Only the
    ``WatermarkStrategy`` of ``from_source`` reads it; the runner strips it everywhere else.

    Example:
        >>> chunk = split_tagged(stamped(["x", "y", "z"], [5, 9, 7]), [0, 1, 0], ("p0", "p1"))
        >>> part = chunk[1:]
        >>> part.rows.tolist(), part.splits, part.data.timestamps.tolist()
        ([1, 0], ('p0', 'p1'), [9, 7])
    """

    __slots__ = ("splits",)

    def __init__(self, rows: np.ndarray[Any, Any], data: Any, splits: tuple[Any, ...] = ()) -> None:
        super().__init__(rows, data)
        self.splits = splits

    def _like(self, rows: np.ndarray[Any, Any], data: Any) -> Any:
        return SplitTagged(rows, data, self.splits)

    def __reduce__(self) -> tuple[Any, ...]:
        return (SplitTagged, (self.rows, self.data, self.splits))


def split_tagged(chunk: Any, indices: Sequence[int], splits: Sequence[Any]) -> SplitTagged:
    """``chunk`` (a source's, maybe :func:`stamped`) as a :class:`SplitTagged` chunk: record
    *i* comes from split ``splits[indices[i]]``; ``splits``: all those being read."""
    return SplitTagged(np.fromiter(indices, np.int64, len(indices)), chunk, tuple(splits))


def untagged(chunk: Any) -> Any:
    """``chunk`` without its splits (what every operator but the source's watermark
    generator gets)."""
    return chunk.data if isinstance(chunk, SplitTagged) else chunk


def timestamps_of(chunk: Any) -> list[int | None] | None:
    """The event timestamps of ``chunk``'s records (``None`` for a record without one), or
    ``None`` when its records have none."""
    if not isinstance(chunk, Timestamped):
        return None
    return [None if t == MIN_TIMESTAMP else t for t in chunk.rows.tolist()]


def unstamped(chunk: Any) -> Any:
    """``chunk`` without its timestamps (what sinks and ``collect`` get)."""
    return chunk.data if isinstance(chunk, Timestamped) else chunk


def chunk_len(chunk: Any) -> int:
    return len(chunk)


def strided(chunk: Any, start: int, step: int) -> Any:
    """Records ``start, start + step, ...`` of ``chunk``, as a chunk of the same kind."""
    if isinstance(chunk, Annotated):
        return type(chunk)(chunk.rows[start::step], strided(chunk.data, start, step))
    if isinstance(chunk, Columns):
        return Columns(c[start::step] for c in chunk.columns())
    return chunk[start::step]


def select(chunk: Any, indices: Sequence[int]) -> Any:
    """Records ``indices`` of ``chunk`` (in that order), as a chunk of the same kind.

    Example:
        >>> select(stamped(["a", "b", "c"], [1, 2, 3]), [2, 0]).timestamps.tolist()
        [3, 1]
    """
    if isinstance(chunk, Annotated):
        return type(chunk)(chunk.rows[np.asarray(indices, dtype=np.intp)], select(chunk.data, indices))
    if isinstance(chunk, Columns):
        where = np.asarray(indices, dtype=np.intp)
        return Columns(c[where] for c in chunk.columns())
    if isinstance(chunk, np.ndarray):
        return chunk[np.asarray(indices, dtype=np.intp)]
    records = chunk if isinstance(chunk, list) else list(iter_records(chunk))
    return [records[i] for i in indices]


def iter_records(chunk: Any) -> Iterator[Any]:
    """The records of ``chunk`` (of an :class:`Annotated` chunk, without their rows)."""
    if isinstance(chunk, Annotated):
        return iter_records(chunk.data)
    if isinstance(chunk, Columns):
        return chunk.rows()
    return iter(chunk)


def group_records(
    records: Iterable[Any], size: int = CHUNK_RECORDS, latency_s: float = CHUNK_LATENCY_S
) -> Iterator[list[Any]]:
    """Group records into lists of ``size`` (``execution.buffer-timeout``'s rules): a chunk
    also goes once its first record has waited ``latency_s`` (0: every record goes at once;
    -1: only full chunks), and at once when the records come one at a time with pauses
    between them (a record that took the source :data:`PAUSE_S` or more to give: the
    source is idle, nothing is gained by waiting for the next one).

    Example:
        >>> [len(c) for c in group_records(range(5), size=2)], [len(c) for c in group_records(range(3), latency_s=0)]
        ([2, 2, 1], [1, 1, 1])
    """
    chunk: list[Any] = []
    started = 0.0
    records = iter(records)
    while True:
        asked = time.monotonic()
        try:
            record = next(records)
        except StopIteration:
            break
        now = time.monotonic()
        if not chunk:
            started = now
        chunk.append(record)
        if len(chunk) >= size or (latency_s >= 0 and (now - started >= latency_s or now - asked >= PAUSE_S)):
            yield chunk
            chunk = []
    if chunk:
        yield chunk


#: a record that took the source this long to give was preceded by a pause (see group_records)
PAUSE_S = 0.001


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
