"""The warm-device figures of ``benchmarks/gpu_inference.py`` (issue 27): resident sharers at
p=2, the second job on a session cluster, and the recovery from a SIGKILLed subtask (without
checkpoints: a full restart, ``execution.failover.in-place: false``, and the default, the
killed subtask replaced and the survivor rewound in place to the start). Run by
``gpu_inference.py`` after its own figures (see its docstring); the cluster and the output
sink are ``benchmarks/warm.py``'s."""

from __future__ import annotations

import os
import signal
import tempfile
import threading
import time
from pathlib import Path
from typing import Any, Self

import numpy as np
from warm import Cluster, _pids


class Outputs:
    """Notes ``<pid> <time>`` at its first batch of predictions and then every 20 ms of them,
    and passes none on: a ``map_batches`` after the model, so the job's end is the model's,
    not a million calls of a per-record sink (about 1 s a million)."""

    def __init__(self, path: str) -> None:
        self.path, self.last = path, 0.0

    def map_batch(self, predictions: Any) -> Any:
        now = time.time()
        if now - self.last >= 0.02:
            self.last = now
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()} {now}\n")
        return np.asarray(predictions)[:0]


def warm_figures(images: np.ndarray[Any, Any], expected: np.ndarray[Any, Any], bare_s: float, args: Any,
                 model: Any = None, device: str | None = "cuda", fake_gpu: bool = False) -> None:
    """Print the figures; ``model``, ``device`` and ``fake_gpu`` change only for a dry run
    of this code on a machine without a GPU (a NumPy model, no device, a fake GPU)."""
    from gpu_inference import Classify, accelflow_job

    n, model = len(images), model if model is not None else Classify()
    for p in [p for p in args.parallelism if p > 1]:
        runs: dict[bool, list[dict[str, Any]]] = {False: [], True: []}
        memory: dict[bool, list[tuple[int, int]]] = {False: [], True: []}
        for _ in range(args.repeat):  # in turns, in this run
            for resident in (False, True):
                with GpuMemory(enabled=not fake_gpu) as sampled:
                    runs[resident].append(accelflow_job(images, args.batch_size, args.prefetch, p,
                                                        resident=resident))
                memory[resident].append((sampled.peak_mib, sampled.processes))
        for resident, done in runs.items():
            running = min(r["running"] for r in done)
            agree = max(float(np.mean(r["predictions"] == expected)) for r in done)
            print(f"accelflow p={p} at 1/{p} each, resident={resident}: running {n / running / 1e3:8.1f}k img/s "
                  f"({bare_s / running:.2f}x), whole {bare_s / min(r['whole'] for r in done):.2f}x, "
                  f"predictions agreeing {agree:.5f}")
            if not fake_gpu:
                print("      GPU memory of the job's processes at its peak, per run: "
                      + ", ".join(f"{mib} MiB in {count} process{'es' if count != 1 else ''}"
                                  for mib, count in memory[resident]))
    with tempfile.TemporaryDirectory(prefix="accelflow-gpu-warm-") as name:
        tmp = Path(name)
        (tmp / "lib").mkdir()
        np.save(tmp / "images.npy", images)  # mapped by the subtasks, not pickled to the cluster
        cluster = Cluster(tmp, {"taskmanager.numberOfTaskSlots": 4}, fake_gpu=fake_gpu)
        os.environ["ACCELFLOW_STATE_DIR"] = cluster.env["ACCELFLOW_STATE_DIR"]
        cluster.start()
        try:
            for resident in (False, True):
                for job in ("first", "second"):
                    f = session_job(cluster, tmp, model, args.batch_size, resident=resident, device=device,
                                    name=f"{job}-{resident}")
                    print(f"session, resident={resident}, {job} job: first output {f['first output']:.3f} s, "
                          f"start-up {f['start-up']:.3f} s, whole {bare_s / f['whole']:.2f}x of the bare loop")
                for in_place, how in ((False, "full restart"), (True, "in place from the start")):
                    f = session_job(cluster, tmp, model, args.batch_size, resident=resident, device=device,
                                    name=f"kill-{resident}-{in_place}", kill=True, in_place=in_place)
                    print(f"session, resident={resident}: a subtask SIGKILLed, {how}: a replacement's output after "
                          f"{f['recovery']:.3f} s")
        finally:
            cluster.stop()


class Nothing:
    """The job's sink: ``Outputs`` passes no records on."""

    def invoke(self, record: Any) -> None:
        raise AssertionError(f"Outputs passes no records on, got {record!r}")


