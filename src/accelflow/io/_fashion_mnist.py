"""Locating the Fashion-MNIST files (the same names serve MNIST).

Inference needs only the two test files (``t10k-*``, about 4.4 MB); only training needs the
two 26 MB training files, so callers ask for the splits they read (``splits=("test",)``).
"""

from __future__ import annotations

import os
from collections.abc import Collection
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from accelflow._errors import DataFormatError
from accelflow.config.keys import DATA_DIR_ENV_VAR
from accelflow.io._streams import PathLike

DEBIAN_FASHION_MNIST_DIR = Path("/usr/share/datasets/fashion-mnist")
"""Where Debian's ``dataset-fashion-mnist`` package installs the files."""

FASHION_MNIST_URL = "https://github.com/zalandoresearch/fashion-mnist"

Split = Literal["train", "test"]
SPLITS: tuple[Split, ...] = ("train", "test")

_FILE_STEMS = {
    "train_images": "train-images-idx3-ubyte",
    "train_labels": "train-labels-idx1-ubyte",
    "test_images": "t10k-images-idx3-ubyte",
    "test_labels": "t10k-labels-idx1-ubyte",
}


@dataclass(frozen=True, slots=True, kw_only=True)
class FashionMnistFiles:
    """The paths of the Fashion-MNIST (or MNIST) IDX files, raw or gzip.

    Attributes:
        directory: where they were found.
        train_images: 60,000 training images, or ``None`` when the directory has none (only
            the test split was asked for).
        train_labels: their labels, or ``None`` likewise.
        test_images: 10,000 test images, or ``None`` likewise.
        test_labels: their labels, or ``None`` likewise.

    Example:
        >>> files = find_fashion_mnist()
        >>> images, labels = read_labeled_pair(*files.test)
    """

    directory: Path
    train_images: Path | None = None
    train_labels: Path | None = None
    test_images: Path | None = None
    test_labels: Path | None = None

    @property
    def train(self) -> tuple[Path, Path]:
        """``(train_images, train_labels)``.

        Raises:
            DataFormatError: the directory has no training files (names them).
        """
        return self._pair("train", self.train_images, self.train_labels)

    @property
    def test(self) -> tuple[Path, Path]:
        """``(test_images, test_labels)``.

        Raises:
            DataFormatError: the directory has no test files (names them).
        """
        return self._pair("test", self.test_images, self.test_labels)

    def _pair(self, split: str, images: Path | None, labels: Path | None) -> tuple[Path, Path]:
        if images is None or labels is None:
            raise DataFormatError(
                f"{self.directory} has no Fashion-MNIST {split} files "
                f"({_FILE_STEMS[split + '_images']}[.gz], {_FILE_STEMS[split + '_labels']}[.gz]); "
                f"add them, or ask find_fashion_mnist(splits=...) for the {split} split so it "
                "looks for a directory that has them",
                path=str(self.directory),
            )
        return images, labels


def find_fashion_mnist(
    directory: PathLike | None = None, *, splits: Collection[Split] = SPLITS
) -> FashionMnistFiles:
    """Locate the Fashion-MNIST files of ``splits`` (default both: all four files).

    Inference needs only ``splits=("test",)``: the two ``t10k-*`` files. Files of other splits
    found in the same directory are filled in too; missing ones are ``None``.

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
        directory: a directory holding the files.
        splits: which splits must be there: ``"train"`` and/or ``"test"``.

    Returns:
        The paths.

    Raises:
        DataFormatError: the files are not there; the message lists where it looked, which
            files are missing, and how to get them.
        ValueError: ``splits`` is empty or names something other than train/test.

    Example (skipped in the doctest run: the path is in a user's home directory):
        >>> find_fashion_mnist("~/data/fashion").test_labels  # doctest: +SKIP
        PosixPath('/home/me/data/fashion/t10k-labels-idx1-ubyte.gz')
    """
    wanted = _check_splits(splits)
    candidates, origin = _candidates(directory)
    missing_by_dir: list[tuple[Path, list[str]]] = []
    for candidate in candidates:
        found = {field: _find_file(candidate, stem) for field, stem in _FILE_STEMS.items()}
        missing = [
            _FILE_STEMS[f] + "[.gz]"
            for f, path in found.items()
            if path is None and f.split("_")[0] in wanted
        ]
        if not missing:
            return FashionMnistFiles(directory=candidate, **found)
        missing_by_dir.append((candidate, missing))
    raise DataFormatError(
        _not_found_message(missing_by_dir, origin, wanted), path=str(candidates[0])
    )


def _check_splits(splits: Collection[Split]) -> set[str]:
    # a bare "test" would otherwise read as the letters t, e, s, t
    wanted: set[str] = {splits} if isinstance(splits, str) else set(splits)
    if not wanted or not wanted <= set(SPLITS):
        raise ValueError(
            f"find_fashion_mnist(splits=...): expected 'train' and/or 'test', got {splits!r}"
        )
    return wanted


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


def _not_found_message(
    missing_by_dir: list[tuple[Path, list[str]]], origin: str, wanted: set[str]
) -> str:
    looked = "; ".join(
        f"{d} ({'does not exist' if not d.is_dir() else 'missing ' + ', '.join(m)})"
        for d, m in missing_by_dir
    )
    if wanted == set(SPLITS):
        which = "the four .gz files"
    elif wanted == {"test"}:
        which = "the two t10k-*.gz files (the test split: enough for inference)"
    else:
        which = "the two train-*.gz files"
    return (
        f"Fashion-MNIST files not found; looked in {origin}: {looked}. Get them with "
        f"`sudo apt-get install dataset-fashion-mnist` (Debian/Ubuntu; installs into "
        f"{DEBIAN_FASHION_MNIST_DIR}), or download {which} of data/fashion from "
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
