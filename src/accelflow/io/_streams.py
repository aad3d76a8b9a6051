"""Opening data files that may be gzip-compressed, and turning I/O failures into clear errors.

Compression is detected from the content (the gzip magic bytes ``1f 8b``), never from the file
name: a ``.gz`` that was already unpacked by a browser, or a raw file someone gzipped without
renaming it, both read correctly.
"""

from __future__ import annotations

import gzip
import io
import os
import zlib
from collections.abc import Iterator
from contextlib import contextmanager

from accelflow._errors import DataFormatError

GZIP_MAGIC = b"\x1f\x8b"
"""The first two bytes of every gzip stream (RFC 1952)."""

_CHUNK_BYTES = 1 << 22

# Well-known file signatures, so a wrong file gets named for what it is.
_SIGNATURES: tuple[tuple[bytes, str], ...] = (
    (GZIP_MAGIC, "a gzip stream (the file is compressed twice: gunzip it once)"),
    (b"\x89PNG", "a PNG image"),
    (b"\xff\xd8\xff", "a JPEG image"),
    (b"GIF8", "a GIF image"),
    (b"PK\x03\x04", "a ZIP archive (unzip it first)"),
    (b"BZh", "a bzip2 stream (bunzip2 it first)"),
    (b"\xfd7zXZ\x00", "an xz stream (unxz it first)"),
    (b"\x93NUMPY", "a NumPy .npy file"),
    (b"%PDF", "a PDF document"),
    (b"\x7fELF", "an ELF executable"),
)

PathLike = str | os.PathLike[str]


def describe_content(head: bytes) -> str:
    """Say what a file that is not IDX looks like, from its first bytes.

    Example:
        >>> describe_content(b"\\x89PNG\\r\\n")
        'a PNG image'
        >>> describe_content(b"<!DOCTYPE html>")
        "text starting '<!DOCTYPE html>'"
    """
    for signature, name in _SIGNATURES:
        if head.startswith(signature):
            return name
    try:
        text = head.decode("utf-8")
    except UnicodeDecodeError:
        return f"unknown binary data starting {head[:8].hex(' ')}"
    if text.isprintable() or all(c.isprintable() or c in "\r\n\t" for c in text):
        return f"text starting {text[:24]!r}"
    return f"unknown binary data starting {head[:8].hex(' ')}"


def is_gzip(path: PathLike) -> bool:
    """Whether ``path`` starts with the gzip magic bytes.

    Raises:
        DataFormatError: the file cannot be opened (missing, a directory, no permission).
    """
    with translate_errors(path), open(path, "rb") as raw:
        return raw.read(2) == GZIP_MAGIC


def open_stream(path: PathLike) -> tuple[io.BufferedIOBase, bool]:
    """Open ``path`` for reading, gunzipping on the fly when its content is gzip.

    Returns:
        The stream (positioned at the first byte of the decompressed content) and whether it
        is compressed. The caller closes the stream.

    Raises:
        DataFormatError: the file cannot be opened.
    """
    compressed = is_gzip(path)
    with translate_errors(path):
        if compressed:
            return gzip.open(path, "rb"), True
        return open(path, "rb"), False


@contextmanager
def translate_errors(path: PathLike) -> Iterator[None]:
    """Turn OS and gzip errors met while reading ``path`` into :class:`DataFormatError`.

    Example:
        >>> with translate_errors("missing.gz"):
        ...     open("missing.gz", "rb")
        Traceback (most recent call last):
        accelflow.DataFormatError: missing.gz: cannot open: the file does not exist
    """
    name = os.fspath(path)
    try:
        yield
    except FileNotFoundError as exc:
        raise DataFormatError("cannot open: the file does not exist", path=name) from exc
    except IsADirectoryError as exc:
        raise DataFormatError("cannot open: it is a directory, not a file", path=name) from exc
    except PermissionError as exc:
        raise DataFormatError(
            "cannot open: permission denied (check the file's mode and owner)", path=name
        ) from exc
    except EOFError as exc:
        raise DataFormatError(
            "gzip stream is truncated: it ends before its end-of-stream marker "
            "(the download was cut short; fetch the file again)",
            path=name,
        ) from exc
    except (gzip.BadGzipFile, zlib.error) as exc:
        raise DataFormatError(
            f"gzip stream is corrupt ({exc}); fetch the file again", path=name
        ) from exc


def read_upto(stream: io.BufferedIOBase, nbytes: int) -> bytearray:
    """Read ``nbytes`` bytes, or fewer if the stream ends first, in bounded chunks.

    Chunked so that a header claiming a huge size never allocates more than the data that is
    really there (a gzip stream's length is unknown until it is read).
    """
    buffer = bytearray()
    while len(buffer) < nbytes:
        chunk = stream.read(min(_CHUNK_BYTES, nbytes - len(buffer)))
        if not chunk:
            break
        buffer += chunk
    return buffer


def count_remaining(stream: io.BufferedIOBase) -> int:
    """Read the stream to its end in bounded chunks and return how many bytes were left."""
    total = 0
    while chunk := stream.read(_CHUNK_BYTES):
        total += len(chunk)
    return total
