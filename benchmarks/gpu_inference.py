"""``map_batches(device="cuda")`` against a bare PyTorch loop: a small CNN on 1M
Fashion-MNIST-sized uint8 images (28x28), the same batch size both ways.

    python benchmarks/gpu_inference.py [--images 1000000] [--batch-size 4096] [--prefetch 2]

Needs PyTorch with a visible CUDA GPU (``pip install 'accelflow[torch]'``); without them it
exits with status 2 and says what is missing. In one run, taking turns ``--repeat`` rounds
(each figure the best of its rounds):

* the bare loop: one process, the model on the GPU, each batch ``torch.from_numpy`` ->
  ``.cuda()`` -> CNN -> ``argmax`` -> ``.cpu()``, timed after a warm-up pass (CUDA context,
  cuDNN's choice of kernels);
* accelflow at each ``--parallelism`` (default 1 and 2): ``from_collection(images)`` (the
  array shared with the subtasks, rows are records) ``.map_batches(Classify(), device="cuda",
  resources={"gpu": 1/p})`` on the local cluster, whose TaskExecutor discovers the GPU and
  hands it to the subtasks (p=2: two subtasks on one GPU, half each). Printed: ``whole``
  (``execute_and_collect_batch()`` to the predictions in hand, cluster start-up included),
  ``running`` (images / (``duration_s`` - ``startup_s``)) and ``start-up``, with their ratios
  to the bare loop, and how many predictions agree with the bare loop's (the same seeded
  weights; float rounding may differ between processes, so a near tie can flip);
* ``torch import + CUDA init``: what a fresh process pays before its first batch, the floor
  under any whole job whose subtasks are new processes; and ``whole`` against the bare loop
  plus that cost, which a script running the bare loop pays too (the bare loop's figure
  above leaves it out, as the issue's targets do).

Warm devices and resident models (issue 27, ``docs/gpu.md``), in the same run:

* ``resident p=2``: the same job at p=2, half the GPU each, with ``resident=True``: one model
  in the GPU's device host serves both subtasks (``--parallelism`` values above 1 run both
  ways);
* ``session``: a session cluster (``accelflow cluster start``) on the GPU runs the job twice,
  resident and not (the images from an ``.npy`` file, mapped where the job runs): the second
  job finds the device warm (its host, or a warm subtask process); printed per job: ``first
  output`` (``execute()`` to the first prediction at a sink), ``start-up`` and ``whole``;
* ``recovery``: on that cluster, a job whose subtask is SIGKILLed once predictions come
  (``restart-strategy: fixed-delay``, no delay, no checkpoints): seconds from the kill to the
  first prediction of a replacement process, resident and not, two ways: ``full restart`` (``execution.failover.in-place:
  false``, every subtask restarted) and ``in place from the start`` (the default: the killed
  subtask replaced, the survivor rewound to the start in place; docs/failover.md).
"""

from __future__ import annotations

import argparse
import platform
import subprocess
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


def bare_loop(torch: Any, model: Any, images: np.ndarray[Any, Any], batch: int) -> tuple[float, np.ndarray[Any, Any]]:
    """Seconds for one pass, and its predictions."""
    out = []
    started = time.perf_counter()
    with torch.inference_mode():
        for start in range(0, len(images), batch):
            x = torch.from_numpy(images[start:start + batch]).cuda()
            out.append(model(x.reshape(-1, 1, 28, 28).float().div_(255)).argmax(1).cpu())
    seconds = time.perf_counter() - started
    return seconds, torch.cat(out).numpy()


GPU_CONF = {
    "external-resources": "gpu",
    "external-resource.gpu.amount": 1,
    "external-resource.gpu.driver-factory.class": "gpu",
}


def accelflow_job(images: np.ndarray[Any, Any], batch: int, prefetch: int, p: int,
                  resident: bool = False) -> dict[str, Any]:
    from accelflow import Environment

    env = Environment({"taskmanager.numberOfTaskSlots": p, **GPU_CONF})
    stream = env.from_collection(images, parallelism=p)
    out = stream.map_batches(Classify(), batch_size=batch, parallelism=p, device="cuda", resident=resident,
                             prefetch=prefetch, device_backend="torch", resources={"gpu": 1 / p})
    started = time.perf_counter()
    predictions = out.execute_and_collect_batch()
    whole = time.perf_counter() - started
    result = env.last_result
    assert result is not None and result.startup_s is not None
    return {"whole": whole, "running": result.duration_s - result.startup_s, "startup": result.startup_s,
            "predictions": predictions, "devices": dict(result.devices)}


