"""The IDX reader on generated files: round trips of every type, raw and gzip, and every way a
file can be damaged or foreign, each error naming the file and the problem."""

from __future__ import annotations

import copy
import gzip
import pickle
import struct
import tempfile
import zlib
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from hypothesis.extra import numpy as hnp

import accelflow
from accelflow import DataFormatError
from accelflow.io import (
    IDX_TYPE_CODES,
    IdxHeader,
    open_idx,
    open_labeled_pair,
    read_idx,
    read_idx_header,
    read_labeled_pair,
    split_ranges,
)

TYPE_CODES: dict[np.dtype[Any], int] = {
    np.dtype(np.uint8): 0x08,
    np.dtype(np.int8): 0x09,
    np.dtype(np.int16): 0x0B,
    np.dtype(np.int32): 0x0C,
    np.dtype(np.float32): 0x0D,
    np.dtype(np.float64): 0x0E,
}


def encode(array: npt.NDArray[np.generic]) -> bytes:
    """IDX bytes of ``array``, written independently of the reader (struct + '>' dtypes)."""
    header = bytes([0, 0, TYPE_CODES[array.dtype], array.ndim])
    header += struct.pack(f">{array.ndim}I", *array.shape)
    return header + array.astype(array.dtype.newbyteorder(">")).tobytes()


def write(path: Path, data: bytes, *, gz: bool = False) -> Path:
    path.write_bytes(gzip.compress(data, mtime=0) if gz else data)
    return path


def sample(dtype: np.dtype[np.generic], shape: tuple[int, ...]) -> npt.NDArray[np.generic]:
    """Values that use every byte of the type (so a missing byte swap shows)."""
    values = np.arange(int(np.prod(shape)), dtype=np.int64) * 7919 - 1000
    return values.astype(dtype).reshape(shape)


IMAGES = sample(np.dtype(np.uint8), (6, 4, 3))
LABELS = np.array([0, 9, 3, 3, 1, 7], dtype=np.uint8)


# -- round trips ------------------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
@pytest.mark.parametrize(
    "shape", [(7,), (5, 3), (4, 3, 2), (3, 2, 2, 5)], ids=lambda s: f"{len(s)}d"
)
@pytest.mark.parametrize("dtype", list(TYPE_CODES), ids=lambda d: d.name)
def test_every_type_and_rank_round_trips(
    tmp_path: Path, dtype: np.dtype[np.generic], shape: tuple[int, ...], gz: bool
) -> None:
    array = sample(dtype, shape)
    path = write(tmp_path / "data.idx", encode(array), gz=gz)

    result = read_idx(path)

    assert result.dtype == dtype and result.dtype.isnative
    assert result.shape == shape
    assert np.array_equal(result, array)
    header = read_idx_header(path)
    assert header == IdxHeader(
        dtype=dtype, shape=shape, data_offset=4 + 4 * len(shape), compressed=gz
    )
    assert header.type_code == TYPE_CODES[dtype]
    with open_idx(path) as lazy:
        assert (len(lazy), lazy.shape, lazy.dtype) == (shape[0], shape, dtype)
        assert np.array_equal(lazy.read_range(1, shape[0]), array[1:])
        assert np.array_equal(lazy.read_range(0, 1), array[:1])  # backward jump


def test_type_code_table_matches_the_format() -> None:
    assert {code: dt for dt, code in TYPE_CODES.items()} == IDX_TYPE_CODES


def test_gzip_is_detected_by_content_not_name(tmp_path: Path) -> None:
    gz_named_raw = write(tmp_path / "labels.gz", encode(LABELS))
    raw_named_gz = write(tmp_path / "labels-idx1-ubyte", encode(LABELS), gz=True)

    assert np.array_equal(read_idx(gz_named_raw), LABELS)
    assert np.array_equal(read_idx(raw_named_gz), LABELS)
    assert read_idx_header(raw_named_gz).compressed


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_limit_reads_a_prefix(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "images", encode(IMAGES), gz=gz)

    assert np.array_equal(read_idx(path, limit=2), IMAGES[:2])
    assert np.array_equal(read_idx(path, limit=0), IMAGES[:0])
    assert np.array_equal(read_idx(path, limit=100), IMAGES)
    with pytest.raises(ValueError, match="limit must be None or >= 0, got -1"):
        read_idx(path, limit=-1)


