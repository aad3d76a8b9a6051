"""Warm devices and resident models, a CPU proxy that runs on every machine (issue 27).

    .venv/bin/python benchmarks/warm.py [--repeat 3] [--open-s 2] [--import-s 1]

A session cluster (``accelflow cluster start``) with one fake GPU (``accelflow.testing``'s fake
``nvidia-smi``) runs a job of two subtasks at half the GPU each: a paced source, then
``map_batches(SlowModel(...), resources={"gpu": 0.5}, parallelism=2)``, whose module takes
``--import-s`` of CPU work to import and whose ``open()`` loads a 32 MiB weights file and works
the CPU until ``--open-s`` have passed (a model's load; nothing sleeps), then a sink
that notes when outputs come. Jobs are ``accelflow run --cluster`` runs of a job script, as a
user's. Four ways, in turns (each round starts a fresh cluster per way):

* ``today``: every subtask forked (``taskmanager.device-pool.size: 0``), the model opened in it;
* ``warm``: warm subtask processes (``device-pool.size: 2``, one per subtask on the device,
  ``warm.preload`` the model's module), the model opened in the subtask;
* ``warm-default``: the same with ``device-pool.size`` left at its default (1): the pool
  keeps a process per subtask its device ran at once (2 here) all the same;
* ``resident``: ``resident=True``: one instance on the device, in its device host.

Each way first runs the job on an embedded local cluster started for it (``local cluster's
job``: ``accelflow run`` without ``--cluster``, the cluster's start included; its TaskExecutor
warms the job's device as it starts), then starts the session cluster and runs a first job on
it, a second job (the same script), then three jobs whose subtask is SIGKILLed once outputs
come (``restart-strategy: fixed-delay``, no delay):

* ``full restart after SIGKILL``: no checkpoints and ``execution.failover.in-place: false``:
  every subtask is cancelled and restarts (Flink's full restart);
* ``in place from the start``: no checkpoints, the default: only the killed subtask is
  replaced, the survivor rewinds to the start in place (docs/failover.md "Without
  checkpointing");
* ``in place after SIGKILL``: checkpoints every 500 ms: the same, back to the last checkpoint.

Printed per job: ``start-up`` (``JobResult.startup_s``), ``first output`` (seconds from
``execute()`` to the first output at the sink), ``slower first output`` (to the first output of
the later of the job's two subtasks: one that started cold shows here), the ``open()`` calls
and the imports of the model's module on the job's way during the job (by the processes that
opened it: a forked subtask, a device host; not a warm process's ``warm.preload`` import ahead
of its subtask, even one the subtask waited for), and for the killed jobs ``recovery`` (the
kill to the first output of a replacement process) and the ``open()`` calls and imports on the
way after the kill; times: the median of the rounds and the spread (min - max); counts: the
median and each round's. Also the round trip of a 4096x784 uint8 batch between two processes
through ``conn.send`` and through the out-of-band frames a resident operator uses.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
from pathlib import Path
from typing import Any

import numpy as np

WAYS = {
    "today": {"taskmanager.device-pool.size": 0},
    "warm": {"taskmanager.device-pool.size": 2, "external-resource.gpu.warm.preload": "slow_model"},
    "warm-default": {"external-resource.gpu.warm.preload": "slow_model"},
    "resident": {},
}

SLOW_MODEL = '''
"""The model. Importing this module takes IMPORT_S of real CPU work (matrix products, as a
framework's import initialising itself), open() loads the model's weights from a file
(WEIGHTS, written by the benchmark) and then works the CPU until OPEN_S have passed (as a
model's load and warm-up). Neither sleeps: both take a core, as the real ones do. The log
says whether a warm process imported it ahead of its subtask (``warm.preload``) or the
process that uses it did on its way (a forked subtask unpickling its operator, a device host
making a resident instance, the client)."""
import os, sys, time
import numpy as np
IMPORT_S, OPEN_S = {import_s}, {open_s}
LOG, WEIGHTS = {log!r}, {weights!r}


def _work(seconds, started):
    a = np.ones((128, 128))
    while time.perf_counter() - started < seconds:
        a = a @ a / 128.0


def _ahead():
    frame = sys._getframe(1)
    while frame is not None:
        if frame.f_code.co_name == "preload" and frame.f_code.co_filename.endswith("_warmup.py"):
            return True
        frame = frame.f_back
    return False


_BEGAN = time.time()
_work(IMPORT_S, time.perf_counter())
with open(LOG, "a") as f:
    f.write(f"import {{os.getpid()}} {{time.time()}} {{'ahead' if _ahead() else 'on-the-way'}}\\n")


class SlowModel:
    def open(self, ctx):
        started = time.perf_counter()
        self.weights = np.load(WEIGHTS)
        _work(OPEN_S, started)
        with open(LOG, "a") as f:
            f.write(f"open {{os.getpid()}} {{time.time()}}\\n")

    def map_batch(self, batch):
        return batch * 2
'''

BENCH_OPS = '''
"""The source and sink of the benchmark job (light: no model import)."""
import os, time
import numpy as np
from accelflow import Source


class Paced(Source):
    def __init__(self, n, chunk, delay):
        self.n, self.chunk, self.delay = n, chunk, delay
    def create_splits(self, parallelism):
        return list(range(parallelism))
    def read(self, split, ctx):
        raise NotImplementedError
    def read_chunks(self, split, ctx):
        for start in range(split * self.chunk, self.n, self.chunk * 2):
            time.sleep(self.delay)
            yield np.arange(start, min(start + self.chunk, self.n), dtype=np.int64)


class Outputs:
    """Notes ``<pid> <time>`` at the first output and then every 20 ms of outputs."""
    def __init__(self, path):
        self.path, self.last = path, 0.0
    def invoke(self, record):
        now = time.time()
        if now - self.last >= 0.02:
            self.last = now
            with open(self.path, "a") as f:
                f.write(f"{os.getpid()} {now}\\n")
'''

JOB = '''
import json, os, sys, time
from accelflow import Environment
from bench_ops import Outputs, Paced
from slow_model import SlowModel

args = json.loads(sys.argv[1])
env = Environment(args["conf"])
env.from_source(Paced(args["n"], 64, args["delay"]), parallelism=2).map_batches(
    SlowModel(), batch_size=64, resident=args["resident"], resources={"gpu": 0.5}, parallelism=2
).add_sink(Outputs(args["outputs"]))
t0 = time.time()
env.execute("warm benchmark")
print(json.dumps({"t0": t0, "startup": env.last_result.startup_s, "pid": os.getpid()}))
'''


class Cluster:
    """A cluster with one GPU (a fake one unless ``fake_gpu`` is False), its own state
    directory, in ``tmp``; ``tmp/lib`` and this process's import path on its import path.
    A session cluster once :meth:`start` ran; before, each job starts its own embedded local
    cluster (``accelflow run`` without ``--cluster``) with the same keys."""

    def __init__(self, tmp: Path, definitions: dict[str, Any], fake_gpu: bool = True) -> None:
        from accelflow.testing import install_fake_nvidia_smi

        self.env = dict(os.environ, ACCELFLOW_STATE_DIR=str(tmp / "state"),
                        PYTHONPATH=os.pathsep.join([str(tmp / "lib"), *[p for p in sys.path if p]]))
        self.env.pop("ACCELFLOW_CONF", None)
        if fake_gpu:
            install_fake_nvidia_smi(tmp / "bin", 1, environ=self.env)
            self.env.pop("CUDA_VISIBLE_DEVICES", None)
        self.defs = {"external-resources": "gpu", "external-resource.gpu.amount": 1,
                     "external-resource.gpu.driver-factory.class": "gpu", "taskmanager.numberOfTaskSlots": 4,
                     "external-resource.gpu.param.coordination-file": str(tmp / "coordination.json"),
                     **definitions}
        self.url = ""

    def start(self) -> None:
        """Start the session cluster."""
        out = self.cli("cluster", "start", *[a for k, v in dict(self.defs, **{"rest.port": 0}).items()
                                             for a in ("-D", f"{k}={v}")])
        if out.returncode:
            raise RuntimeError(out.stderr)
        self.url = next(line.split()[-1] for line in out.stdout.splitlines() if line.startswith("REST API"))

    def cli(self, *args: str, **popen: Any) -> subprocess.CompletedProcess[str]:
        return subprocess.run([sys.executable, "-m", "accelflow", *args], env=self.env, capture_output=True,
                              text=True, timeout=300, **popen)

    def stop(self) -> None:
        out = self.cli("cluster", "stop", "--cluster", self.url)
        if out.returncode:
            raise RuntimeError(f"accelflow cluster stop failed: {out.stderr}")


def _events(log: Path, event: str, since: float) -> int:
    """``event`` lines of the model's log since ``since`` on the job's way: by processes that
    opened the model (a subtask, or a device host; not the client's and the JobManager's
    imports of the job's modules), and not a warm process's import ahead of its subtask."""
    if not log.exists():
        return 0
    words = [line.split() for line in log.read_text().splitlines()]
    opened = {w[1] for w in words if w[0] == "open"}
    return sum(1 for w in words if w[0] == event and float(w[2]) >= since and w[1] in opened and w[-1] != "ahead")


def _pids(outputs: Path) -> list[int]:
    """The processes that gave outputs so far, the first first."""
    found: list[int] = []
    for line in outputs.read_text().splitlines() if outputs.exists() else []:
        if int(line.split()[0]) not in found:
            found.append(int(line.split()[0]))
    return found


def run_job(cluster: Cluster, tmp: Path, name: str, resident: bool, *, n: int = 20_000, delay: float = 0.02,
            kill: bool = False, conf: dict[str, Any] | None = None) -> dict[str, float]:
    """One job through ``accelflow run --cluster`` (``accelflow run``: a local cluster for the
    job, before :meth:`Cluster.start`); its figures (see the module). A killed job runs long
    enough (``n`` records, ``delay`` between chunks) to be killed mid-way."""
    outputs, log = tmp / f"{name}.outputs", tmp / "model.log"
    conf = {**({} if cluster.url else cluster.defs), **(conf or {})}
    args = {"conf": conf, "resident": resident, "outputs": str(outputs), "n": n, "delay": delay}
    started = time.time()
    target = ["--cluster", cluster.url] if cluster.url else []
    proc = subprocess.Popen([sys.executable, "-m", "accelflow", "run", *target,
                             str(tmp / "job" / "job.py"), json.dumps(args)], env=cluster.env,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    killed_at, before = None, set[int]()
    if kill:  # SIGKILL the subtask that gave the first output, once both give outputs
        while len(_pids(outputs)) < 2 and proc.poll() is None:
            time.sleep(0.01)
        before = set(_pids(outputs))
        victim = _pids(outputs)[0]
        killed_at = time.time()
        os.kill(victim, signal.SIGKILL)
    out, err = proc.communicate(timeout=300)
    if proc.returncode:
        raise RuntimeError(f"{name} failed:\n{err}")
    result = json.loads(out.strip().splitlines()[-1])
    times = [(int(p), float(t)) for p, t in (line.split() for line in outputs.read_text().splitlines())]
    firsts = [min(t for p, t in times if p == pid) for pid in _pids(outputs)[:2]]  # the job's own two
    figures = {"start-up": result["startup"], "first output": min(firsts) - result["t0"],
               "slower first output": (max(firsts) if len(firsts) > 1 else float("nan")) - result["t0"],
               "open()": _events(log, "open", started),
               "imports": _events(log, "import", started)}
    if killed_at is not None:
        # the first output of a process that gave none before the kill (a replacement), not
        # the last ones of its neighbour before the restart reaches it
        figures["recovery"] = min(t for p, t in times if t > killed_at and p not in before) - killed_at
        figures["open() after kill"] = _events(log, "open", killed_at)
        figures["imports after kill"] = _events(log, "import", killed_at)
    return figures


def one_round(way: str, open_s: float, import_s: float) -> dict[str, dict[str, float]]:
    with tempfile.TemporaryDirectory(prefix="accelflow-warm-") as name:
        tmp = Path(name)
        # the model's module installed where the cluster imports it from (modules next to a job
        # script travel with the job instead, by value: nothing to import)
        (tmp / "lib").mkdir()
        (tmp / "lib" / "slow_model.py").write_text(
            SLOW_MODEL.format(import_s=import_s, open_s=open_s, log=str(tmp / "model.log"),
                              weights=str(tmp / "weights.npy")))
        np.save(tmp / "weights.npy", np.random.default_rng(0).standard_normal((4096, 2048), dtype=np.float32))
        (tmp / "lib" / "bench_ops.py").write_text(textwrap.dedent(BENCH_OPS))
        (tmp / "job").mkdir()
        (tmp / "job" / "job.py").write_text(textwrap.dedent(JOB))
        cluster = Cluster(tmp, WAYS[way])
        resident = way == "resident"
        # a local cluster started for the job (``Environment.execute()`` in a script): its
        # start-up and first output include the cluster's start
        local = run_job(cluster, tmp, "local", resident, n=2_000, delay=0.005)
        cluster.start()
        try:
            restart = {"restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"}
            return {
                "local cluster's job": local,
                "first job": run_job(cluster, tmp, "first", resident, n=2_000, delay=0.005),
                "second job": run_job(cluster, tmp, "second", resident, n=2_000, delay=0.005),
                # every subtask restarts: both open (forked, warm) or reuse the instance again
                "full restart after SIGKILL": run_job(cluster, tmp, "full", resident, kill=True,
                                                      conf={**restart, "execution.failover.in-place": False}),
                # the default: the survivor rolls back in place (docs/failover.md), only the
                # killed subtask's replacement opens (forked, warm) or reuses the instance
                "in place from the start": run_job(cluster, tmp, "unchecked", resident, kill=True, conf=restart),
                "in place after SIGKILL": run_job(cluster, tmp, "in-place", resident, kill=True,
                                                  conf={**restart, "execution.checkpointing.interval": "500 ms"}),
            }
        finally:
            cluster.stop()


def round_trip(rounds: int = 20) -> dict[str, float]:
    """Seconds for a 4096x784 uint8 batch to go to another process and back, two ways."""
    import multiprocessing

    from accelflow.runtime import recv_chunk, send_chunk

    batch = np.random.default_rng(0).integers(0, 256, (4096, 784), dtype=np.uint8)
    figures = {}
    for way in ("conn.send", "out-of-band"):
        parent, child = multiprocessing.Pipe()
        echo = multiprocessing.get_context("fork").Process(target=_echo, args=(child, way), daemon=True)
        echo.start()
        best = float("inf")
        for _ in range(rounds):
            t = time.perf_counter()
            if way == "conn.send":
                parent.send(batch)
                back = parent.recv()
            else:
                send_chunk(parent, None, batch)
                _, back = recv_chunk(parent)
            best = min(best, time.perf_counter() - t)
            assert back.shape == batch.shape
        parent.send(None) if way == "conn.send" else send_chunk(parent, None, None)
        echo.join()
        figures[way] = best
    return figures


def _echo(conn: Any, way: str) -> None:
    from accelflow.runtime import recv_chunk, send_chunk

    while True:
        if way == "conn.send":
            item = conn.recv()
            if item is None:
                return
            conn.send(item)
        else:
            _, item = recv_chunk(conn)
            if item is None:
                return
            send_chunk(conn, None, item)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--open-s", type=float, default=2.0)
    parser.add_argument("--import-s", type=float, default=1.0)
    parser.add_argument("--ways", nargs="+", choices=list(WAYS), default=list(WAYS))
    args = parser.parse_args(argv)
    if args.repeat < 1:
        parser.error(f"--repeat must be a positive integer, got {args.repeat}")
    print(f"# benchmarks/warm.py: {platform.platform()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores; open() {args.open_s:g} s, import {args.import_s:g} s, 2 subtasks at "
          f"gpu 0.5 on 1 fake GPU; median of {args.repeat} rounds (min - max; counts: each round), ways in turns")
    runs: dict[str, list[dict[str, dict[str, float]]]] = {way: [] for way in args.ways}
    for _ in range(args.repeat):
        for way in args.ways:
            runs[way].append(one_round(way, args.open_s, args.import_s))
    for way, rounds in runs.items():
        print(f"\n## {way}")
        for job in rounds[0]:
            cells = []
            for figure in rounds[0][job]:
                values = [r[job][figure] for r in rounds]
                median = statistics.median(values)
                if figure.startswith(("open()", "imports")):
                    cells.append(f"{figure} {median:g} ({', '.join(f'{v:g}' for v in values)})")
                else:
                    cells.append(f"{figure} {median:.3f} s ({min(values):.3f} - {max(values):.3f})")
            print(f"  {job + ':':28}" + "; ".join(cells))
    trip = round_trip()
    print("\n# a 4096x784 uint8 batch to another process and back (best of 20): "
          + ", ".join(f"{way} {seconds * 1e3:.2f} ms" for way, seconds in trip.items()))
    return 0


if __name__ == "__main__":
    sys.exit(main())
