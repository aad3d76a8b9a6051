"""``ArraySource``: the rows of NumPy arrays the job script holds (``from_collection(array)``).

It only describes the rows and their splits. How its arrays reach the subtasks without being
pickled into each (read straight out of the client's memory, a shared-memory copy, Ray's
object store) is the runtime's business: the runtime makes a copy of the source with
:meth:`ArraySource.with_arrays` whose arrays are :class:`~accelflow.dataflow.SharedRows`
handles, and sends the subtasks that copy.
"""

from __future__ import annotations

import copy
from collections.abc import Callable, Iterator, Sequence
from typing import Any

import numpy as np

from accelflow.dataflow import CHUNK_RECORDS, Columns, Positions, RuntimeContext, SharedRows, Source, even_ranges


class ArraySource(Positions, Source[Any]):
    """Rows of NumPy arrays: one array, or several of equal length as columns (each record a
    tuple of their rows, read as :class:`~accelflow.dataflow.Columns` chunks).

    Example:
        >>> source = ArraySource([np.arange(5), np.arange(5) * 10])
        >>> [[(int(a), int(b)) for a, b in chunk.rows()]
        ...  for split in source.create_splits(2) for chunk in source.read_chunks(split, None)]
        [[(0, 0), (1, 10)], [(2, 20), (3, 30), (4, 40)]]
    """

    def __init__(self, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
        self.arrays: list[Any] = list(arrays)
        self.length = len(self.arrays[0])
        self.chunk_records = CHUNK_RECORDS

    def with_arrays(self, arrays: Sequence[Any]) -> ArraySource:
        """A copy of this source reading ``arrays`` (the same rows, e.g. as
        :class:`SharedRows` handles) instead of its own."""
        twin = copy.copy(self)
        twin.arrays = list(arrays)
        return twin

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return even_ranges(self.length, parallelism)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for chunk in self._chunks(split):
            yield from chunk if not isinstance(chunk, Columns) else chunk.rows()

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        return self._positioned(split, self._chunks(split))

    def _chunks(self, split: Any) -> Iterator[Any]:
        readers = [_rows_reader(a) for a in self.arrays]
        first, stop = split
        for start in range(first, stop, self.chunk_records):
            end = min(start + self.chunk_records, stop)
            parts = [read(start, end) for read in readers]
            yield parts[0] if len(parts) == 1 else Columns(parts)

    def first_position(self, split: Any) -> int:
        return int(split[0])

    def size_hint(self) -> int:
        return self.length

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])


def _rows_reader(array: Any) -> Callable[[int, int], Any]:
    """``read(start, stop)``: rows of one array of a source as a subtask reads them."""
    if isinstance(array, SharedRows):
        return array.reader()
    if isinstance(array, np.ndarray):  # pickled to this process: copies, a record its own value
        return lambda start, stop: np.array(array[start:stop])
    return lambda start, stop: array[start:stop]  # anything else that slices