class HostModel:
    """A NumPy stand-in for ``gpu_inference.Classify`` (a dry run without a GPU): the sum of
    each image's pixels, modulo 10."""

    def open(self, ctx: Any) -> None:
        pass

    def map_batch(self, images: Any) -> Any:
        return np.asarray(images).reshape(len(images), -1).sum(1) % 10


class GpuMemory:
    """While entered, samples the GPU's compute processes (``nvidia-smi``) every 50 ms (those that held the
    GPU before, this process among them, left out): the peak of their summed memory and how many
    there were then. Resident sharers should hold one CUDA context and one model between them."""

    def __init__(self, enabled: bool = True) -> None:
        self.enabled, self.peak_mib, self.processes = enabled, 0, 0
        self._stop = threading.Event()

    def _sample(self) -> dict[int, int]:
        """MiB per process computing on the GPU (accelflow's own listing, as its health checks)."""
        from accelflow.resources.gpu._probe import smi_compute_processes

        return {p.pid: (p.used_memory or 0) >> 20 for p in smi_compute_processes("nvidia-smi")}

    def _run(self) -> None:
        while not self._stop.wait(0.05):
            now = {pid: mib for pid, mib in self._sample().items() if pid not in self._before}
            if sum(now.values()) > self.peak_mib:
                self.peak_mib, self.processes = sum(now.values()), len(now)

    def __enter__(self) -> Self:
        if self.enabled:
            self._before = set(self._sample()) | {os.getpid()}
            self._thread = threading.Thread(target=self._run, daemon=True)
            self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self.enabled:
            self._stop.set()
            self._thread.join()


def session_job(cluster: Cluster, tmp: Path, model: Any, batch: int, *, resident: bool, device: str | None,
                name: str, kill: bool = False, in_place: bool = True) -> dict[str, float]:
    """One job of 2 subtasks at half the GPU on ``cluster``, submitted from this process; with
    ``kill``, one subtask is SIGKILLed once both give outputs, and the job restarts without
    checkpoints: in place (the default) or, ``in_place=False``, every subtask."""
    from accelflow import Environment
    from accelflow.runtime.client import ExecutionContext, use_context

    outputs = tmp / f"{name}.outputs"
    conf: dict[str, Any] = {"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s",
                            "execution.failover.in-place": in_place}
    images = np.load(tmp / "images.npy", mmap_mode="r")
    killed: list[float] = []
    with use_context(ExecutionContext(cluster_url=cluster.url)):
        env = Environment(conf if kill else {})
        env.from_collection(images, parallelism=2).map_batches(
            Paced(model, 0.05) if kill else model, batch_size=batch, parallelism=2, device=device, resident=resident,
            device_backend="torch" if device else None, resources={"gpu": 0.5}
        ).map_batches(Outputs(str(outputs)), batch_size=batch, parallelism=2).add_sink(Nothing())
        if kill:
            threading.Thread(target=_kill_one, args=(outputs, killed), daemon=True).start()
        t0 = time.time()
        env.execute(name)
        whole = time.time() - t0
    times = [(int(p), float(t)) for p, t in (line.split() for line in outputs.read_text().splitlines())]
    figures = {"first output": min(t for _, t in times) - t0, "start-up": env.last_result.startup_s, "whole": whole}
    if kill and not killed:
        raise RuntimeError(f"{name}: no subtask was running to be killed")
    if killed:
        # a replacement's first output (a process without outputs before the kill), not the
        # survivor's, which goes on when it rolls back in place
        before = {p for p, t in times if t <= killed[0]}
        figures["recovery"] = min(t for p, t in times if t > killed[0] and p not in before) - killed[0]
    return figures


class Paced:
    """``model`` with ``delay`` seconds after each batch: on a fast GPU a job of 1M images
    runs for about a second, over before a subtask could be killed mid-way."""

    def __init__(self, model: Any, delay: float) -> None:
        self.model, self.delay = model, delay

    def open(self, ctx: Any) -> None:
        self.model.open(ctx)

    def map_batch(self, images: Any) -> Any:
        out = self.model.map_batch(images)
        time.sleep(self.delay)
        return out


def _kill_one(outputs: Path, killed: list[float]) -> None:
    """SIGKILL the first subtask that gave an output and still runs, once both subtasks give
    outputs."""
    deadline = time.monotonic() + 300
    while len(_pids(outputs)) < 2 and time.monotonic() < deadline:
        time.sleep(0.005)
    for pid in _pids(outputs):
        now = time.time()
        try:
            os.kill(pid, signal.SIGKILL)
        except ProcessLookupError:  # finished already
            continue
        killed.append(now)
        return
