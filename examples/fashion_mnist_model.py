"""The Fashion-MNIST softmax-regression model shared by training, inference, tests and benchmarks.

One place for the maths, so every user applies exactly the preprocessing the weights were
trained with::

    x = (uint8 pixels * pixel_scale - pixel_mean) / pixel_std     # float32, (N, 784)
    logits = x @ weights + bias                                   # (N, 10)
    prediction = argmax(logits, axis=1)

The weights file is a small ``.npz`` (float32 arrays, no pickles) holding the weights *and*
the preprocessing constants; :func:`load_model` validates it and names the file in every error.

Import it with the ``examples`` directory on ``sys.path``::

    from fashion_mnist_model import load_model

    model = load_model()                        # examples/models/fashion_mnist_softmax.npz
    predictions = model.predict(model.preprocess(images))      # NumPy on the CPU
    predictions = model.predict(model.preprocess(images), xp=cupy)  # the current CUDA device
"""

from __future__ import annotations

import os
import tempfile
import zipfile
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from accelflow import DataFormatError

FORMAT_VERSION = 1
"""Version of the ``.npz`` layout written by :meth:`SoftmaxModel.save`."""

IMAGE_SHAPE = (28, 28)
NUM_PIXELS = 28 * 28
CLASS_NAMES = (
    "T-shirt/top",
    "Trouser",
    "Pullover",
    "Dress",
    "Coat",
    "Sandal",
    "Shirt",
    "Sneaker",
    "Bag",
    "Ankle boot",
)
"""Fashion-MNIST's labels 0..9, in order."""

DEFAULT_MODEL_PATH = Path(__file__).resolve().parent / "models" / "fashion_mnist_softmax.npz"
"""The weights the repository ships, made by ``examples/train_fashion_mnist.py``."""

MIN_PIXEL_STD = 0.05
"""Floor of a pixel's standard deviation (in [0, 1] units), so near-constant border pixels of
the training set are not blown up when a test image differs there."""

_FLOAT_ARRAYS = ("weights", "bias", "pixel_scale", "pixel_mean", "pixel_std")
_REQUIRED = ("format_version", *_FLOAT_ARRAYS, "class_names")
_META_PREFIX = "meta_"

Float32Array = npt.NDArray[np.float32]


