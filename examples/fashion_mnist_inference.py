"""Real-time Fashion-MNIST inference on the GPU each classifier subtask was assigned.

The Flink blog's MNIST example, end to end: a stream of 28x28 images is read from the IDX
files and preprocessed, classified by a one-layer network (softmax regression) on the device
the operator got from its ``RuntimeContext``, and the predictions go to a sink. The summary
reports accuracy, images/s and which subtask used which device.

Run it on the embedded local cluster::

    accelflow run examples/fashion_mnist_inference.py                       # CPU, no GPU set up
    accelflow run --conf conf/accelflow.yaml examples/fashion_mnist_inference.py   # one GPU
    accelflow run --conf conf/two-taskexecutors.yaml \\
        examples/fashion_mnist_inference.py --parallelism 4                # 2 TEs x 2 GPUs

Options (after the script): ``--data-dir DIR``, ``--limit N``, ``--parallelism P``,
``--gpu-amount A`` (per classifier subtask, e.g. 1 or 0.5), ``--output FILE`` or
``--output -`` (stdout), ``--model PATH``, ``--batch-size B``.
"""

from __future__ import annotations

import argparse
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import Environment, IdxSource, RichMapBatchesFunction, RuntimeContext
from accelflow.io import find_fashion_mnist

sys.path.insert(0, str(Path(__file__).resolve().parent))
from fashion_mnist_model import CLASS_NAMES, DEFAULT_MODEL_PATH, load_model  # noqa: E402
from gpu_backend import array_module, pick_backend, to_numpy  # noqa: E402


class Preprocess(RichMapBatchesFunction):
    """uint8 images (N, 28, 28) -> float32 rows (N, 784), exactly as in training."""

    def __init__(self, model_path: str) -> None:
        self.model_path = model_path

    def open(self, ctx: RuntimeContext) -> None:
        self.model = load_model(self.model_path)

    def map_batch(self, batch: Any) -> Any:
        images, labels = batch
        return self.model.preprocess(images), labels


class Classify(RichMapBatchesFunction):
    """argmax(x @ W + b) on the assigned GPU with CuPy or PyTorch, else NumPy on the CPU."""

    def __init__(self, model_path: str, resource: str | None) -> None:
        self.model_path = model_path
        self.resource = resource

    def open(self, ctx: RuntimeContext) -> None:
        self.model = load_model(self.model_path)
        gpus = sorted(ctx.get_external_resource_infos(self.resource)) if self.resource else []
        self.device = gpus[0] if gpus else None
        self.xp, how = pick_backend(self.device, self.resource)
        self.label = f"{ctx.operator_name} ({ctx.index_of_this_subtask + 1}/" \
                     f"{ctx.number_of_parallel_subtasks})"
        print(f"[{self.label}] {how}", flush=True)

    def map_batch(self, batch: Any) -> Any:
        x, labels = batch  # device arrays with map_batches(device="auto") on a GPU
        predictions = self.model.predict(x, xp=array_module(x, self.xp))
        return to_numpy(predictions).astype(np.int64), to_numpy(labels).astype(np.int64)


def _format(record: Any) -> str:
    prediction, label = record
    return f"{int(prediction)},{int(label)},{CLASS_NAMES[int(prediction)]}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--data-dir", help="directory of the Fashion-MNIST test files "
                        "(t10k-images/labels, raw or .gz); the training files are not needed")
    parser.add_argument("--limit", type=int, help="classify only the first N test images")
    parser.add_argument("--parallelism", type=int, default=1, help="classifier subtasks")
    parser.add_argument("--gpu-amount", default="1", help="GPU share per classifier subtask")
    parser.add_argument("--output", default=None, help="predictions file, or - for stdout")
    parser.add_argument("--model", default=str(DEFAULT_MODEL_PATH), help="weights (.npz)")
    parser.add_argument("--batch-size", type=int, default=1024)
    args = parser.parse_args(argv)
    for name in ("limit", "parallelism", "batch_size"):
        value = getattr(args, name)
        if value is not None and value < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {value}")

    files = find_fashion_mnist(args.data_dir, splits=("test",))  # inference: t10k-* only
    images, labels = files.test
    load_model(args.model)  # fail now, naming the file, rather than in every subtask
    env = Environment()  # slots are sized to the job unless the config sets them
    resource = "gpu" if "gpu" in env.config.external_resources else None
    if resource is None:
        print("No GPU resource configured (external-resources has no 'gpu'): classifying on the "
              "CPU. See README 'Use your own GPU'.", flush=True)
    requests = {resource: args.gpu_amount} if resource else None

    source = env.from_source(IdxSource(images, labels, limit=args.limit), name="fashion-mnist")
    features = source.map_batches(Preprocess(args.model), name="preprocess",
                                  batch_size=args.batch_size, parallelism=args.parallelism)
    predictions = features.map_batches(Classify(args.model, resource), name="classify",
                                       batch_size=args.batch_size, parallelism=args.parallelism,
                                       resources=requests, device="auto" if resource else None)
    if args.output == "-":
        predictions.map(_format, name="format").print()
    elif args.output:
        predictions.map(_format, name="format").sink_to_file(args.output)
    started = time.perf_counter()
    # (prediction, label) pairs as two arrays: no Python object per image
    predicted, truth = predictions.execute_and_collect_batch("fashion-mnist-inference")
    result = env.last_result
    elapsed = time.perf_counter() - started
    accuracy = float((predicted == truth).mean())

    print(f"images: {len(predicted)} from {images}")
    print(f"throughput: {len(predicted) / elapsed:,.0f} images/s "
          f"(job {elapsed:.2f} s incl. cluster start-up {result.startup_s or 0:.2f} s)")
    print("devices:")
    for subtask in sorted(result.devices) or ["(none: no classifier subtask requested a device)"]:
        print(f"  {subtask}: {result.devices.get(subtask, '')}".rstrip(": "))
    if args.output and args.output != "-":
        print(f"predictions: {args.output}")
    print(f"accuracy: {accuracy:.4f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
