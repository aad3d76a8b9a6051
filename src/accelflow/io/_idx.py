"""The IDX file format of MNIST and Fashion-MNIST: header parsing, validation and whole-file reads.

Layout (all integers big-endian)::

    byte 0-1   0x00 0x00
    byte 2     type code: 0x08 uint8, 0x09 int8, 0x0B int16, 0x0C int32, 0x0D float32,
               0x0E float64
    byte 3     number of dimensions n (>= 1)
    4 .. 4n+3  n uint32 dimension sizes
    then       prod(sizes) items of the type, row-major, big-endian

The file may be gzip-compressed (detected by content). Every check names the file and says
what is wrong, how many bytes were expected and how many were found.
"""

from __future__ import annotations

import io
import math
import os
import struct
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from accelflow._errors import DataFormatError
from accelflow.io._streams import (
    PathLike,
    count_remaining,
    describe_content,
    open_stream,
    read_upto,
    translate_errors,
)

IDX_TYPE_CODES: dict[int, np.dtype[np.generic]] = {
    0x08: np.dtype(np.uint8),
    0x09: np.dtype(np.int8),
    0x0B: np.dtype(np.int16),
    0x0C: np.dtype(np.int32),
    0x0D: np.dtype(np.float32),
    0x0E: np.dtype(np.float64),
}
"""IDX type code (byte 2 of the magic) -> the native NumPy dtype it is read as."""

_KNOWN_CODES = ", ".join(f"0x{code:02X} ({dt.name})" for code, dt in IDX_TYPE_CODES.items())


@dataclass(frozen=True, slots=True, kw_only=True)
class IdxHeader:
    """The parsed header of an IDX file.

    Attributes:
        dtype: the native-endian dtype the items are read as, e.g. ``uint8``.
        shape: the dimension sizes, e.g. ``(60000, 28, 28)``.
        data_offset: where the data starts in the (decompressed) content: ``4 + 4 * ndim``.
        compressed: whether the file on disk is gzip-compressed.

    Example:
        >>> read_idx_header("t10k-images-idx3-ubyte.gz")
        IdxHeader(dtype=dtype('uint8'), shape=(10000, 28, 28), data_offset=16, compressed=True)
    """

    dtype: np.dtype[np.generic]
    shape: tuple[int, ...]
    data_offset: int
    compressed: bool = False

    @property
    def type_code(self) -> int:
        """The IDX type code, e.g. ``0x08`` for uint8."""
        return next(code for code, dt in IDX_TYPE_CODES.items() if dt == self.dtype)

    @property
    def count(self) -> int:
        """The number of items along the first dimension (images, labels, ...)."""
        return self.shape[0]

    @property
    def item_shape(self) -> tuple[int, ...]:
        """The shape of one item, e.g. ``(28, 28)`` for an image; ``()`` for a label."""
        return self.shape[1:]

    @property
    def item_nbytes(self) -> int:
        """Bytes per item (one row along the first dimension)."""
        return math.prod(self.item_shape) * self.dtype.itemsize

    @property
    def data_nbytes(self) -> int:
        """Bytes of data the header declares."""
        return self.count * self.item_nbytes

    def describe(self) -> str:
        """A short human text, e.g. ``60000x28x28 uint8``."""
        return f"{'x'.join(map(str, self.shape))} {self.dtype.name}"


def read_idx_header(path: PathLike) -> IdxHeader:
    """Read and validate the header of an IDX file (raw or gzip).

    For a raw file the file length is checked too (cheap: one ``stat``). A gzip file's data
    length can only be known by decompressing it, so it is checked when the data is read
    (:func:`read_idx`, :meth:`IdxFile.verify`).

    Args:
        path: the IDX file, e.g. ``/usr/share/datasets/fashion-mnist/t10k-labels-idx1-ubyte.gz``.

    Returns:
        The header.

    Raises:
        DataFormatError: the file is missing, empty, foreign, has a bad magic number, a
            truncated header, or (raw files) a data length that does not match the header.

    Example:
        >>> read_idx_header("t10k-labels-idx1-ubyte").shape
        (10000,)
    """
    stream, compressed = open_stream(path)
    with stream, translate_errors(path):
        header = read_header_from(stream, path, compressed=compressed)
    if not compressed:
        check_data_length(header, os.path.getsize(path) - header.data_offset, path)
    return header


def read_idx(path: PathLike, *, limit: int | None = None) -> npt.NDArray[np.generic]:
    """Read a whole IDX file (raw or gzip) into a native-endian array of its dtype and shape.

    Args:
        path: the IDX file.
        limit: read only the first ``limit`` items along the first dimension (all when
            ``None`` or larger than the count). The length of a raw file is still checked;
            the unread tail of a gzip file is not.

    Returns:
        A writable array, e.g. ``uint8`` of shape ``(10000, 28, 28)`` for an images file.

    Raises:
        DataFormatError: anything wrong with the file; the message names it and the problem.
        ValueError: ``limit`` is negative.

    Example:
        >>> labels = read_idx("t10k-labels-idx1-ubyte.gz", limit=5)
        >>> labels.shape, labels.dtype
        ((5,), dtype('uint8'))
    """
    if limit is not None and limit < 0:
        raise ValueError(f"limit must be None or >= 0, got {limit}")
    stream, compressed = open_stream(path)
    with stream, translate_errors(path):
        header = read_header_from(stream, path, compressed=compressed)
        if not compressed:
            check_data_length(header, os.path.getsize(path) - header.data_offset, path)
        count = header.count if limit is None else min(limit, header.count)
        array = read_items(stream, header, count, path)
        if compressed and count == header.count:
            check_data_length(header, header.data_nbytes + count_remaining(stream), path)
    return array


