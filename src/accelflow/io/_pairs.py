"""An images file and a labels file read together, checked to belong together."""

from __future__ import annotations

import os
from dataclasses import dataclass
from types import TracebackType
from typing import Any

import numpy as np
import numpy.typing as npt

from accelflow._errors import DataFormatError
from accelflow.io._idx import IdxHeader, read_idx, read_idx_header
from accelflow.io._idx_file import IdxFile, open_idx, split_ranges
from accelflow.io._streams import PathLike

DEFAULT_NUM_CLASSES = 10
"""MNIST and Fashion-MNIST both have 10 classes (labels 0..9)."""


def check_pair_headers(
    images: IdxHeader, images_path: PathLike, labels: IdxHeader, labels_path: PathLike
) -> None:
    """Check that an images header and a labels header make a labeled data set.

    Images must be 3-D ``(count, rows, cols)`` with rows and cols >= 1, labels 1-D of an
    integer type, and both must have the same count.

    Raises:
        DataFormatError: naming the file that is wrong (the labels file for a count mismatch,
            with the images file and both counts in the message).
    """
    if len(images.shape) != 3:
        raise DataFormatError(
            f"an images file must be 3-D (count, rows, cols), but this one is "
            f"{images.describe()}{_swap_hint(images, labels)}",
            path=os.fspath(images_path),
        )
    if 0 in images.item_shape:
        raise DataFormatError(
            f"images of {images.describe()} are empty: rows and cols must be >= 1",
            path=os.fspath(images_path),
        )
    if len(labels.shape) != 1:
        raise DataFormatError(
            f"a labels file must be 1-D (count,), but this one is {labels.describe()}"
            f"{_swap_hint(images, labels)}",
            path=os.fspath(labels_path),
        )
    if labels.dtype.kind not in "iu":
        raise DataFormatError(
            f"labels must be integers (IDX type 0x08, 0x09, 0x0B or 0x0C), but this file holds "
            f"{labels.dtype.name}",
            path=os.fspath(labels_path),
        )
    if labels.count != images.count:
        raise DataFormatError(
            f"has {labels.count} labels but the images file {os.fspath(images_path)} has "
            f"{images.count} images; pair files of the same split (train-* with train-*, "
            "t10k-* with t10k-*)",
            path=os.fspath(labels_path),
        )


def check_label_values(
    labels: npt.NDArray[Any], path: PathLike, num_classes: int, *, offset: int = 0
) -> None:
    """Check every label is in ``0 .. num_classes - 1``.

    Args:
        labels: the labels read (a slice of the file when ``offset > 0``).
        path: the labels file, for the message.
        num_classes: the number of classes.
        offset: the index in the file of ``labels[0]``, so the message gives file positions.

    Raises:
        DataFormatError: naming the first bad label, its index and the allowed range.
    """
    bad = np.flatnonzero((labels < 0) | (labels >= num_classes))
    if bad.size:
        first = int(bad[0])
        raise DataFormatError(
            f"label {labels[first]} at index {offset + first} is outside 0..{num_classes - 1} "
            f"({bad.size} bad labels in all); is this the labels file of a {num_classes}-class "
            "data set?",
            path=os.fspath(path),
        )


def read_labeled_pair(
    images_path: PathLike,
    labels_path: PathLike,
    *,
    limit: int | None = None,
    num_classes: int = DEFAULT_NUM_CLASSES,
) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]:
    """Read an images file and its labels file, checking they belong together.

    Both headers are checked before any data is read (see :func:`check_pair_headers`), then
    both files are read whole (:func:`read_idx`) and every label is range-checked.

    Args:
        images_path: e.g. ``t10k-images-idx3-ubyte.gz``.
        labels_path: e.g. ``t10k-labels-idx1-ubyte.gz``.
        limit: read only the first ``limit`` images and labels.
        num_classes: labels must be in ``0 .. num_classes - 1``.

    Returns:
        ``(images, labels)``, e.g. uint8 ``(10000, 28, 28)`` and uint8 ``(10000,)``.

    Raises:
        DataFormatError: either file is malformed or they do not match; names the file.

    Example:
        >>> images, labels = read_labeled_pair(
        ...     "t10k-images-idx3-ubyte.gz", "t10k-labels-idx1-ubyte.gz", limit=100)
    """
    _check_num_classes(num_classes)
    check_pair_headers(
        read_idx_header(images_path), images_path, read_idx_header(labels_path), labels_path
    )
    images = read_idx(images_path, limit=limit)
    labels = read_idx(labels_path, limit=limit)
    check_label_values(labels, labels_path, num_classes)
    return images, labels


@dataclass(eq=False)
class IdxPair:
    """An images :class:`IdxFile` and its labels :class:`IdxFile`, read by range together.

    Build it with :func:`open_labeled_pair`. Picklable like :class:`IdxFile`.

    Attributes:
        images: the images file (3-D).
        labels: the labels file (1-D, same count).
        num_classes: labels are checked to be in ``0 .. num_classes - 1`` as they are read.
    """

    images: IdxFile
    labels: IdxFile
    num_classes: int = DEFAULT_NUM_CLASSES

    def __len__(self) -> int:
        return len(self.images)

    def splits(self, parts: int) -> list[tuple[int, int]]:
        """The ``(start, stop)`` ranges of ``parts`` parallel readers; see :func:`split_ranges`."""
        return split_ranges(len(self), parts)

    def read_range(
        self, start: int, stop: int
    ) -> tuple[npt.NDArray[np.generic], npt.NDArray[np.generic]]:
        """Read images and labels ``start`` to ``stop`` (exclusive), labels range-checked.

        Raises:
            IndexError: the range is outside ``[0, len(self)]``.
            DataFormatError: either file is truncated or corrupt, or a label is out of range.
        """
        images = self.images.read_range(start, stop)
        labels = self.labels.read_range(start, stop)
        check_label_values(labels, self.labels.path, self.num_classes, offset=start)
        return images, labels

    def close(self) -> None:
        """Close both files."""
        self.images.close()
        self.labels.close()

    def __enter__(self) -> IdxPair:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()


def open_labeled_pair(
    images_path: PathLike, labels_path: PathLike, *, num_classes: int = DEFAULT_NUM_CLASSES
) -> IdxPair:
    """Open an images file and its labels file for ranged reads, checking both headers now.

    Raises:
        DataFormatError: a header is bad or the two do not match (see
            :func:`check_pair_headers`).

    Example:
        >>> with open_labeled_pair("t10k-images-idx3-ubyte.gz",
        ...                        "t10k-labels-idx1-ubyte.gz") as pair:
        ...     images, labels = pair.read_range(*pair.splits(2)[0])
    """
    _check_num_classes(num_classes)
    images, labels = open_idx(images_path), open_idx(labels_path)
    check_pair_headers(images.header, images_path, labels.header, labels_path)
    return IdxPair(images, labels, num_classes)


def _check_num_classes(num_classes: int) -> None:
    if num_classes < 1:
        raise ValueError(f"num_classes must be >= 1, got {num_classes}")


def _swap_hint(images: IdxHeader, labels: IdxHeader) -> str:
    if len(images.shape) == 1 and len(labels.shape) == 3:
        return "; the images and labels files seem swapped"
    return ""


__all__ = [
    "DEFAULT_NUM_CLASSES",
    "IdxPair",
    "check_label_values",
    "check_pair_headers",
    "open_labeled_pair",
    "read_labeled_pair",
]