def test_empty_first_dimension_is_valid(tmp_path: Path) -> None:
    path = write(tmp_path / "none", encode(np.zeros((0, 28, 28), np.uint8)))

    assert read_idx(path).shape == (0, 28, 28)
    with open_idx(path) as lazy:
        assert lazy.read_range(0, 0).shape == (0, 28, 28)


@settings(max_examples=60, deadline=None)
@given(
    array=hnp.arrays(
        dtype=st.sampled_from(list(TYPE_CODES)),
        shape=hnp.array_shapes(min_dims=1, max_dims=4, min_side=0, max_side=6),
    ),
    gz=st.booleans(),
    data=st.data(),
)
def test_round_trip_of_random_arrays(
    array: npt.NDArray[np.generic], gz: bool, data: st.DataObject
) -> None:
    start = data.draw(st.integers(0, array.shape[0]), label="start")
    stop = data.draw(st.integers(start, array.shape[0]), label="stop")
    with tempfile.TemporaryDirectory() as directory:
        path = write(Path(directory) / "random.idx", encode(array), gz=gz)

        full = read_idx(path)
        with open_idx(path) as lazy:
            part = lazy.read_range(start, stop)
            lazy.verify()

    # Bytes compare exactly, NaNs and signed zeros included.
    assert full.dtype == array.dtype and full.shape == array.shape
    assert full.tobytes() == array.tobytes()
    assert part.tobytes() == array[start:stop].tobytes()


@settings(max_examples=200, deadline=None)
@given(count=st.integers(0, 500), parts=st.integers(1, 40))
def test_split_ranges_cover_everything_once_and_evenly(count: int, parts: int) -> None:
    ranges = split_ranges(count, parts)

    assert len(ranges) == parts
    assert ranges[0][0] == 0 and ranges[-1][1] == count
    assert all(a[1] == b[0] for a, b in zip(ranges, ranges[1:], strict=False))
    sizes = [stop - start for start, stop in ranges]
    assert max(sizes) - min(sizes) <= 1 and sizes == sorted(sizes, reverse=True)


def test_split_ranges_rejects_bad_arguments() -> None:
    with pytest.raises(ValueError, match="parts must be >= 1, got 0"):
        split_ranges(10, 0)
    with pytest.raises(ValueError, match="count must be >= 0, got -1"):
        split_ranges(-1, 2)


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_splits_read_in_parallel_readers_rebuild_the_file(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "images", encode(IMAGES), gz=gz)
    lazy = open_idx(path)  # never read from here, so nothing to close

    parts = []
    for start, stop in lazy.splits(4):
        reader = pickle.loads(pickle.dumps(lazy))  # as shipped to another process
        parts.append(reader.read_range(start, stop))
        reader.close()

    assert np.array_equal(np.concatenate(parts), IMAGES)


def test_idx_file_pickles_and_copies_after_reading(tmp_path: Path) -> None:
    lazy = open_idx(write(tmp_path / "labels", encode(LABELS), gz=True))
    lazy.read_range(0, 2)  # opens the handle

    clone = pickle.loads(pickle.dumps(lazy))
    twin = copy.copy(lazy)

    assert np.array_equal(clone.read_range(2, 6), LABELS[2:])
    assert np.array_equal(twin.read_range(0, 6), LABELS)
    assert repr(lazy) == f"IdxFile({str(tmp_path / 'labels')!r}, 6 uint8)"
    lazy.close()
    assert np.array_equal(lazy.read_range(5, 6), LABELS[5:])  # reopens after close
    for reader in (lazy, clone, twin):
        reader.close()


@pytest.mark.parametrize("bounds", [(-1, 2), (3, 2), (0, 7)])
def test_read_range_outside_the_file_is_an_index_error(
    tmp_path: Path, bounds: tuple[int, int]
) -> None:
    lazy = open_idx(write(tmp_path / "labels", encode(LABELS)))  # fails before opening

    with pytest.raises(IndexError, match=r"labels: range .* is not within the file's 6 items"):
        lazy.read_range(*bounds)


