"""The IDX reader on the real Fashion-MNIST files of Debian's ``dataset-fashion-mnist``."""

from __future__ import annotations

import numpy as np
import pytest

from accelflow.io import (
    DATA_DIR_ENV_VAR,
    DEBIAN_FASHION_MNIST_DIR,
    find_fashion_mnist,
    open_labeled_pair,
    read_idx_header,
    read_labeled_pair,
)

pytestmark = pytest.mark.skipif(
    not (DEBIAN_FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file(),
    reason=f"{DEBIAN_FASHION_MNIST_DIR} is absent: apt-get install dataset-fashion-mnist",
)


def test_found_in_the_debian_directory(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)

    assert find_fashion_mnist().directory == DEBIAN_FASHION_MNIST_DIR


def test_headers() -> None:
    files = find_fashion_mnist(DEBIAN_FASHION_MNIST_DIR)

    assert read_idx_header(files.train_images).describe() == "60000x28x28 uint8"
    assert read_idx_header(files.train_labels).describe() == "60000 uint8"
    assert read_idx_header(files.test_images).describe() == "10000x28x28 uint8"
    assert read_idx_header(files.test_labels).describe() == "10000 uint8"


@pytest.mark.parametrize(("split", "count"), [("train", 60000), ("test", 10000)])
def test_whole_split_reads_and_is_balanced(split: str, count: int) -> None:
    files = find_fashion_mnist(DEBIAN_FASHION_MNIST_DIR)

    images, labels = read_labeled_pair(*getattr(files, split))

    assert images.shape == (count, 28, 28) and images.dtype == np.uint8
    assert labels.shape == (count,) and labels.dtype == np.uint8
    assert np.array_equal(np.bincount(labels, minlength=10), np.full(10, count // 10))
    assert images.min() == 0 and images.max() == 255


def test_splits_of_the_test_set_equal_the_whole() -> None:
    files = find_fashion_mnist(DEBIAN_FASHION_MNIST_DIR)
    images, labels = read_labeled_pair(*files.test)

    with open_labeled_pair(*files.test) as pair:
        parts = [pair.read_range(start, stop) for start, stop in pair.splits(3)]

    assert np.array_equal(np.concatenate([p[0] for p in parts]), images)
    assert np.array_equal(np.concatenate([p[1] for p in parts]), labels)
