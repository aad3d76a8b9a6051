"""Benchmark: N owner processes allocating from G fake GPUs through one coordination file.

Every owner is a real OS process (forked). It discovers the GPUs through the fake
``nvidia-smi`` (accelflow.testing), then repeatedly allocates one GPU in process
(``CoordinationFile.allocate``, the path the GPU driver and ``accelflow-gpu-discovery`` use),
holds it for a few milliseconds and releases it. While they run, the parent SIGKILLs about a
tenth of them; their GPUs must come back through dead-owner reclaim.

Checks, from the owners' logs (times from the system-wide monotonic clock):

* double allocations: two holding intervals of the same GPU that overlap. An interval runs
  from just after ``allocate`` returned to just before ``release`` was called (or, for a
  killed owner, to just before the parent sent SIGKILL), so it lies inside the real holding
  period and any overlap is a real double allocation.
* leaked: after every owner has exited or been killed, GPUs that a fresh allocation of all G
  cannot get.

Usage::

    python benchmarks/coordination.py [--gpus 8] [--owners 4 16 64] [--rounds 20] [--seed 1]
                                      [--dir /dev/shm]
"""

from __future__ import annotations

import argparse
import json
import multiprocessing
import os
import random
import signal
import statistics
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from accelflow import DiscoveryError
from accelflow.resources.gpu import CoordinationFile, Owner, discover_gpus
from accelflow.testing._nvidia_smi import install_fake_nvidia_smi

HOLD_S = (0.001, 0.005)
BACKOFF_S = (0.001, 0.004)


def owner_main(ledger_path: str, log_path: str, rounds: int, seed: int) -> None:
    """One owner process: allocate, hold, release, ``rounds`` times; log every step."""
    rng = random.Random(seed)
    ledger = CoordinationFile(ledger_path)
    universe = discover_gpus()
    me = Owner.of_process()
    with open(log_path, "w", buffering=1) as log:
        for _ in range(rounds):
            started = time.perf_counter()
            try:
                taken = ledger.allocate(universe, 1, me)
            except DiscoveryError:
                log.write(json.dumps({"refused": time.perf_counter() - started}) + "\n")
                time.sleep(rng.uniform(*BACKOFF_S))
                continue
            acquired = time.monotonic()
            latency = time.perf_counter() - started
            log.write(
                json.dumps({"gpu": taken[0].index, "latency": latency, "from": acquired}) + "\n"
            )
            time.sleep(rng.uniform(*HOLD_S))
            log.write(json.dumps({"until": time.monotonic()}) + "\n")
            ledger.release(taken, me)


@dataclass
class Result:
    owners: int
    gpus: int
    allocations: int
    refusals: int
    killed: int
    latencies: list[float]
    double_allocations: int
    leaked: int

    def line(self) -> str:
        ms = sorted(x * 1000 for x in self.latencies)
        p50 = statistics.median(ms) if ms else float("nan")
        p99 = ms[min(len(ms) - 1, int(0.99 * len(ms)))] if ms else float("nan")
        return (
            f"N={self.owners:<3} G={self.gpus}  allocations={self.allocations:<5} "
            f"refused={self.refusals:<5} killed={self.killed:<3} "
            f"latency p50={p50:7.2f} ms p99={p99:7.2f} ms  "
            f"double_allocations={self.double_allocations}  leaked={self.leaked}"
        )


def run(owners: int, gpus: int, rounds: int, seed: int, workdir: Path) -> Result:
    ledger_path = workdir / f"coordination-{owners}.json"
    rng = random.Random(seed)
    context = multiprocessing.get_context("fork")
    logs = [workdir / f"owner-{owners}-{i}.log" for i in range(owners)]
    processes = [
        context.Process(
            target=owner_main, args=(str(ledger_path), str(log), rounds, seed * 1000 + i)
        )
        for i, log in enumerate(logs)
    ]
    for process in processes:
        process.start()
    kill_times = _kill_some(processes, rng)
    for process in processes:
        process.join()
    intervals, latencies, refusals = _read_logs(logs, processes, kill_times)
    return Result(
        owners=owners,
        gpus=gpus,
        allocations=len(latencies),
        refusals=refusals,
        killed=len(kill_times),
        latencies=latencies,
        double_allocations=_overlaps(intervals),
        leaked=_leaked(ledger_path, gpus),
    )