COLD = """
import time, sys
t = [time.perf_counter()]
import torch
t.append(time.perf_counter())
torch.zeros(1, device="cuda"); torch.cuda.synchronize()
t.append(time.perf_counter())
with torch.inference_mode():
    torch.nn.functional.conv2d(torch.ones(1, 1, 8, 8, device="cuda"), torch.ones(1, 1, 3, 3, device="cuda"))
    torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
torch.cuda.synchronize()
t.append(time.perf_counter())
sys.path.insert(0, sys.argv[1])
from gpu_inference import Classify
import numpy as np
model = Classify(); model.open(None)
model.map_batch(torch.from_numpy(np.zeros((4096, 28, 28), np.uint8)).cuda()).cpu()
t.append(time.perf_counter())
print(*(b - a for a, b in zip(t, t[1:])))
"""


def cold_start() -> list[float]:
    """Seconds a fresh Python process takes to import torch, make its CUDA context, load
    cuDNN and cuBLAS (a first convolution and matrix product), and open the model and run
    its first batch: what a subtask process that is not warm pays before its first output."""
    from pathlib import Path

    out = subprocess.run([sys.executable, "-c", COLD, str(Path(__file__).parent)], check=True,
                         capture_output=True, text=True).stdout
    return [float(x) for x in out.split()]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--images", type=int, default=1_000_000)
    parser.add_argument("--batch-size", type=int, default=4096)
    parser.add_argument("--prefetch", type=int, default=2)
    parser.add_argument("--parallelism", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeat", type=int, default=2)
    parser.add_argument("--skip-warm", action="store_true",
                        help="leave out the warm-device figures (resident sharers, session cluster, recovery)")
    args = parser.parse_args(argv)
    for name in ("images", "batch_size", "prefetch", "repeat"):
        if getattr(args, name) < 1:
            parser.error(f"--{name.replace('_', '-')} must be a positive integer, got {getattr(args, name)}")
    if min(args.parallelism) < 1:
        parser.error(f"--parallelism must be positive integers, got {args.parallelism}")
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
    print(f"# {torch.cuda.get_device_name(0)}, torch {torch.__version__}, {platform.platform()}, "
          f"Python {platform.python_version()}; {args.images:,} images, batch {args.batch_size}, "
          f"prefetch {args.prefetch}, best of {args.repeat}")
    images = np.random.default_rng(0).integers(0, 256, (args.images, 28, 28), dtype=np.uint8)
    torch.manual_seed(0)
    model = _model(torch)
    bare_loop(torch, model, images[:args.batch_size * 4], args.batch_size)  # warm-up
    bare_s, expected = float("inf"), np.empty(0)
    jobs: dict[int, list[dict[str, Any]]] = {p: [] for p in args.parallelism}
    for _ in range(args.repeat):
        seconds, expected = bare_loop(torch, model, images, args.batch_size)
        bare_s = min(bare_s, seconds)
        for p in args.parallelism:
            jobs[p].append(accelflow_job(images, args.batch_size, args.prefetch, p))
    n = args.images
    print(f"bare torch loop: {n / bare_s / 1e3:8.1f}k img/s ({bare_s:.3f} s)")
    best_whole = {p: min(r["whole"] for r in runs) for p, runs in jobs.items()}
    for p, runs in jobs.items():
        whole = best_whole[p]
        running = min(r["running"] for r in runs)
        startup = min(r["startup"] for r in runs)
        agree = max(float(np.mean(r["predictions"] == expected)) for r in runs)
        print(f"accelflow p={p}: whole {n / whole / 1e3:8.1f}k img/s ({bare_s / whole:.2f}x)  "
              f"running {n / running / 1e3:8.1f}k img/s ({bare_s / running:.2f}x)  "
              f"start-up {startup:.2f} s  predictions agreeing with the bare loop {agree:.5f}")
        print(f"      devices: {runs[-1]['devices']}")
    steps = cold_start()
    cold = sum(steps[:2])
    print(f"a fresh process: torch import {steps[0]:.2f} s, CUDA context {steps[1]:.2f} s, cuDNN + cuBLAS "
          f"loaded {steps[2]:.2f} s, the model opened and its first batch {steps[3]:.2f} s (a warm "
          "subtask process has paid the first three)")
    print(f"torch import + CUDA init in a fresh process: {cold:.2f} s; the bare loop with it: "
          f"{bare_s + cold:.2f} s, against which accelflow's whole job is "
          + ", ".join(f"{(bare_s + cold) / whole:.2f}x at p={p}" for p, whole in best_whole.items()))
    if args.skip_warm:
        return 0
    from gpu_warm import warm_figures  # warm devices and resident models (issue 27)

    warm_figures(images, expected, bare_s, args)
    return 0


if __name__ == "__main__":
    sys.exit(main())
