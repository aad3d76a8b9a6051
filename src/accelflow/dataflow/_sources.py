"""Built-in sources: collections, number sequences and NumPy arrays."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from accelflow.dataflow._context import RuntimeContext
from accelflow.dataflow._functions import Source
from accelflow.dataflow._chunks import CHUNK_RECORDS, Columns


def even_ranges(total: int, parts: int) -> list[tuple[int, int]]:
    """Split ``range(total)`` into ``parts`` contiguous, nearly equal ranges."""
    bounds = [total * i // parts for i in range(parts + 1)]
    return [(bounds[i], bounds[i + 1]) for i in range(parts)]


class CollectionSource(Source[Any]):
    """The records of a list, split into contiguous ranges."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [self.items[a:b] for a, b in even_ranges(len(self.items), parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        return iter(split)

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for start in range(0, len(split), CHUNK_RECORDS):
            yield split[start : start + CHUNK_RECORDS]

    def size_hint(self) -> int:
        return len(self.items)


class SequenceSource(Source[int]):
    """The integers ``start..end`` inclusive (as Flink's ``fromSequence``)."""

    def __init__(self, start: int, end: int) -> None:
        self.start, self.end = start, end

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [
            (self.start + a, self.start + b)
            for a, b in even_ranges(self.end - self.start + 1, parallelism)
        ]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        return iter(range(*split))

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        first, stop = split
        for start in range(first, stop, CHUNK_RECORDS):
            yield list(range(start, min(start + CHUNK_RECORDS, stop)))

    def size_hint(self) -> int:
        return max(0, self.end - self.start + 1)


class ArraySource(Source[Any]):
    """Rows of NumPy arrays (one array, or several as columns), shared through a memory-mapped
    ``.npy`` file so that large arrays are not pickled into every subtask."""

    def __init__(self, arrays: Sequence[np.ndarray[Any, Any]]) -> None:
        self.arrays: list[Any] = list(arrays)
        self.length = len(self.arrays[0])
        self.chunk_records = CHUNK_RECORDS

    def spill(self, directory: Path) -> None:
        """Write the arrays to ``directory`` so subtasks memory-map them."""
        paths = []
        for i, array in enumerate(self.arrays):
            if isinstance(array, str):
                paths.append(array)
                continue
            path = directory / f"array-{id(self)}-{i}.npy"
            np.save(path, np.ascontiguousarray(array))
            paths.append(str(path))
        self.arrays = paths

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return even_ranges(self.length, parallelism)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for chunk in self.read_chunks(split, ctx):
            yield from chunk if not isinstance(chunk, Columns) else chunk.rows()

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        arrays = [np.load(a, mmap_mode="r") if isinstance(a, str) else a for a in self.arrays]
        first, stop = split
        for start in range(first, stop, self.chunk_records):
            end = min(start + self.chunk_records, stop)
            parts = [np.array(a[start:end]) for a in arrays]
            yield parts[0] if len(parts) == 1 else Columns(parts)

    def size_hint(self) -> int:
        return self.length
