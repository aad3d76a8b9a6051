"""Locating the four Fashion-MNIST files: given directory, $ACCELFLOW_DATA_DIR, Debian's path."""

from __future__ import annotations

from pathlib import Path

import pytest

from accelflow import DataFormatError
from accelflow.io import DATA_DIR_ENV_VAR, FashionMnistFiles, _fashion_mnist, find_fashion_mnist

STEMS = (
    "train-images-idx3-ubyte",
    "train-labels-idx1-ubyte",
    "t10k-images-idx3-ubyte",
    "t10k-labels-idx1-ubyte",
)


def populate(directory: Path, *, suffixes: tuple[str, ...] = (".gz",) * 4) -> Path:
    """Create the four files by name (content is checked only when read, not when found)."""
    directory.mkdir(parents=True, exist_ok=True)
    for stem, suffix in zip(STEMS, suffixes, strict=True):
        (directory / (stem + suffix)).write_bytes(b"")
    return directory


@pytest.fixture(autouse=True)
def no_defaults(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> Path:
    """No $ACCELFLOW_DATA_DIR, and a Debian directory that does not exist, unless a test says."""
    monkeypatch.delenv(DATA_DIR_ENV_VAR, raising=False)
    missing = tmp_path / "debian-datasets" / "fashion-mnist"
    monkeypatch.setattr(_fashion_mnist, "DEBIAN_FASHION_MNIST_DIR", missing)
    return missing


def test_finds_files_in_the_given_directory(tmp_path: Path) -> None:
    directory = populate(tmp_path / "data", suffixes=(".gz", "", ".gz", ""))

    files = find_fashion_mnist(directory)

    assert files == FashionMnistFiles(
        directory=directory,
        train_images=directory / "train-images-idx3-ubyte.gz",
        train_labels=directory / "train-labels-idx1-ubyte",
        test_images=directory / "t10k-images-idx3-ubyte.gz",
        test_labels=directory / "t10k-labels-idx1-ubyte",
    )
    assert files.train == (files.train_images, files.train_labels)
    assert files.test == (files.test_images, files.test_labels)


def test_prefers_the_raw_file_when_both_exist(tmp_path: Path) -> None:
    directory = populate(tmp_path / "data")
    (directory / "t10k-images-idx3-ubyte").write_bytes(b"")

    assert find_fashion_mnist(str(directory)).test_images == directory / "t10k-images-idx3-ubyte"


def test_given_directory_is_the_only_place_searched(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(populate(tmp_path / "env")))
    given = populate(tmp_path / "given", suffixes=(".gz", ".gz", ".gz", ".zip"))

    with pytest.raises(DataFormatError) as caught:
        find_fashion_mnist(given)

    message = str(caught.value)
    assert caught.value.path == str(given)
    assert f"looked in the directory given: {given} (missing t10k-labels-idx1-ubyte[.gz])" in (
        message
    )


def test_uses_the_environment_variable(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(populate(tmp_path / "env")))

    assert find_fashion_mnist().directory == tmp_path / "env"


def test_environment_variable_may_point_at_the_parent(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    populate(tmp_path / "data" / "fashion-mnist")
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path / "data"))

    assert find_fashion_mnist().directory == tmp_path / "data" / "fashion-mnist"


def test_environment_variable_pointing_nowhere(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(tmp_path / "absent"))

    with pytest.raises(DataFormatError) as caught:
        find_fashion_mnist()

    assert (
        f"looked in ${DATA_DIR_ENV_VAR}={tmp_path / 'absent'}: {tmp_path / 'absent'} (does not "
        f"exist); {tmp_path / 'absent' / 'fashion-mnist'} (does not exist)"
    ) in str(caught.value)


def test_falls_back_to_the_debian_directory(no_defaults: Path) -> None:
    populate(no_defaults)

    assert find_fashion_mnist().directory == no_defaults


def test_not_found_says_how_to_get_the_files(no_defaults: Path) -> None:
    with pytest.raises(DataFormatError) as caught:
        find_fashion_mnist()

    message = str(caught.value)
    assert "Fashion-MNIST files not found; looked in the default (Debian's " in message
    assert f"{no_defaults} (does not exist)" in message
    assert "apt-get install dataset-fashion-mnist" in message
    assert "https://github.com/zalandoresearch/fashion-mnist" in message
    assert f"set {DATA_DIR_ENV_VAR} to it" in message
