"""Device health: what an Xid on a running subtask's GPU costs, hardware vs application (issue 29).

    .venv/bin/python benchmarks/health.py [--repeat 5] [--open-s 1] [--output PATH]

Issue 29's target: "an injected hardware Xid on a device with a running subtask: the subtask is
processing again on a healthy device within 10 s (the restart delay aside), 0 duplicates and 0
losses in an exactly-once sink; an injected application Xid restarts it in place and the device
stays."

A checkpointed job (every 200 ms) on the real local cluster (1 TaskExecutor, subtasks as
processes) and 3 fake GPUs (the fake ``nvidia-smi`` of ``accelflow.testing``):
``Numbers (2 splits) -> map_batches(Model, resources={"gpu": 1}) x 2 -> FileSink`` (two-phase,
exactly once). ``Model.open()`` costs ``--open-s`` seconds (a model loaded onto its GPU); each
batch appends its time, subtask index, process and GPU to ``calls.log``. Once 2 checkpoints
completed, the benchmark injects an Xid on the GPU of subtask 0 through the drill
(``JobManager.inject_fault``: what ``accelflow cluster inject-fault`` and its REST call,
``POST /v1/taskexecutors/{id}/faults``, call; the TaskExecutor takes it on the
path of a real NVML event). The restart delay is 0 s (``restart-strategy.fixed-delay.delay``),
so nothing is set aside. Each run prints:

* ``processing again``: seconds from the injection until subtask 0's replacement (a new process)
  processed its first batch: failure seen, device quarantined (hardware), restore from the
  latest checkpoint, placement, fork, ``open()``;
* ``on``: the GPU the replacement ran on, against the faulted one (``moved`` for a hardware Xid,
  target; ``same`` for an application Xid, target);
* ``recovery``: the JobManager's ``FailoverRecord.recovery_s`` (failure seen -> every subtask
  running again);
* ``new shares on faulted``: shares the JobManager's ledger gave out on the faulted GPU after
  the injection (polled every 10 ms; target 0 for a hardware Xid, which quarantines it;
  1, the replacement's, for an application Xid);
* ``quarantined``: whether the ledger held the faulted GPU quarantined at the end (target:
  hardware yes, application no);
* ``dup/lost``: duplicates and losses in the committed output (target 0/0).

Runs alternate the two Xids (79, "GPU has fallen off the bus", hardware; 13, "Graphics Engine
Exception", application), ``--repeat`` times each; the summary gives the median and the spread
(min..max). Fake GPUs only: the drill feeds the same path on a real GPU, but the fault itself
is injected, not provoked.
"""

from __future__ import annotations

import argparse
import datetime
import os
import platform
import shutil
import sys
import tempfile
import threading
import time
from collections import Counter
from pathlib import Path
from typing import Any

import cloudpickle
import failover as failover_benchmark  # its Numbers source (by value: subtasks cannot import it)
from failover import Numbers, summary, write_report

from accelflow import Environment, JobClient, RuntimeContext
from accelflow.connectors.files import FileSink
from accelflow.dataflow import iter_records
from accelflow.testing import fake_nvidia_smi_env, install_fake_nvidia_smi

cloudpickle.register_pickle_by_value(failover_benchmark)

N = 6000
PARALLELISM = 2
GPUS = 3
TE = "taskexecutor-1"
#: the drill's Xids: hardware (quarantines the GPU), application (the GPU stays)
XIDS = {"hardware": 79, "application": 13}


class Model:
    """``open()`` costs ``open_s``; each batch appends ``time index pid gpu records`` to
    ``calls.log``."""

    def __init__(self, directory: Path, open_s: float) -> None:
        self.dir, self.open_s = directory, open_s

    def open(self, ctx: RuntimeContext) -> None:
        time.sleep(self.open_s)
        [gpu] = ctx.get_external_resource_infos("gpu")
        self.ctx, self.gpu = ctx, gpu.address

    def __call__(self, batch: Any) -> Any:
        records = sum(1 for _ in iter_records(batch))
        time.sleep(0.005)
        with open(self.dir / "calls.log", "a", encoding="utf-8") as f:
            f.write(f"{time.time():.6f} {self.ctx.index_of_this_subtask} {os.getpid()} {self.gpu} {records}\n")
        return batch


def _use_fake_gpus(work: Path) -> dict[str, Any]:
    """Fake GPUs for this process and its TaskExecutor; the cluster's GPU configuration."""
    for name, value in fake_nvidia_smi_env(install_fake_nvidia_smi(work / "bin", GPUS)).items():
        if value is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = value
    return {"external-resources": "gpu", "external-resource.gpu.amount": GPUS,
            "external-resource.gpu.driver-factory.class": "gpu",
            "external-resource.gpu.param.coordination-file": str(work / "gpu-coordination.json"),
            "local.number-taskmanager": 1, "taskmanager.numberOfTaskSlots": 2 * PARALLELISM}


def _calls(work: Path) -> list[tuple[float, int, int, str]]:
    """``(time, index, pid, gpu)`` of every batch so far."""
    try:
        text = (work / "calls.log").read_text()
    except FileNotFoundError:
        return []
    whole = text.split("\n")[:-1]  # the last line may be half written
    return [(float(t), int(i), int(p), g) for t, i, p, g, _ in (line.split() for line in whole)]