@dataclass(frozen=True, eq=False)
class SoftmaxModel:
    """Softmax regression over preprocessed 28x28 images.

    Attributes:
        weights: float32 ``(784, K)``.
        bias: float32 ``(K,)``.
        pixel_scale: multiplies raw uint8 pixels, ``1/255`` (to [0, 1]).
        pixel_mean: float32 ``(784,)``, subtracted after scaling.
        pixel_std: float32 ``(784,)``, divides after centring (all > 0).
        class_names: ``K`` names, e.g. :data:`CLASS_NAMES`.
        metadata: how it was trained (seed, epochs, accuracies), informational.
        source: the file it was loaded from, if any.

    Example:
        >>> model = load_model()
        >>> model.predict(model.preprocess(images[:3]))  # doctest: +SKIP
        array([9, 2, 1])
    """

    weights: Float32Array
    bias: Float32Array
    pixel_scale: float
    pixel_mean: Float32Array
    pixel_std: Float32Array
    class_names: tuple[str, ...] = CLASS_NAMES
    metadata: Mapping[str, int | float | str] = field(default_factory=dict)
    source: str | None = None
    _on_device: dict[int, tuple[Any, Any, Any]] = field(
        default_factory=dict, init=False, repr=False
    )

    def __post_init__(self) -> None:
        problems = _problems(self._arrays())
        if problems:
            raise ValueError("invalid softmax model: " + "; ".join(problems))

    @property
    def num_classes(self) -> int:
        """``K``, the number of classes."""
        return len(self.class_names)

    def preprocess(self, images: npt.ArrayLike) -> Float32Array:
        """Turn raw uint8 images into the model's float32 input rows.

        Args:
            images: uint8 pixels 0..255, shape ``(N, 28, 28)`` or ``(N, 784)``, as read from an
                IDX images file.

        Returns:
            A new float32 array ``(N, 784)``.

        Raises:
            ValueError: the dtype or shape is not as above.
        """
        pixels = np.asarray(images)
        if pixels.dtype != np.uint8:
            raise ValueError(
                f"images must be uint8 pixels 0..255 as read from the IDX file, got {pixels.dtype}"
            )
        if pixels.shape[1:] not in (IMAGE_SHAPE, (NUM_PIXELS,)) or pixels.ndim not in (2, 3):
            raise ValueError(
                f"images must have shape (N, 28, 28) or (N, 784), got {pixels.shape}"
            )
        x = pixels.reshape(len(pixels), NUM_PIXELS).astype(np.float32)
        x *= np.float32(self.pixel_scale)
        x -= self.pixel_mean
        x /= self.pixel_std
        return x

    def predict_logits(self, x: Any, xp: Any = np) -> Any:
        """``x @ weights + bias`` in the array library ``xp``.

        Args:
            x: preprocessed rows ``(N, 784)``; converted with ``xp.asarray``.
            xp: an array namespace with ``asarray`` and ``argmax`` (``numpy``, ``cupy``, or an
                adapter for torch). The weights are copied to it once and cached.

        Returns:
            ``(N, K)`` logits as an ``xp`` array.
        """
        weights, bias = self._weights_for(xp)
        return xp.asarray(x) @ weights + bias

    def predict(self, x: Any, xp: Any = np) -> Any:
        """The predicted class index of each row, as an ``xp`` array ``(N,)``."""
        return xp.argmax(self.predict_logits(x, xp), axis=1)

    def accuracy(self, images: npt.ArrayLike, labels: npt.ArrayLike) -> float:
        """The fraction of raw uint8 ``images`` classified as ``labels``, with NumPy."""
        predicted = self.predict(self.preprocess(images))
        expected = np.asarray(labels)
        if expected.shape != predicted.shape:
            raise ValueError(f"{expected.shape[0]} labels for {predicted.shape[0]} images")
        return float(np.mean(predicted == expected)) if expected.size else 0.0

    def save(self, path: str | os.PathLike[str]) -> Path:
        """Write the model as ``.npz`` atomically (temp file + rename) and reproducibly.

        The same model always gives the same bytes (fixed zip timestamps), so a retrained
        but unchanged model does not show up as a change in git.
        """
        target = Path(path)
        arrays = {**self._arrays(), "format_version": np.array(FORMAT_VERSION, np.int64)}
        for key, value in sorted(self.metadata.items()):
            arrays[_META_PREFIX + key] = np.array(value)
        _write_npz_atomically(target, arrays)
        return target

    def __getstate__(self) -> dict[str, Any]:
        state = {name: getattr(self, name) for name in self.__dataclass_fields__}
        state["_on_device"] = {}  # device arrays stay on the process that made them
        return state

    def __setstate__(self, state: dict[str, Any]) -> None:
        for name, value in state.items():
            object.__setattr__(self, name, value)

    def _arrays(self) -> dict[str, npt.NDArray[Any]]:
        return {
            "weights": np.asarray(self.weights),
            "bias": np.asarray(self.bias),
            "pixel_scale": np.asarray(self.pixel_scale, dtype=np.float32),
            "pixel_mean": np.asarray(self.pixel_mean),
            "pixel_std": np.asarray(self.pixel_std),
            "class_names": np.asarray(self.class_names, dtype=str),
        }

    def _weights_for(self, xp: Any) -> tuple[Any, Any]:
        cached = self._on_device.get(id(xp))
        if cached is None or cached[0] is not xp:
            cached = (xp, xp.asarray(self.weights), xp.asarray(self.bias))
            self._on_device[id(xp)] = cached
        return cached[1], cached[2]


def preprocessing_for(images: npt.ArrayLike) -> tuple[float, Float32Array, Float32Array]:
    """The preprocessing constants fitted to training images: ``(scale, mean, std)``.

    ``scale`` is ``1/255``; ``mean`` and ``std`` are per pixel over the scaled images, stored
    as float32, with ``std`` floored at :data:`MIN_PIXEL_STD`. They are computed from exact
    integer sums of the pixels, so they do not depend on the platform's float summation order,
    and without a float copy of the whole training set.
    """
    pixels = np.asarray(images)
    if pixels.dtype != np.uint8 or pixels.ndim not in (2, 3) or not len(pixels):
        raise ValueError(f"need a non-empty uint8 image batch, got {pixels.dtype} {pixels.shape}")
    rows = pixels.reshape(len(pixels), -1)
    total = rows.sum(axis=0, dtype=np.int64)
    squares = np.zeros_like(total)
    for start in range(0, len(rows), 8192):
        chunk = rows[start : start + 8192].astype(np.int64)
        squares += np.einsum("ij,ij->j", chunk, chunk)
    count = len(rows)
    scale = float(np.float32(1.0 / 255.0))
    variance_numerator = squares * count - total * total  # exact: count**2 * var(pixels)
    mean = (total / count * scale).astype(np.float32)
    std = np.sqrt(variance_numerator.astype(np.float64)) / count * scale
    return scale, mean, np.maximum(std, MIN_PIXEL_STD).astype(np.float32)


