"""Train the softmax-regression classifier of the Fashion-MNIST inference example, in NumPy.

Deterministic: the seed fixes the order of the mini-batches (the only randomness; weights start
at zero), and the learning-rate schedule is fixed, so the same data, seed and epochs give the
same weights (on the same NumPy/BLAS build) and the same ``.npz`` bytes.

Usage::

    python examples/train_fashion_mnist.py [--data-dir DIR] [--out PATH] [--epochs N] [--seed S]

It reads the Fashion-MNIST files (``--data-dir``, else ``$ACCELFLOW_DATA_DIR``, else Debian's
``/usr/share/datasets/fashion-mnist``), trains mini-batch SGD with momentum on the 60,000
training images, prints the train and test accuracy and writes the weights and preprocessing
constants to ``examples/models/fashion_mnist_softmax.npz``.
"""

from __future__ import annotations

import argparse
import dataclasses
import sys
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

sys.path.insert(0, str(Path(__file__).resolve().parent))

from fashion_mnist_model import (  # noqa: E402
    CLASS_NAMES,
    DEFAULT_MODEL_PATH,
    SoftmaxModel,
    preprocessing_for,
)

from accelflow import AccelflowError  # noqa: E402
from accelflow.io import find_fashion_mnist, read_labeled_pair  # noqa: E402


@dataclass(frozen=True, slots=True, kw_only=True)
class TrainingSchedule:
    """The fixed optimisation settings (part of what makes a run reproducible).

    Attributes:
        epochs: passes over the training set.
        seed: seeds the shuffling of each epoch.
        batch_size: images per SGD step.
        learning_rate: peak step size; decays along a cosine to 0 over all steps.
        momentum: heavy-ball momentum.
        weight_decay: L2 penalty on the weights (not the bias).
    """

    epochs: int = 10
    seed: int = 0
    batch_size: int = 128
    learning_rate: float = 0.01
    momentum: float = 0.9
    weight_decay: float = 1e-4

    def __post_init__(self) -> None:
        if self.epochs < 1 or self.batch_size < 1 or self.seed < 0:
            raise ValueError(f"epochs and batch_size must be >= 1 and seed >= 0: {self}")


