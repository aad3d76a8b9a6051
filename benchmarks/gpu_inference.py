"""map_batches(device="cuda") against a bare PyTorch loop: a small CNN on 1M Fashion-MNIST-sized
uint8 images (28x28), the same batch size both ways; prints images/s and the ratios.

NOT RUN HERE: the machine this was written on has no GPU and no torch, so no numbers come with
it. Run it on a CUDA machine with PyTorch (``pip install 'accelflow[torch]'``)::

    python benchmarks/gpu_inference.py --images 1000000 --batch-size 1024 --prefetch 2

Without torch or a visible CUDA device it exits with status 2 and says what is missing.
"""

from __future__ import annotations

import argparse
import sys
import time
from typing import Any

import numpy as np


def _model(torch: Any) -> Any:
    nn = torch.nn
    return nn.Sequential(
        nn.Conv2d(1, 16, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Conv2d(16, 32, 3, padding=1), nn.ReLU(), nn.MaxPool2d(2),
        nn.Flatten(), nn.Linear(32 * 7 * 7, 10),
    ).cuda().eval()


class Classify:
    """The CNN in each subtask; ``map_batch`` gets uint8 images already on the device."""

    def open(self, ctx: Any) -> None:
        import torch

        torch.manual_seed(0)
        self.torch, self.model = torch, _model(torch)

    def map_batch(self, images: Any) -> Any:
        with self.torch.inference_mode():
            x = images.reshape(-1, 1, 28, 28).float().div_(255)
            return self.model(x).argmax(1)


def bare_loop(torch: Any, images: np.ndarray[Any, Any], batch: int) -> float:
    torch.manual_seed(0)
    model = _model(torch)
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(images), batch):
            x = torch.from_numpy(images[start:start + batch]).cuda()
            model(x.reshape(-1, 1, 28, 28).float().div_(255)).argmax(1).cpu()
    return len(images) / (time.perf_counter() - started)


def accelflow_job(images: np.ndarray[Any, Any], batch: int, prefetch: int) -> float:
    from accelflow import Environment

    env = Environment({"parallelism.default": 1})
    stream = env.from_collection(images)  # a NumPy array: shared with the subtask, rows are records
    out = stream.map_batches(Classify(), batch_size=batch, device="cuda", prefetch=prefetch,
                             device_backend="torch")
    started = time.perf_counter()
    count = len(out.execute_and_collect_batch())
    return count / (time.perf_counter() - started)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=1024)
    parser.add_argument("--prefetch", type=int, default=2)
    args = parser.parse_args(argv)
    try:
        import torch
    except ImportError:
        print("gpu_inference: PyTorch is not installed (pip install 'accelflow[torch]'); nothing to measure",
              file=sys.stderr)
        return 2
    if not torch.cuda.is_available():
        print("gpu_inference: torch sees no CUDA device (torch.cuda.is_available() is False); "
              "nothing to measure", file=sys.stderr)
        return 2
    images = np.random.default_rng(0).integers(0, 256, (args.images, 28, 28), dtype=np.uint8)
    bare = bare_loop(torch, images, args.batch_size)
    job = accelflow_job(images, args.batch_size, args.prefetch)
    print(f"bare torch loop:            {bare:,.0f} images/s")
    print(f"map_batches(device='cuda'): {job:,.0f} images/s (prefetch {args.prefetch}, incl. cluster start-up)")
    print(f"ratio accelflow/bare: {job / bare:.2f}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