# -- damaged and foreign files ----------------------------------------------------------------


def assert_format_error(path: Path, *fragments: str) -> None:
    """Every reader entry point raises DataFormatError naming ``path`` and the problem."""
    for reader in (read_idx, read_idx_header, open_idx):
        with pytest.raises(DataFormatError) as caught:
            reader(path)  # open_idx reads the header and opens nothing else
        message = str(caught.value)
        assert message.startswith(f"{path}: "), message
        assert caught.value.path == str(path)
        for fragment in fragments:
            assert fragment in message, message


def test_zero_size_file(tmp_path: Path) -> None:
    assert_format_error(write(tmp_path / "empty", b""), "the file is empty (0 bytes)")


def test_gzip_of_nothing(tmp_path: Path) -> None:
    path = write(tmp_path / "empty.gz", b"", gz=True)
    assert_format_error(path, "the decompressed content is empty (0 bytes)")


@pytest.mark.parametrize(
    ("content", "looks_like"),
    [
        (b"\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR", "looks like a PNG image"),
        (b"<!DOCTYPE html><html>", "looks like text starting '<!DOCTYPE html><html>'"),
        (b"hello world\n", "looks like text starting 'hello world\\n'"),
        (b"PK\x03\x04\x14\x00", "looks like a ZIP archive (unzip it first)"),
        (b"\x93NUMPY\x01\x00", "looks like a NumPy .npy file"),
        (b"\xde\xad\xbe\xef\x00\x01", "looks like unknown binary data starting de ad be ef 00 01"),
    ],
    ids=["png", "html", "text", "zip", "npy", "binary"],
)
def test_foreign_file(tmp_path: Path, content: bytes, looks_like: str) -> None:
    path = write(tmp_path / "t10k-images-idx3-ubyte", content)
    assert_format_error(path, "not an IDX file: the file " + looks_like, "two zero bytes")


def test_foreign_content_inside_gzip(tmp_path: Path) -> None:
    path = write(tmp_path / "images.gz", b"just some text", gz=True)
    assert_format_error(path, "the decompressed content looks like text starting 'just some")


def test_gzip_compressed_twice(tmp_path: Path) -> None:
    path = write(tmp_path / "twice.gz", gzip.compress(encode(LABELS), mtime=0), gz=True)
    assert_format_error(path, "compressed twice: gunzip it once")


def test_unknown_type_code(tmp_path: Path) -> None:
    path = write(tmp_path / "bad-type", b"\x00\x00\x07\x01" + struct.pack(">I", 1) + b"\x00")
    assert_format_error(
        path, "bad IDX magic 00 00 07 01: unknown type code 0x07 in byte 3",
        "0x08 (uint8), 0x09 (int8), 0x0B (int16), 0x0C (int32), 0x0D (float32), 0x0E (float64)",
    )


def test_zero_dimensions(tmp_path: Path) -> None:
    path = write(tmp_path / "no-dims", b"\x00\x00\x08\x00")
    assert_format_error(path, "the number of dimensions (byte 4) is 0")


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_header_truncated_in_the_dimensions(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "short-header", b"\x00\x00\x08\x03" + struct.pack(">2I", 5, 28), gz=gz)
    where = "decompressed content" if gz else "file"
    assert_format_error(
        path, "IDX header truncated: the magic declares 3 dimensions, which need 16 header "
        f"bytes, but the {where} has only 12 bytes",
    )


def test_header_truncated_in_the_magic(tmp_path: Path) -> None:
    path = write(tmp_path / "three-bytes", b"\x00\x00\x08")
    assert_format_error(path, "the file has only 3 bytes, but the magic number alone needs 4")


def test_raw_data_truncated(tmp_path: Path) -> None:
    path = write(tmp_path / "cut", encode(IMAGES)[:-10])
    assert_format_error(
        path, "IDX data truncated: the header declares 6x4x3 uint8, which needs 72 data bytes "
        "after the 16-byte header, but the file has 62 (10 missing)",
    )