def train(
    images: npt.NDArray[Any],
    labels: npt.NDArray[Any],
    schedule: TrainingSchedule,
    *,
    log: Callable[[str], None] | None = None,
) -> SoftmaxModel:
    """Fit softmax regression to uint8 ``images`` ``(N, 28, 28)`` and ``labels`` 0..9.

    The preprocessing constants are fitted to ``images`` first and the training rows are made
    by :meth:`SoftmaxModel.preprocess` itself, so inference applies exactly the same steps.

    Example:
        >>> model = train(images, labels, TrainingSchedule(epochs=1, seed=0))  # doctest: +SKIP
    """
    y = np.asarray(labels, dtype=np.intp)
    if y.shape != (len(images),) or y.size == 0 or y.min() < 0 or y.max() >= len(CLASS_NAMES):
        raise ValueError(f"need one label in 0..{len(CLASS_NAMES) - 1} per image, got {y.shape}")
    scale, mean, std = preprocessing_for(images)
    weights = np.zeros((mean.size, len(CLASS_NAMES)), np.float32)
    bias = np.zeros(len(CLASS_NAMES), np.float32)
    x = SoftmaxModel(weights.copy(), bias.copy(), scale, mean, std).preprocess(images)
    rng = np.random.default_rng(schedule.seed)
    steps_per_epoch = -(-len(x) // schedule.batch_size)
    velocity_w, velocity_b = np.zeros_like(weights), np.zeros_like(bias)
    for epoch in range(schedule.epochs):
        order = rng.permutation(len(x))
        loss = 0.0
        for step in range(steps_per_epoch):
            batch = order[step * schedule.batch_size : (step + 1) * schedule.batch_size]
            progress = (epoch * steps_per_epoch + step) / (schedule.epochs * steps_per_epoch)
            rate = np.float32(schedule.learning_rate * 0.5 * (1 + np.cos(np.pi * progress)))
            grad_w, grad_b, batch_loss = _gradients(x[batch], y[batch], weights, bias, schedule)
            velocity_w *= np.float32(schedule.momentum)
            velocity_w -= rate * grad_w
            velocity_b *= np.float32(schedule.momentum)
            velocity_b -= rate * grad_b
            weights += velocity_w
            bias += velocity_b
            loss += batch_loss * len(batch)
        if log is not None:
            log(f"epoch {epoch + 1}/{schedule.epochs}: mean loss {loss / len(x):.4f}")
    return SoftmaxModel(weights, bias, scale, mean, std)


def _gradients(
    x: npt.NDArray[np.float32],
    y: npt.NDArray[np.intp],
    weights: npt.NDArray[np.float32],
    bias: npt.NDArray[np.float32],
    schedule: TrainingSchedule,
) -> tuple[npt.NDArray[np.float32], npt.NDArray[np.float32], float]:
    """Cross-entropy gradients of one batch (plus weight decay) and its mean loss."""
    logits = x @ weights + bias
    logits -= logits.max(axis=1, keepdims=True)
    exp = np.exp(logits)
    probabilities = exp / exp.sum(axis=1, keepdims=True)
    rows = np.arange(len(y))
    loss = float(-np.mean(np.log(probabilities[rows, y] + np.float32(1e-12))))
    probabilities[rows, y] -= np.float32(1.0)
    probabilities /= np.float32(len(y))
    grad_w = x.T @ probabilities + np.float32(schedule.weight_decay) * weights
    return grad_w, probabilities.sum(axis=0), loss


def _positive_int(text: str) -> int:
    value = _int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be an integer >= 1, got {text!r}")
    return value


def _non_negative_int(text: str) -> int:
    value = _int(text)
    if value < 0:
        raise argparse.ArgumentTypeError(f"must be an integer >= 0, got {text!r}")
    return value


def _int(text: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"must be an integer, got {text!r}") from None


def _npz_path(text: str) -> Path:
    path = Path(text).expanduser()
    if path.suffix != ".npz":
        raise argparse.ArgumentTypeError(f"must end in .npz, got {text!r}")
    if path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is a directory; give a file name ending .npz")
    return path


def _existing_dir(text: str) -> Path:
    path = Path(text).expanduser()
    if not path.is_dir():
        raise argparse.ArgumentTypeError(f"{text!r} is not a directory")
    return path


def build_parser() -> argparse.ArgumentParser:
    """The command line of this script."""
    parser = argparse.ArgumentParser(
        prog="train_fashion_mnist.py",
        description="Train the Fashion-MNIST softmax-regression model in NumPy (deterministic).",
    )
    parser.add_argument(
        "--data-dir",
        type=_existing_dir,
        help="directory with the four Fashion-MNIST IDX files (raw or .gz); default: "
        "$ACCELFLOW_DATA_DIR, else /usr/share/datasets/fashion-mnist",
    )
    parser.add_argument(
        "--out",
        type=_npz_path,
        default=DEFAULT_MODEL_PATH,
        help=f"where to write the weights (default: {DEFAULT_MODEL_PATH})",
    )
    defaults = TrainingSchedule()
    parser.add_argument(
        "--epochs", type=_positive_int, default=defaults.epochs, help="passes over the data"
    )
    parser.add_argument(
        "--seed", type=_non_negative_int, default=defaults.seed, help="shuffling seed"
    )
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    """Run the script; returns the exit code (0 ok, 1 data error, 2 usage error)."""
    args = build_parser().parse_args(argv)
    schedule = TrainingSchedule(epochs=args.epochs, seed=args.seed)
    try:
        files = find_fashion_mnist(args.data_dir)  # training reads both splits
        train_images, train_labels = read_labeled_pair(*files.train)
        test_images, test_labels = read_labeled_pair(*files.test)
    except AccelflowError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 1
    print(f"training on {len(train_images)} images from {files.directory}: {schedule}")
    started = time.perf_counter()
    model = train(train_images, train_labels, schedule, log=print)
    seconds = time.perf_counter() - started
    train_accuracy = model.accuracy(train_images, train_labels)
    test_accuracy = model.accuracy(test_images, test_labels)
    final = dataclasses.replace(
        model,
        metadata={
            "epochs": schedule.epochs,
            "seed": schedule.seed,
            "train_accuracy": round(train_accuracy, 6),
            "test_accuracy": round(test_accuracy, 6),
        },
    )
    final.save(args.out)
    print(f"trained in {seconds:.1f} s")
    print(f"train accuracy {train_accuracy:.4f} ({len(train_images)} images)")
    print(f"test accuracy {test_accuracy:.4f} ({len(test_images)} images)")
    print(f"wrote {args.out} ({args.out.stat().st_size} bytes)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
