"""The Fashion-MNIST model shipped with the examples: its accuracy, its preprocessing, the
validation of its weights file, and the determinism of the training script."""

from __future__ import annotations

import dataclasses
import gzip
import os
import pickle
import struct
import subprocess
import sys
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt
import pytest

from accelflow import DataFormatError
from accelflow.io import DEBIAN_FASHION_MNIST_DIR, find_fashion_mnist, read_labeled_pair

EXAMPLES = Path(__file__).resolve().parents[2] / "examples"
if str(EXAMPLES) not in sys.path:
    sys.path.insert(0, str(EXAMPLES))

import fashion_mnist_model as fmm  # noqa: E402
import train_fashion_mnist as tfm  # noqa: E402

needs_data = pytest.mark.skipif(
    not (DEBIAN_FASHION_MNIST_DIR / "t10k-labels-idx1-ubyte.gz").is_file(),
    reason=f"{DEBIAN_FASHION_MNIST_DIR} is absent: apt-get install dataset-fashion-mnist",
)


def synthetic(count: int, seed: int) -> tuple[npt.NDArray[np.uint8], npt.NDArray[np.uint8]]:
    """Random images labelled by a fixed random linear teacher (so they are learnable)."""
    rng = np.random.default_rng(seed)
    images = rng.integers(0, 256, size=(count, 28, 28), dtype=np.uint8)
    teacher = np.random.default_rng(1234).normal(size=(784, 10))
    centred = images.reshape(count, 784) / 255.0 - 0.5
    return images, np.argmax(centred @ teacher, axis=1).astype(np.uint8)


def valid_arrays() -> dict[str, npt.NDArray[Any]]:
    rng = np.random.default_rng(7)
    return {
        "format_version": np.array(1),
        "weights": rng.normal(size=(784, 10)).astype(np.float32),
        "bias": np.zeros(10, np.float32),
        "pixel_scale": np.array(1 / 255, np.float32),
        "pixel_mean": np.full(784, 0.25, np.float32),
        "pixel_std": np.full(784, 0.5, np.float32),
        "class_names": np.array(fmm.CLASS_NAMES),
    }


def small_model() -> fmm.SoftmaxModel:
    arrays = valid_arrays()
    return fmm.SoftmaxModel(
        arrays["weights"],
        arrays["bias"],
        float(arrays["pixel_scale"]),
        arrays["pixel_mean"],
        arrays["pixel_std"],
        metadata={"seed": 3, "note": "test"},
    )


# -- the shipped weights ---------------------------------------------------------------------


@needs_data
def test_shipped_weights_reach_80_percent_on_the_test_set() -> None:
    model = fmm.load_model()
    images, labels = read_labeled_pair(*find_fashion_mnist(DEBIAN_FASHION_MNIST_DIR).test)

    accuracy = model.accuracy(images, labels)

    assert accuracy >= 0.80
    assert accuracy == pytest.approx(model.metadata["test_accuracy"], abs=1e-6)


@needs_data
def test_shipped_preprocessing_is_the_one_fitted_to_the_training_set() -> None:
    model = fmm.load_model()
    images, labels = read_labeled_pair(*find_fashion_mnist(DEBIAN_FASHION_MNIST_DIR).train)

    scale, mean, std = fmm.preprocessing_for(images)

    assert model.pixel_scale == scale
    np.testing.assert_allclose(model.pixel_mean, mean, rtol=1e-6)
    np.testing.assert_allclose(model.pixel_std, std, rtol=1e-6)
    assert model.accuracy(images, labels) == pytest.approx(
        model.metadata["train_accuracy"], abs=1e-6
    )


def test_shipped_file_is_small_and_plain_float32() -> None:
    assert fmm.DEFAULT_MODEL_PATH.stat().st_size < 100_000
    model = fmm.load_model()
    assert model.weights.dtype == np.float32 and model.weights.shape == (784, 10)
    assert model.class_names == fmm.CLASS_NAMES
    assert model.source == str(fmm.DEFAULT_MODEL_PATH)


# -- preprocessing and prediction ------------------------------------------------------------


def test_preprocess_applies_scale_mean_and_std_in_float32() -> None:
    model = small_model()
    images, _ = synthetic(5, seed=0)

    x = model.preprocess(images)

    expected = (images.reshape(5, 784).astype(np.float32) * np.float32(1 / 255) - 0.25) / 0.5
    assert x.dtype == np.float32 and x.shape == (5, 784)
    np.testing.assert_array_equal(x, expected.astype(np.float32))
    np.testing.assert_array_equal(model.preprocess(images.reshape(5, 784)), x)