def read_header_from(stream: io.BufferedIOBase, path: PathLike, *, compressed: bool) -> IdxHeader:
    """Parse the header at the start of ``stream``, leaving it positioned at the data."""
    magic = stream.read(4)
    dtype, ndim = _parse_magic(magic, stream, path, compressed=compressed)
    dims_bytes = stream.read(4 * ndim)
    if len(dims_bytes) < 4 * ndim:
        raise DataFormatError(
            f"IDX header truncated: the magic declares {ndim} dimensions, which need "
            f"{4 + 4 * ndim} header bytes, but the {_content(compressed)} has only "
            f"{4 + len(dims_bytes)} bytes",
            path=os.fspath(path),
        )
    shape = struct.unpack(f">{ndim}I", dims_bytes)
    return IdxHeader(dtype=dtype, shape=shape, data_offset=4 + 4 * ndim, compressed=compressed)


def read_items(
    stream: io.BufferedIOBase, header: IdxHeader, count: int, path: PathLike
) -> npt.NDArray[np.generic]:
    """Read ``count`` items from ``stream`` (positioned at an item boundary) as native dtype."""
    nbytes = count * header.item_nbytes
    buffer = read_upto(stream, nbytes)
    if len(buffer) < nbytes:
        raise DataFormatError(
            f"IDX data truncated: ended {nbytes - len(buffer)} bytes early while reading "
            f"{count} items of {header.describe()} ({nbytes} bytes expected, "
            f"{len(buffer)} found); fetch the file again",
            path=os.fspath(path),
        )
    array = np.frombuffer(buffer, dtype=header.dtype).reshape((count, *header.item_shape))
    if header.dtype.itemsize > 1 and np.little_endian:
        array.byteswap(inplace=True)  # IDX is big-endian on disk
    return array


def check_data_length(header: IdxHeader, found: int, path: PathLike) -> None:
    """Check that the data after the header is exactly as long as the header declares.

    Args:
        header: the parsed header.
        found: the number of data bytes after the header.
        path: the file, for the message.

    Raises:
        DataFormatError: the data is truncated or followed by extra bytes.
    """
    expected = header.data_nbytes
    where = _content(header.compressed)
    if found < expected:
        raise DataFormatError(
            f"IDX data truncated: the header declares {header.describe()}, which needs "
            f"{expected} data bytes after the {header.data_offset}-byte header, but the "
            f"{where} has {found} ({expected - found} missing); the file was cut short, "
            "fetch it again",
            path=os.fspath(path),
        )
    if found > expected:
        raise DataFormatError(
            f"{found - expected} unexpected trailing bytes: the header declares "
            f"{header.describe()}, which is {expected} data bytes after the "
            f"{header.data_offset}-byte header, but the {where} has {found}; the header's "
            "dimensions are wrong or something was appended to the file",
            path=os.fspath(path),
        )


def _parse_magic(
    magic: bytes, stream: io.BufferedIOBase, path: PathLike, *, compressed: bool
) -> tuple[np.dtype[np.generic], int]:
    name = os.fspath(path)
    if not magic:
        raise DataFormatError(
            f"the {_content(compressed)} is empty (0 bytes); expected an IDX file, which "
            "starts with the 4-byte magic 00 00 <type code> <number of dimensions>",
            path=name,
        )
    if magic[:2] != b"\x00\x00"[: len(magic[:2])]:
        head = magic + stream.read(28)
        raise DataFormatError(
            f"not an IDX file: the {_content(compressed)} looks like {describe_content(head)}; "
            "an IDX file starts with two zero bytes (magic 00 00 <type code> <dimensions>)",
            path=name,
        )
    if len(magic) < 4:
        raise DataFormatError(
            f"IDX header truncated: the {_content(compressed)} has only {len(magic)} bytes, "
            "but the magic number alone needs 4",
            path=name,
        )
    if magic[2] not in IDX_TYPE_CODES:
        raise DataFormatError(
            f"bad IDX magic {magic.hex(' ')}: unknown type code 0x{magic[2]:02X} in byte 3; "
            f"known codes are {_KNOWN_CODES}",
            path=name,
        )
    if magic[3] == 0:
        raise DataFormatError(
            f"bad IDX magic {magic.hex(' ')}: the number of dimensions (byte 4) is 0; an IDX "
            "file has at least 1 dimension",
            path=name,
        )
    return IDX_TYPE_CODES[magic[2]], magic[3]


def _content(compressed: bool) -> str:
    return "decompressed content" if compressed else "file"


__all__ = [
    "IDX_TYPE_CODES",
    "IdxHeader",
    "check_data_length",
    "read_header_from",
    "read_idx",
    "read_idx_header",
    "read_items",
]
