"""``IdxSource``: the IDX files of (Fashion-)MNIST as a bounded, splittable source (the
format itself is read by :mod:`accelflow.io`)."""

from __future__ import annotations

import os
from collections.abc import Iterator, Sequence
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow import CHUNK_RECORDS, Columns, Positions, RuntimeContext, Source
from accelflow.io import open_idx, open_labeled_pair, split_ranges


class IdxSource(Positions, Source[Any]):
    """Images (and optionally their labels) from IDX files, raw or gzip.

    Records are ``(image, label)`` tuples (or images alone), delivered as column chunks, so a
    ``map_batches`` downstream gets ``(images (N, 28, 28), labels (N,))`` without per-record
    work. Headers are checked when the source is built, so a foreign or truncated file fails
    at submission, naming the file.

    Args:
        images: path of the images file, e.g. ``t10k-images-idx3-ubyte.gz``.
        labels: path of the labels file, or ``None``.
        limit: read only the first ``limit`` records.
    """

    def __init__(self, images: str | os.PathLike[str], labels: str | os.PathLike[str] | None = None,
                 *, limit: int | None = None) -> None:
        if limit is not None and (isinstance(limit, bool) or not isinstance(limit, int) or limit < 1):
            raise ConfigError(f"expected a positive integer, got {limit!r}", key="IdxSource(limit=)")
        self.images, self.labels = os.fspath(images), labels and os.fspath(labels)
        if self.labels:
            with open_labeled_pair(self.images, self.labels) as pair:
                count = len(pair)
        else:
            with open_idx(self.images) as file:
                count = len(file)
        self.count = count if limit is None else min(limit, count)

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return split_ranges(self.count, parallelism)

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for chunk in self._chunks(split):
            yield from chunk.rows() if isinstance(chunk, Columns) else chunk

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        return self._positioned(split, self._chunks(split))

    def first_position(self, split: Any) -> int:
        return int(split[0])

    def _chunks(self, split: Any) -> Iterator[Any]:
        first, stop = split
        if self.labels:
            with open_labeled_pair(self.images, self.labels) as pair:
                for start in range(first, stop, CHUNK_RECORDS):
                    images, labels = pair.read_range(start, min(start + CHUNK_RECORDS, stop))
                    yield Columns((images, labels))
        else:
            with open_idx(self.images) as file:
                for start in range(first, stop, CHUNK_RECORDS):
                    yield file.read_range(start, min(start + CHUNK_RECORDS, stop))

    def size_hint(self) -> int:
        return self.count

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])