@pytest.mark.parametrize(
    ("images", "message"),
    [
        (np.zeros((2, 28, 28), np.float32), "images must be uint8 pixels 0..255"),
        (np.zeros((2, 27, 27), np.uint8), r"shape \(N, 28, 28\) or \(N, 784\), got \(2, 27, 27\)"),
        (np.zeros(784, np.uint8), r"got \(784,\)"),
    ],
    ids=["float", "27x27", "1-d"],
)
def test_preprocess_rejects_other_inputs(images: npt.NDArray[Any], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        small_model().preprocess(images)


class CountingNamespace:
    """An honest stand-in for cupy/torch adapters: NumPy underneath, counting transfers."""

    def __init__(self) -> None:
        self.transfers = 0

    def asarray(self, array: Any) -> Any:
        self.transfers += 1
        return np.asarray(array)

    def argmax(self, array: Any, axis: int) -> Any:
        return np.argmax(array, axis=axis)


def test_predict_through_another_array_namespace_caches_the_weights() -> None:
    model = small_model()
    x = model.preprocess(synthetic(8, seed=1)[0])
    xp = CountingNamespace()

    first = model.predict(x, xp=xp)
    second = model.predict(x, xp=xp)

    np.testing.assert_array_equal(first, np.argmax(x @ model.weights + model.bias, axis=1))
    np.testing.assert_array_equal(second, first)
    assert xp.transfers == 2 + 2  # weights and bias once, plus the input of each call
    copy = pickle.loads(pickle.dumps(model))
    np.testing.assert_array_equal(copy.predict(x), first)


def test_model_constructor_validates() -> None:
    arrays = valid_arrays()
    with pytest.raises(ValueError, match=r"weights must be float32 \(784, 10\), got float64"):
        fmm.SoftmaxModel(
            arrays["weights"].astype(np.float64),
            arrays["bias"],
            1 / 255,
            arrays["pixel_mean"],
            arrays["pixel_std"],
        )


# -- the weights file ------------------------------------------------------------------------


def test_save_and_load_round_trip_reproducibly(tmp_path: Path) -> None:
    model = small_model()
    first = model.save(tmp_path / "new" / "model.npz")
    first_bytes = first.read_bytes()
    model.save(first)

    loaded = fmm.load_model(first)

    assert first.read_bytes() == first_bytes
    assert os.listdir(first.parent) == ["model.npz"]  # no temp files left behind
    for name in ("weights", "bias", "pixel_mean", "pixel_std"):
        np.testing.assert_array_equal(getattr(loaded, name), getattr(model, name))
    assert loaded.pixel_scale == pytest.approx(1 / 255)
    assert loaded.metadata == {"note": "test", "seed": 3}
    assert loaded.source == str(first)


def test_failed_save_leaves_the_old_file(tmp_path: Path) -> None:
    target = small_model().save(tmp_path / "model.npz")
    before = target.read_bytes()
    unsavable = {"unsavable": None}
    broken = dataclasses.replace(small_model(), metadata=unsavable)  # type: ignore[arg-type]

    with pytest.raises(ValueError):
        broken.save(target)

    assert target.read_bytes() == before
    assert os.listdir(tmp_path) == ["model.npz"]


def write_npz(path: Path, arrays: dict[str, Any]) -> Path:
    with open(path, "wb") as handle:
        np.savez(handle, **arrays)
    return path


def changed(**changes: Any) -> dict[str, Any]:
    arrays: dict[str, Any] = valid_arrays()
    for key, value in changes.items():
        if value is None:
            del arrays[key]
        else:
            arrays[key] = value
    return arrays


NAN_BIAS = np.zeros(10, np.float32)
NAN_BIAS[3] = np.nan


@pytest.mark.parametrize(
    ("arrays", "message"),
    [
        (changed(weights=None), "not a softmax model file: missing weights"),
        (changed(format_version=np.array(2)), "format_version is array(2); this code reads "
         "version 1"),
        (changed(weights=np.zeros((784, 10))), "weights must be float32 (784, 10), got float64"),
        (changed(weights=np.zeros((10, 784), np.float32)), "got float32 (10, 784)"),
        (changed(bias=NAN_BIAS), "bias has 1 NaN/inf values"),
        (changed(pixel_std=np.zeros(784, np.float32)), "every pixel_std must be > 0"),
        (changed(class_names=np.arange(10)), "class_names must be a 1-D array of >= 2 strings"),
        (changed(class_names=np.array(["a", "b", "c"])), "bias must be float32 (3,)"),
        (changed(note=np.array([{"x": 1}], dtype=object)), "cannot read as a NumPy .npz of "
         "plain arrays"),
    ],
    ids=["missing", "version", "float64", "transposed", "nan", "std0", "names", "k3", "pickle"],
)
def test_bad_weights_file_is_named_with_its_problem(
    tmp_path: Path, arrays: dict[str, Any], message: str
) -> None:
    path = write_npz(tmp_path / "model.npz", arrays)

    with pytest.raises(DataFormatError) as caught:
        fmm.load_model(path)

    assert caught.value.path == str(path)
    assert str(caught.value).startswith(f"{path}: ")
    assert message in str(caught.value)


def test_single_array_file_is_not_a_model(tmp_path: Path) -> None:
    path = tmp_path / "model.npz"
    with open(path, "wb") as handle:
        np.save(handle, valid_arrays()["weights"])

    with pytest.raises(DataFormatError, match="holds a single NumPy array, not an .npz"):
        fmm.load_model(path)


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (None, "model file not found; create it with `python examples/train_fashion_mnist.py"),
        (b"weights,bias\n1,2\n", "cannot read as a NumPy .npz of plain arrays"),
        (b"PK\x03\x04 truncated", "cannot read as a NumPy .npz of plain arrays"),
    ],
    ids=["missing", "text", "broken-zip"],
)
def test_unreadable_weights_file(tmp_path: Path, content: bytes | None, message: str) -> None:
    path = tmp_path / "model.npz"
    if content is not None:
        path.write_bytes(content)

    with pytest.raises(DataFormatError) as caught:
        fmm.load_model(path)

    assert str(caught.value).startswith(f"{path}: ") and message in str(caught.value)


