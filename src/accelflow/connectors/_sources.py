"""Built-in sources of records the job script holds: a collection (``from_collection``) and a
sequence of integers (``from_sequence``)."""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from typing import Any

from accelflow._errors import JobError
from accelflow.dataflow import CHUNK_RECORDS, Positions, RuntimeContext, Source, even_ranges


class CollectionSource(Positions, Source[Any]):
    """The records of a list, split into contiguous ranges ``(start, stop)`` of it."""

    def __init__(self, items: Sequence[Any]) -> None:
        self.items = list(items)

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return even_ranges(len(self.items), parallelism)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        return iter(self._records(split))

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        records = self._records(split)
        chunks = (records[start : start + CHUNK_RECORDS] for start in range(0, len(records), CHUNK_RECORDS))
        return self._positioned(split, chunks)

    def _records(self, split: Any) -> list[Any]:
        # a list: the records themselves, as splits were before accelflow kept ranges
        # (a checkpoint taken then still restores)
        return split if isinstance(split, list) else self.items[split[0] : split[1]]

    def first_position(self, split: Any) -> int:
        if isinstance(split, list):
            raise JobError("a collection source restored from a checkpoint that holds its records, "
                           "not their positions, cannot keep their order: run the job without "
                           "ordered=True, or start it afresh")
        return int(split[0])

    def size_hint(self) -> int:
        return len(self.items)

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        if isinstance(split, list):
            return split[records_read:]
        return (split[0] + records_read, split[1])


class SequenceSource(Positions, Source[int]):
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
        chunks = (list(range(start, min(start + CHUNK_RECORDS, stop)))
                  for start in range(first, stop, CHUNK_RECORDS))
        return self._positioned(split, chunks)

    def first_position(self, split: Any) -> int:
        return int(split[0] - self.start)

    def size_hint(self) -> int:
        return max(0, self.end - self.start + 1)

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])