def test_gzip_data_truncated(tmp_path: Path) -> None:
    path = write(tmp_path / "cut.gz", encode(IMAGES.astype(np.int32))[:-6], gz=True)

    with pytest.raises(DataFormatError, match="IDX data truncated") as caught:
        read_idx(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert "6 bytes early while reading 6 items of 6x4x3 int32 (288 bytes expected, 282" in str(
        caught.value
    )
    with open_idx(path) as lazy:  # the header is fine; the data is checked when read
        assert np.array_equal(lazy.read_range(0, 5), IMAGES[:5].astype(np.int32))
        with pytest.raises(DataFormatError, match="ended 6 bytes early while reading 1 items"):
            lazy.read_range(5, 6)
    with pytest.raises(DataFormatError, match="decompressed content has 282 \\(6 missing\\)"):
        lazy.verify()


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_trailing_garbage(tmp_path: Path, gz: bool) -> None:
    path = write(tmp_path / "long", encode(LABELS) + b"extra", gz=gz)
    where = "decompressed content" if gz else "file"
    message = (
        "5 unexpected trailing bytes: the header declares 6 uint8, which is 6 data bytes after "
        f"the 8-byte header, but the {where} has 11"
    )

    with pytest.raises(DataFormatError, match="unexpected trailing bytes") as caught:
        read_idx(path)
    assert message in str(caught.value) and str(caught.value).startswith(f"{path}: ")
    with pytest.raises(DataFormatError, match="unexpected trailing bytes"):
        open_idx(path).verify()
    if not gz:
        assert_format_error(path, message)


def test_data_file_cut_after_open_is_reported_when_read(tmp_path: Path) -> None:
    path = write(tmp_path / "images", encode(IMAGES))
    with open_idx(path) as lazy:
        path.write_bytes(encode(IMAGES)[:-12])
        with pytest.raises(DataFormatError, match="ended 12 bytes early while reading 1 items"):
            lazy.read_range(5, 6)


def test_corrupt_gzip_stream(tmp_path: Path) -> None:
    compressed = bytearray(gzip.compress(encode(sample(np.dtype(np.int32), (50, 9))), mtime=0))
    compressed[20:30] = b"\xff" * 10
    path = tmp_path / "corrupt.gz"
    path.write_bytes(bytes(compressed))

    with pytest.raises(DataFormatError, match="gzip stream is corrupt") as caught:
        read_idx(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert isinstance(caught.value.__cause__, (zlib.error, gzip.BadGzipFile, EOFError))


def test_gzip_crc_mismatch(tmp_path: Path) -> None:
    compressed = bytearray(gzip.compress(encode(LABELS), mtime=0))
    compressed[-8] ^= 0xFF  # first byte of the CRC32 trailer
    path = tmp_path / "crc.gz"
    path.write_bytes(bytes(compressed))

    with pytest.raises(DataFormatError, match="gzip stream is corrupt .*CRC"):
        read_idx(path)


def test_truncated_gzip_file(tmp_path: Path) -> None:
    compressed = gzip.compress(encode(sample(np.dtype(np.float64), (40, 5))), mtime=0)
    path = tmp_path / "cut.gz"
    path.write_bytes(compressed[: len(compressed) // 2])

    with pytest.raises(DataFormatError, match="gzip stream is truncated: it ends before"):
        read_idx(path)
    with open_idx(path) as lazy, pytest.raises(DataFormatError, match="stream is truncated"):
        lazy.read_range(0, 40)


def test_missing_file_and_directory(tmp_path: Path) -> None:
    assert_format_error(tmp_path / "nope", "cannot open: the file does not exist")
    assert_format_error(tmp_path, "cannot open: it is a directory, not a file")


def test_format_errors_are_accelflow_errors(tmp_path: Path) -> None:
    with pytest.raises(accelflow.AccelflowError):
        read_idx(write(tmp_path / "empty", b""))


# -- images + labels pairs --------------------------------------------------------------------


@pytest.mark.parametrize("gz", [False, True], ids=["raw", "gz"])
def test_labeled_pair_reads_both(tmp_path: Path, gz: bool) -> None:
    images = write(tmp_path / "images", encode(IMAGES), gz=gz)
    labels = write(tmp_path / "labels", encode(LABELS), gz=gz)

    got_images, got_labels = read_labeled_pair(images, labels)
    assert np.array_equal(got_images, IMAGES) and np.array_equal(got_labels, LABELS)
    limited = read_labeled_pair(images, labels, limit=4)
    assert np.array_equal(limited[0], IMAGES[:4]) and np.array_equal(limited[1], LABELS[:4])
    with open_labeled_pair(images, labels) as pair:
        assert len(pair) == 6
        chunks = [pair.read_range(start, stop) for start, stop in pair.splits(4)]
    assert np.array_equal(np.concatenate([c[0] for c in chunks]), IMAGES)
    assert np.array_equal(np.concatenate([c[1] for c in chunks]), LABELS)


def pair_error(images: Path, labels: Path) -> DataFormatError:
    """The error both pair readers raise (they must agree)."""
    errors = []
    for reader in (read_labeled_pair, open_labeled_pair):
        with pytest.raises(DataFormatError) as caught:
            reader(images, labels)
        errors.append(caught.value)
    assert str(errors[0]) == str(errors[1])
    return errors[0]


def test_pair_with_different_counts_names_both_files(tmp_path: Path) -> None:
    images = write(tmp_path / "train-images", encode(IMAGES))
    labels = write(tmp_path / "t10k-labels", encode(LABELS[:4]))

    error = pair_error(images, labels)

    assert error.path == str(labels)
    assert str(error) == (
        f"{labels}: has 4 labels but the images file {images} has 6 images; pair files of "
        "the same split (train-* with train-*, t10k-* with t10k-*)"
    )


def test_swapped_pair_says_so(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(IMAGES))
    labels = write(tmp_path / "labels", encode(LABELS))

    error = pair_error(labels, images)

    assert error.path == str(labels)
    assert "an images file must be 3-D (count, rows, cols), but this one is 6 uint8" in str(error)
    assert "the images and labels files seem swapped" in str(error)


def test_pair_with_a_2d_labels_file(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(IMAGES))
    labels = write(tmp_path / "labels", encode(IMAGES[:, 0, :]))

    error = pair_error(images, labels)

    assert error.path == str(labels)
    assert "a labels file must be 1-D (count,), but this one is 6x3 uint8" in str(error)


def test_pair_with_float_labels(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(IMAGES))
    labels = write(tmp_path / "labels", encode(LABELS.astype(np.float32)))

    error = pair_error(images, labels)

    assert error.path == str(labels)
    assert "labels must be integers" in str(error) and "holds float32" in str(error)


def test_pair_with_empty_images(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(np.zeros((6, 0, 28), np.uint8)))
    labels = write(tmp_path / "labels", encode(LABELS))

    error = pair_error(images, labels)

    assert error.path == str(images)
    assert "images of 6x0x28 uint8 are empty: rows and cols must be >= 1" in str(error)


def test_label_out_of_range_names_its_index(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(IMAGES))
    bad = LABELS.copy()
    bad[4] = 12
    labels = write(tmp_path / "labels", encode(bad))
    expected = (
        f"{labels}: label 12 at index 4 is outside 0..9 (1 bad labels in all); is this the "
        "labels file of a 10-class data set?"
    )

    with pytest.raises(DataFormatError) as caught:
        read_labeled_pair(images, labels)
    assert str(caught.value) == expected
    with open_labeled_pair(images, labels) as pair:
        assert np.array_equal(pair.read_range(0, 4)[1], LABELS[:4])
        with pytest.raises(DataFormatError, match="label 12 at index 4 is outside 0..9"):
            pair.read_range(3, 6)
    assert np.array_equal(read_labeled_pair(images, labels, num_classes=13)[1], bad)


def test_negative_labels_are_out_of_range(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(IMAGES))
    labels = write(tmp_path / "labels", encode(np.array([0, 1, -1, 2, 3, 4], np.int8)))

    with pytest.raises(DataFormatError, match="label -1 at index 2 is outside 0..9"):
        read_labeled_pair(images, labels)


def test_pair_rejects_bad_num_classes(tmp_path: Path) -> None:
    images = write(tmp_path / "images", encode(IMAGES))
    labels = write(tmp_path / "labels", encode(LABELS))

    with pytest.raises(ValueError, match="num_classes must be >= 1, got 0"):
        read_labeled_pair(images, labels, num_classes=0)
