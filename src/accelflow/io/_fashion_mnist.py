"""Locating the four Fashion-MNIST files (the same names serve MNIST)."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

from accelflow._errors import DataFormatError
from accelflow.config.keys import DATA_DIR_ENV_VAR
from accelflow.io._streams import PathLike

DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package installs the files."""

FASHION_MNIST_URL = "https://github.com/zalandoresearch/fashion-mnist"

_FILE_STEMS = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FashionMnistFiles:
    """The paths of the four Fashion-MNIST (or MNIST) IDX files, raw or gzip.

    Attributes:
        directory: where they were found.
        train_images: 60,000 training images.
        train_labels: their labels.
        test_images: 10,000 test images.
        test_labels: their labels.

    Example:
        >>> files = find_fashion_mnist()  # doctest: +SKIP
        >>> images, labels = read_labeled_pair(*files.test)
    """

    directory: Path
    train_images: Path
    train_labels: Path
    test_images: Path
    test_labels: Path

    @property
    def train(self) -> tuple[Path, Path]:
        """``(train_images, train_labels)``."""
        return self.train_images, self.train_labels

    @property
    def test(self) -> tuple[Path, Path]:
        """``(test_images, test_labels)``."""
        return self.test_images, self.test_labels


def find_fashion_mnist(directory: PathLike | None = None) -> FashionMnistFiles:
    """Locate the four Fashion-MNIST files.

    Where it looks, first match wins and an explicit choice is never silently ignored:

    1. ``directory``, when given: only there.
    2. else ``$ACCELFLOW_DATA_DIR`` when set: that directory or its ``fashion-mnist/``
       subdirectory, only there.
    3. else Debian's ``/usr/share/datasets/fashion-mnist`` (``apt-get install
       dataset-fashion-mnist``).

    Each file may be raw (``t10k-images-idx3-ubyte``) or gzip (``...-ubyte.gz``); when both
    exist the raw one is used (it reads faster). Only names are checked here; the content is
    validated when read.

    Args:
        directory: a directory holding the four files.

    Returns:
        The four paths.

    Raises:
        DataFormatError: the files are not there; the message lists where it looked, which
            files are missing, and how to get them.

    Example:
        >>> find_fashion_mnist("~/data/fashion").test_labels  # doctest: +SKIP
        PosixPath('/home/me/data/fashion/t10k-labels-idx1-ubyte.gz')
    """
    candidates, origin = _candidates(directory)
    missing_by_dir: list[tuple[Path, list[str]]] = []
    for candidate in candidates:
        found = {field: _find_file(candidate, stem) for field, stem in _FILE_STEMS.items()}
        missing = [_FILE_STEMS[f] + "[.gz]" for f, path in found.items() if path is None]
        if not missing:
            paths = {f: p for f, p in found.items() if p is not None}
            return FashionMnistFiles(directory=candidate, **paths)
        missing_by_dir.append((candidate, missing))
    raise DataFormatError(_not_found_message(missing_by_dir, origin), path=str(candidates[0]))


def _candidates(directory: PathLike | None) -> tuple[list[Path], str]:
    if directory is not None:
        return [Path(os.fspath(directory)).expanduser()], "the directory given"
    from_env = os.environ.get(DATA_DIR_ENV_VAR)
    if from_env:
        base = Path(from_env).expanduser()
        return [base, base / "fashion-mnist"], f"${DATA_DIR_ENV_VAR}={from_env}"
    return [DEBIAN_FASHION_MNIST_DIR], "the default (Debian's dataset-fashion-mnist package)"


def _find_file(directory: Path, stem: str) -> Path | None:
    for name in (stem, stem + ".gz"):
        path = directory / name
        if path.is_file():
            return path
    return None


def _not_found_message(missing_by_dir: list[tuple[Path, list[str]]], origin: str) -> str:
    looked = "; ".join(
        f"{d} ({'does not exist' if not d.is_dir() else 'missing ' + ', '.join(m)})"
        for d, m in missing_by_dir
    )
    return (
        f"Fashion-MNIST files not found; looked in {origin}: {looked}. Get them with "
        f"`sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu; installs into "
        f"{DEBIAN_FASHION_MNIST_DIR}), or download the four .gz files of data/fashion from "
        f"{FASHION_MNIST_URL} into a directory and pass that directory (e.g. --data-dir) or "
        f"set {DATA_DIR_ENV_VAR} to it"
    )


__all__ = [
    "DATA_DIR_ENV_VAR",
    "DEBIAN_FASHION_MNIST_DIR",
    "FASHION_MNIST_URL",
    "FashionMnistFiles",
    "find_fashion_mnist",
]