def _wait_running(client: JobClient, work: Path) -> tuple[str, int]:
    """Once 2 checkpoints completed: the GPU and the process of subtask 0."""
    deadline = time.monotonic() + 120
    while time.monotonic() < deadline:
        job = next(iter(client.jobmanager.jobs.values()), None)
        zero = [(g, p) for _, i, p, g in _calls(work) if i == 0]
        if job is not None and job.checkpoints.completed >= 2 and zero:
            return zero[-1]
        if client.status() in ("FAILED", "FINISHED", "CANCELED"):
            raise RuntimeError(f"the job ended ({client.status()}) before the fault")
        time.sleep(0.02)
    raise RuntimeError("the job did not run and checkpoint within 120 s")


class _ShareWatch(threading.Thread):
    """Polls the ledger: the holders the faulted GPU gets after the injection (besides those
    it had at the injection, which only leave)."""

    def __init__(self, client: JobClient, gpu: str) -> None:
        super().__init__(daemon=True)
        self.client, self.gpu = client, gpu
        self.before = self._holders()
        self.new: set[str] = set()
        self.stop = threading.Event()

    def _holders(self) -> set[str]:
        jm = self.client.jobmanager
        with jm.state.lock:
            rows = jm.ledger.statistics()
        return {str(h) for r in rows if r["address"] == self.gpu for h in r["holders"]}

    def run(self) -> None:
        while not self.stop.wait(0.01):
            self.new |= self._holders() - self.before


def run_once(conf: dict[str, Any], work: Path, kind: str, open_s: float) -> tuple[dict[str, float], str]:
    """One job with one Xid of ``kind`` (a key of :data:`XIDS`); the figures of the module's
    description, and where the replacement ran (``GPU a -> b``)."""
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = Environment({**conf, "parallelism.default": PARALLELISM, "execution.checkpointing.interval": "200 ms",
                       "execution.checkpointing.dir": str(work / "checkpoints"),
                       "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Numbers(N), name="numbers")
        .map_batches(Model(work, open_s), batch_size=10, name="model", resources={"gpu": 1})
        .sink_to(FileSink(work / "out"), name="files"))
    client = env.execute_async(f"health-{kind}")
    try:
        gpu, pid = _wait_running(client, work)
        watch = _ShareWatch(client, gpu)
        watch.start()
        injected = time.time()
        client.jobmanager.inject_fault(TE, gpu, XIDS[kind])
        result = client.wait(300)
        watch.stop.set()
        watch.join()
        quarantined = any(key.address == gpu for key in client.jobmanager.ledger.quarantined())
        [failover] = client.jobmanager.jobs[result.job_id].failovers
    except BaseException:
        client.cancel()
        raise
    again, moved_to = min((t, g) for t, i, p, g in _calls(work) if i == 0 and p != pid and t > injected)
    out = Counter(int(line) for p in (work / "out").glob("part-*") for line in p.read_text().splitlines())
    figures = {"processing again": again - injected, "moved": float(moved_to != gpu),
               "recovery": failover.recovery_s or float("nan"), "new shares on faulted": len(watch.new),
               "quarantined": float(quarantined), "duplicates": sum(c - 1 for c in out.values()),
               "lost": N - len(out)}
    return figures, f"GPU {gpu} -> {moved_to}"


def _verdict(runs: dict[str, list[dict[str, float]]], open_s: float) -> list[str]:
    """The issue's target, met or not, over every run."""
    hw, app = runs["hardware"], runs["application"]
    worst = max(f["processing again"] for f in hw)
    clean = all(f["duplicates"] == 0 and f["lost"] == 0 for f in hw + app)
    return [
        f"target (hardware Xid): processing again on a healthy GPU within 10 s: worst {worst:.2f} s "
        f"({worst / 10:.0%} of it; open() {open_s:g} s included), moved in {sum(f['moved'] for f in hw):.0f}/{len(hw)}, "
        f"no new share on the quarantined GPU in {sum(f['new shares on faulted'] == 0 for f in hw)}/{len(hw)}: "
        f"{'met' if worst <= 10 and all(f['moved'] and not f['new shares on faulted'] for f in hw) else 'NOT met'}",
        f"target (application Xid): restarted on the same GPU, which stays in service: "
        f"{sum(not f['moved'] and not f['quarantined'] for f in app)}/{len(app)}; "
        f"0 duplicates and 0 losses in every run: {'yes' if clean else 'NO'}",
    ]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--open-s", type=float, default=1.0, help="the cost of Model.open() (seconds)")
    parser.add_argument("--output", type=Path, default=None, help="also write the report here")
    args = parser.parse_args(argv)
    work = Path(tempfile.mkdtemp(prefix="health-bench-"))
    conf = _use_fake_gpus(work)
    runs: dict[str, list[dict[str, float]]] = {kind: [] for kind in XIDS}
    lines = [f"# benchmarks/health.py  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  "
             f"{platform.node()} ({os.cpu_count()} CPUs), {GPUS} fake GPUs (fake nvidia-smi), open() {args.open_s:g} s, "
             f"{N} records, parallelism {PARALLELISM}, checkpoints every 200 ms, restart delay 0 s, "
             f"Xids: " + ", ".join(f"{kind} {xid}" for kind, xid in XIDS.items())]
    print(lines[0], flush=True)
    try:
        for r in range(args.repeat):
            for kind in XIDS:  # interleaved
                figures, where = run_once(conf, work / "job", kind, args.open_s)
                runs[kind].append(figures)
                lines.append(f"run {r + 1} {kind:11s} {where}  " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()))
                print(lines[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    lines += summary(runs, 11, "median (min..max); moved and quarantined: 1 = yes")
    lines += _verdict(runs, args.open_s)
    print("\n".join(lines[-3 - len(XIDS):]))
    write_report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