def load_model(path: str | os.PathLike[str] = DEFAULT_MODEL_PATH) -> SoftmaxModel:
    """Load and validate a model written by :meth:`SoftmaxModel.save`.

    Args:
        path: the ``.npz`` file; default :data:`DEFAULT_MODEL_PATH`.

    Raises:
        DataFormatError: the file is missing, not an ``.npz``, of another format version, or
            any array is missing or has the wrong dtype, shape or values; names the file.
    """
    name = os.fspath(path)
    arrays = _read_npz(name)
    missing = [key for key in _REQUIRED if key not in arrays]
    if missing:
        raise DataFormatError(
            f"not a softmax model file: missing {', '.join(missing)} (has "
            f"{', '.join(sorted(arrays)) or 'nothing'}); write it with "
            "examples/train_fashion_mnist.py",
            path=name,
        )
    version = arrays["format_version"]
    if version.shape != () or version.dtype.kind not in "iu" or int(version) != FORMAT_VERSION:
        raise DataFormatError(
            f"format_version is {version!r}; this code reads version {FORMAT_VERSION} "
            "(retrain with examples/train_fashion_mnist.py)",
            path=name,
        )
    problems = _problems(arrays)
    if problems:
        raise DataFormatError("invalid softmax model: " + "; ".join(problems), path=name)
    return _model_from(arrays, name)


def _read_npz(name: str) -> dict[str, npt.NDArray[Any]]:
    if not Path(name).is_file():
        raise DataFormatError(
            "model file not found; create it with "
            f"`python examples/train_fashion_mnist.py --out {name}`",
            path=name,
        )
    try:
        # Open the file ourselves: np.load leaks its own handle when the zip is broken.
        with open(name, "rb") as handle:
            loaded = np.load(handle, allow_pickle=False)
            if not isinstance(loaded, np.lib.npyio.NpzFile):
                raise DataFormatError(
                    "holds a single NumPy array, not an .npz archive of the model's arrays; "
                    "write it with examples/train_fashion_mnist.py",
                    path=name,
                )
            with loaded as npz:
                return {key: npz[key] for key in npz.files}
    except (OSError, ValueError, EOFError, zipfile.BadZipFile) as exc:
        raise DataFormatError(
            f"cannot read as a NumPy .npz of plain arrays ({exc}); retrain with "
            "examples/train_fashion_mnist.py",
            path=name,
        ) from exc


def _problems(arrays: Mapping[str, npt.NDArray[Any]]) -> list[str]:
    """Every problem with the model arrays, one phrase each (empty when valid)."""
    names = arrays["class_names"]
    if names.ndim != 1 or names.dtype.kind != "U" or names.size < 2:
        return [f"class_names must be a 1-D array of >= 2 strings, got {names.dtype} {names.shape}"]
    k = names.size
    expected = {
        "weights": (NUM_PIXELS, k),
        "bias": (k,),
        "pixel_scale": (),
        "pixel_mean": (NUM_PIXELS,),
        "pixel_std": (NUM_PIXELS,),
    }
    problems = []
    for key, shape in expected.items():
        array = arrays[key]
        if array.dtype != np.float32 or array.shape != shape:
            problems.append(f"{key} must be float32 {shape}, got {array.dtype} {array.shape}")
        elif not np.all(np.isfinite(array)):
            problems.append(f"{key} has {int(np.sum(~np.isfinite(array)))} NaN/inf values")
    if not problems and not (np.all(arrays["pixel_std"] > 0) and arrays["pixel_scale"] > 0):
        problems.append("pixel_scale and every pixel_std must be > 0")
    return problems


def _model_from(arrays: Mapping[str, npt.NDArray[Any]], source: str) -> SoftmaxModel:
    metadata = {
        key.removeprefix(_META_PREFIX): arrays[key].item()
        for key in sorted(arrays)
        if key.startswith(_META_PREFIX) and arrays[key].shape == ()
    }
    return SoftmaxModel(
        weights=arrays["weights"],
        bias=arrays["bias"],
        pixel_scale=float(arrays["pixel_scale"]),
        pixel_mean=arrays["pixel_mean"],
        pixel_std=arrays["pixel_std"],
        class_names=tuple(str(n) for n in arrays["class_names"]),
        metadata=metadata,
        source=source,
    )


def _write_npz_atomically(target: Path, arrays: Mapping[str, npt.NDArray[Any]]) -> None:
    target.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp_name = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.", suffix=".tmp")
    try:
        with os.fdopen(fd, "wb") as raw, zipfile.ZipFile(raw, "w") as archive:
            for key in sorted(arrays):
                info = zipfile.ZipInfo(key + ".npy", date_time=(1980, 1, 1, 0, 0, 0))
                info.compress_type = zipfile.ZIP_DEFLATED
                info.external_attr = 0o644 << 16
                with archive.open(info, "w") as member:
                    np.lib.format.write_array(member, arrays[key], allow_pickle=False)
        os.chmod(tmp_name, 0o644)
        os.replace(tmp_name, target)
    except BaseException:
        Path(tmp_name).unlink(missing_ok=True)
        raise


__all__ = [
    "CLASS_NAMES",
    "DEFAULT_MODEL_PATH",
    "FORMAT_VERSION",
    "MIN_PIXEL_STD",
    "SoftmaxModel",
    "load_model",
    "preprocessing_for",
]
