"""Lazily read IDX files: ranges of items without loading the whole file, for split sources.

How ranges are read:

* **Raw files**: ``seek`` + ``readinto`` of exactly the requested bytes. Cost and memory are
  proportional to the range, so N parallel readers of N splits each touch only their part.
  (Chosen over ``numpy.memmap``: no mapping kept alive, nothing to unmap, works for 0-length
  data, and the OS page cache already makes repeated reads cheap.)
* **Gzip files**: gzip cannot seek, so the file is *streamed*: one decompressor is kept open and
  moved forward to the requested range (``GzipFile.seek`` decompresses and discards the bytes in
  between; a backward jump restarts from the beginning). Memory stays proportional to the range,
  not the file; a reader of the split ``[start, stop)`` pays decompression of the first ``stop``
  items once, and consecutive batches in increasing order cost nothing extra. For Fashion-MNIST
  (26 MB compressed) a full pass takes well under a second, so we do not keep decompressed
  copies in memory or on disk.

An :class:`IdxFile` can be pickled (e.g. shipped to a TaskExecutor): the open handle is not
part of its state and is reopened on the first read after unpickling. It is not thread-safe:
give each reader thread its own (``open_idx`` again, or ``copy.copy``).
"""

from __future__ import annotations

import gzip
import io
import os
from pathlib import Path
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from accelflow.io._idx import (
    IdxHeader,
    check_data_length,
    read_header_from,
    read_idx_header,
    read_items,
)
from accelflow.io._streams import PathLike, count_remaining, open_stream, translate_errors


def split_ranges(count: int, parts: int) -> list[tuple[int, int]]:
    """Cut ``range(count)`` into ``parts`` contiguous ``(start, stop)`` ranges.

    Sizes differ by at most one, earlier ranges being the longer; when ``parts > count`` the
    last ranges are empty, so subtask ``i`` of ``parts`` can always take ``result[i]``.

    Raises:
        ValueError: ``count < 0`` or ``parts < 1``.

    Example:
        >>> split_ranges(10, 3)
        [(0, 4), (4, 7), (7, 10)]
    """
    if count < 0:
        raise ValueError(f"count must be >= 0, got {count}")
    if parts < 1:
        raise ValueError(f"parts must be >= 1, got {parts}")
    base, extra = divmod(count, parts)
    ranges, start = [], 0
    for index in range(parts):
        stop = start + base + (1 if index < extra else 0)
        ranges.append((start, stop))
        start = stop
    return ranges


class IdxFile:
    """An IDX file (raw or gzip) whose items are read on demand by range.

    Build it with :func:`open_idx`. Use it as a context manager or call :meth:`close`.

    Attributes:
        path: the file.
        header: its validated header.

    Example:
        >>> with open_idx("train-images-idx3-ubyte.gz") as images:
        ...     start, stop = images.splits(4)[1]  # subtask 1 of 4
        ...     batch = images.read_range(start, min(start + 256, stop))
        >>> len(images), images.shape, batch.shape
        (60000, (60000, 28, 28), (256, 28, 28))
    """

    def __init__(self, path: Path, header: IdxHeader) -> None:
        self.path = path
        self.header = header
        self._handle: io.BufferedIOBase | None = None

    @property
    def shape(self) -> tuple[int, ...]:
        """The full shape, e.g. ``(60000, 28, 28)``."""
        return self.header.shape

    @property
    def dtype(self) -> np.dtype[np.generic]:
        """The native dtype items are returned as, e.g. ``uint8``."""
        return self.header.dtype

    def __len__(self) -> int:
        return self.header.count

    def splits(self, parts: int) -> list[tuple[int, int]]:
        """The ``(start, stop)`` ranges of ``parts`` parallel readers; see :func:`split_ranges`."""
        return split_ranges(len(self), parts)

    def read_range(self, start: int, stop: int) -> npt.NDArray[np.generic]:
        """Read items ``start`` (inclusive) to ``stop`` (exclusive) along the first dimension.

        Args:
            start: first item, ``0 <= start <= stop``.
            stop: one past the last item, ``stop <= len(self)``.

        Returns:
            A new native-endian array of shape ``(stop - start, *shape[1:])``.

        Raises:
            IndexError: the range is not within ``[0, len(self)]`` or ``start > stop``.
            DataFormatError: the file is shorter than its header says (e.g. it was
                truncated after opening) or its gzip stream is corrupt.
        """
        if not 0 <= start <= stop <= len(self):
            raise IndexError(
                f"{self.path}: range [{start}, {stop}) is not within the file's "
                f"{len(self)} items; need 0 <= start <= stop <= {len(self)}"
            )
        handle = self._open()
        with translate_errors(self.path):
            handle.seek(self.header.data_offset + start * self.header.item_nbytes)
            return read_items(handle, self.header, stop - start, self.path)

    def verify(self) -> None:
        """Check the whole file's data length (and gzip CRC) by streaming through it once.

        Needed only for gzip files, whose length :func:`open_idx` cannot check without
        decompressing; constant memory.

        Raises:
            DataFormatError: the data is truncated, followed by extra bytes, or corrupt.
        """
        stream, compressed = open_stream(self.path)
        with stream, translate_errors(self.path):
            header = read_header_from(stream, self.path, compressed=compressed)
            check_data_length(header, count_remaining(stream), self.path)

    def close(self) -> None:
        """Close the open handle, if any; a later read reopens it."""
        if self._handle is not None:
            self._handle.close()
            self._handle = None

    def __enter__(self) -> IdxFile:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def __getstate__(self) -> dict[str, Any]:
        return {"path": self.path, "header": self.header}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.path = state["path"]
        self.header = state["header"]
        self._handle = None

    def __copy__(self) -> IdxFile:
        return IdxFile(self.path, self.header)

    def __repr__(self) -> str:
        return f"IdxFile({str(self.path)!r}, {self.header.describe()})"

    def _open(self) -> io.BufferedIOBase:
        if self._handle is None:
            with translate_errors(self.path):
                if self.header.compressed:
                    self._handle = gzip.open(self.path, "rb")
                else:
                    self._handle = open(self.path, "rb")
        return self._handle


def open_idx(path: PathLike) -> IdxFile:
    """Open an IDX file for ranged reads, validating its header now.

    A raw file's length is checked now; a gzip file's when read (or with
    :meth:`IdxFile.verify`). Nothing else is read until :meth:`IdxFile.read_range`.

    Args:
        path: the IDX file, raw or gzip.

    Raises:
        DataFormatError: the file is missing, foreign, or its header (raw: or length) is bad.

    Example:
        >>> labels = open_idx("t10k-labels-idx1-ubyte.gz")
        >>> labels.read_range(0, 3)
        array([9, 2, 1], dtype=uint8)
    """
    return IdxFile(Path(os.fspath(path)), read_idx_header(path))


__all__ = ["IdxFile", "open_idx", "split_ranges"]
