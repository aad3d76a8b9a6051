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


# -- inference needs only the test split -----------------------------------------------------


def test_only_the_test_files_suffice_for_the_test_split(tmp_path: Path) -> None:
    directory = tmp_path / "t10k-only"
    directory.mkdir()
    for stem in STEMS[2:]:
        (directory / f"{stem}.gz").write_bytes(b"")

    files = find_fashion_mnist(directory, splits=("test",))

    assert files.test == (directory / "t10k-images-idx3-ubyte.gz",
                          directory / "t10k-labels-idx1-ubyte.gz")
    assert (files.train_images, files.train_labels) == (None, None)
    with pytest.raises(DataFormatError, match=r"has no Fashion-MNIST train files \(train-images"):
        _ = files.train


def test_the_test_split_skips_a_directory_without_test_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """$ACCELFLOW_DATA_DIR itself holds only training files; its fashion-mnist/ has the test ones."""
    base = tmp_path / "data"
    base.mkdir()
    for stem in STEMS[:2]:
        (base / stem).write_bytes(b"")
    populate(base / "fashion-mnist", suffixes=(".gz",) * 4)
    monkeypatch.setenv(DATA_DIR_ENV_VAR, str(base))

    assert find_fashion_mnist(splits=("test",)).directory == base / "fashion-mnist"
    assert find_fashion_mnist(splits=("train",)).directory == base


def test_training_still_needs_the_training_files(tmp_path: Path) -> None:
    directory = tmp_path / "t10k-only"
    directory.mkdir()
    for stem in STEMS[2:]:
        (directory / stem).write_bytes(b"")

    with pytest.raises(DataFormatError) as caught:
        find_fashion_mnist(directory)  # both splits by default

    assert "(missing train-images-idx3-ubyte[.gz], train-labels-idx1-ubyte[.gz])" in str(
        caught.value
    )


def test_a_missing_test_split_names_only_the_test_files(tmp_path: Path) -> None:
    with pytest.raises(DataFormatError) as caught:
        find_fashion_mnist(tmp_path, splits=("test",))

    message = str(caught.value)
    assert "missing t10k-images-idx3-ubyte[.gz], t10k-labels-idx1-ubyte[.gz])" in message
    assert "train-" not in message
    assert "the two t10k-*.gz files" in message


@pytest.mark.parametrize("splits", [(), ("validation",), "tset"])
def test_unknown_splits_are_refused_naming_them(tmp_path: Path, splits: object) -> None:
    with pytest.raises(ValueError, match=r"expected 'train' and/or 'test', got"):
        find_fashion_mnist(populate(tmp_path / "d"), splits=splits)  # type: ignore[arg-type]


def test_a_bare_string_is_one_split(tmp_path: Path) -> None:
    assert find_fashion_mnist(populate(tmp_path / "d"), splits="test").test_images is not None  # type: ignore[arg-type]