def _kill_some(
    processes: Sequence[multiprocessing.process.BaseProcess], rng: random.Random
) -> dict[int, float]:
    victims = rng.sample(range(len(processes)), max(1, len(processes) // 10))
    kill_times: dict[int, float] = {}
    for victim in victims:
        time.sleep(rng.uniform(0.01, 0.1))
        pid = processes[victim].pid
        if pid is None or not processes[victim].is_alive():
            continue
        kill_times[victim] = time.monotonic()  # before the signal: the owner is surely alive
        os.kill(pid, signal.SIGKILL)
    return kill_times


def _read_logs(
    logs: list[Path],
    processes: Sequence[multiprocessing.process.BaseProcess],
    kill_times: dict[int, float],
) -> tuple[dict[str, list[tuple[float, float]]], list[float], int]:
    intervals: dict[str, list[tuple[float, float]]] = {}
    latencies: list[float] = []
    refusals = 0
    for i, log in enumerate(logs):
        open_gpu: tuple[str, float] | None = None
        for line in log.read_text().splitlines() if log.exists() else []:
            try:
                event = json.loads(line)
            except json.JSONDecodeError:
                continue  # the last line of a killed owner may be cut
            if "refused" in event:
                refusals += 1
            elif "gpu" in event:
                latencies.append(event["latency"])
                open_gpu = (event["gpu"], event["from"])
            elif "until" in event and open_gpu is not None:
                intervals.setdefault(open_gpu[0], []).append((open_gpu[1], event["until"]))
                open_gpu = None
        if open_gpu is not None:  # killed while holding: held until the kill
            end = kill_times.get(i, float("inf"))
            intervals.setdefault(open_gpu[0], []).append((open_gpu[1], end))
    return intervals, latencies, refusals


def _overlaps(intervals: dict[str, list[tuple[float, float]]]) -> int:
    count = 0
    for spans in intervals.values():
        latest_end = float("-inf")
        for start, end in sorted(spans):
            if start < latest_end:
                count += 1
            latest_end = max(latest_end, end)
    return count


def _leaked(ledger_path: Path, gpus: int) -> int:
    universe = discover_gpus()
    try:
        CoordinationFile(ledger_path).allocate(universe, gpus, Owner.of_process())
    except DiscoveryError:
        return gpus - len([r for r in CoordinationFile(ledger_path).allocations()])
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=8)
    parser.add_argument("--owners", type=int, nargs="+", default=[4, 16, 64])
    parser.add_argument("--rounds", type=int, default=20, help="allocation attempts per owner")
    parser.add_argument("--seed", type=int, default=1)
    parser.add_argument(
        "--dir",
        default=None,
        help="where the coordination file lives (default: the temp directory, like the "
        "per-user default); e.g. /dev/shm for tmpfs",
    )
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="accelflow-coordination-bench-", dir=args.dir) as temp:
        workdir = Path(temp)
        smi = install_fake_nvidia_smi(workdir / "bin", args.gpus)
        os.environ["PATH"] = f"{smi.parent}{os.pathsep}{os.environ['PATH']}"
        os.environ.pop("CUDA_VISIBLE_DEVICES", None)
        print(
            f"# coordination file under {workdir}; "
            f"{args.gpus} fake GPUs, {args.rounds} allocation attempts per owner, "
            f"hold {HOLD_S[0] * 1000:g}-{HOLD_S[1] * 1000:g} ms, ~10% of owners SIGKILLed, "
            f"{os.cpu_count()} CPUs, Python {sys.version.split()[0]}"
        )
        failed = False
        for owners in args.owners:
            result = run(owners, args.gpus, args.rounds, args.seed, workdir)
            print(result.line(), flush=True)
            failed |= result.double_allocations > 0 or result.leaked > 0
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