# -- training --------------------------------------------------------------------------------


def test_training_is_deterministic_per_seed() -> None:
    images, labels = synthetic(2000, seed=5)
    schedule = tfm.TrainingSchedule(epochs=1, seed=0)

    first = tfm.train(images, labels, schedule)
    again = tfm.train(images, labels, schedule)
    other = tfm.train(images, labels, tfm.TrainingSchedule(epochs=1, seed=1))

    np.testing.assert_array_equal(first.weights, again.weights)
    np.testing.assert_array_equal(first.bias, again.bias)
    assert not np.array_equal(first.weights, other.weights)
    scale, mean, std = fmm.preprocessing_for(images)
    np.testing.assert_array_equal(first.pixel_mean, mean)
    np.testing.assert_array_equal(first.pixel_std, std)
    assert first.accuracy(images, labels) > 0.5  # learnt the teacher, well above 0.1 chance


def test_training_rejects_bad_labels() -> None:
    images, labels = synthetic(10, seed=0)
    labels[2] = 10

    with pytest.raises(ValueError, match="one label in 0..9 per image"):
        tfm.train(images, labels, tfm.TrainingSchedule(epochs=1))


def encode_uint8(array: npt.NDArray[np.uint8]) -> bytes:
    header = bytes([0, 0, 0x08, array.ndim]) + struct.pack(f">{array.ndim}I", *array.shape)
    return gzip.compress(header + array.tobytes(), mtime=0)


@pytest.fixture
def tiny_data_dir(tmp_path: Path) -> Path:
    directory = tmp_path / "fashion"
    directory.mkdir()
    for prefix, count, seed in (("train", 300, 1), ("t10k", 100, 2)):
        images, labels = synthetic(count, seed)
        (directory / f"{prefix}-images-idx3-ubyte.gz").write_bytes(encode_uint8(images))
        (directory / f"{prefix}-labels-idx1-ubyte.gz").write_bytes(encode_uint8(labels))
    return directory


def run_script(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, str(EXAMPLES / "train_fashion_mnist.py"), *args],
        capture_output=True,
        text=True,
        timeout=120,
        env=env,
        check=False,
    )


def test_script_trains_and_writes_the_model(tiny_data_dir: Path, tmp_path: Path) -> None:
    out = tmp_path / "out" / "model.npz"

    result = run_script("--data-dir", str(tiny_data_dir), "--out", str(out), "--epochs", "2",
                        "--seed", "3")

    assert result.returncode == 0, result.stderr
    assert "train accuracy" in result.stdout and "test accuracy" in result.stdout
    model = fmm.load_model(out)
    assert model.metadata["epochs"] == 2 and model.metadata["seed"] == 3
    assert f"test accuracy {model.metadata['test_accuracy']:.4f} (100 images)" in result.stdout


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--epochs", "0"], "argument --epochs: must be an integer >= 1, got '0'"),
        (["--epochs", "ten"], "argument --epochs: must be an integer, got 'ten'"),
        (["--seed", "-1"], "argument --seed: must be an integer >= 0, got '-1'"),
        (["--out", "model.txt"], "argument --out: must end in .npz, got 'model.txt'"),
        (["--data-dir", "/nonexistent/dir"], "argument --data-dir: '/nonexistent/dir' is not a "
         "directory"),
    ],
    ids=["epochs0", "epochs-text", "seed", "out", "data-dir"],
)
def test_script_rejects_bad_arguments(args: list[str], message: str) -> None:
    result = run_script(*args)

    assert result.returncode == 2
    assert message in result.stderr


def test_script_without_data_says_how_to_get_it(tmp_path: Path) -> None:
    result = run_script("--data-dir", str(tmp_path), "--out", str(tmp_path / "m.npz"))

    assert result.returncode == 1
    assert result.stderr.startswith(f"error: {tmp_path}: Fashion-MNIST files not found")
    assert "apt-get install dataset-fashion-mnist" in result.stderr
    assert not (tmp_path / "m.npz").exists()
