"""Failover: what a SIGKILLed GPU subtask costs, rolled back in place vs a full restart (issue 28).

    .venv/bin/python benchmarks/failover.py [--repeat 3] [--open-s 3] [--gpu | --fake-gpus N] [--output PATH]
        [--paths hung,in-place] [--source numbers|kafka]

A checkpointed job on the real local cluster (2 TaskExecutors, subtasks as processes):
``Numbers (4 splits) -> map_batches(Model, resources={"gpu": 1}) x 4 -> FileSink`` (two-phase,
exactly once); with ``--source kafka`` it reads a Kafka topic instead of ``Numbers`` (below).
``Model.open()`` costs ``--open-s`` seconds (a model loaded onto a device) and appends when it
ended, its subtask and when it began to ``opens.log``; each batch appends its time, subtask
and records to ``calls.log``. When the first subtask meets record ``AT`` it writes
the time to ``kill.log`` and SIGKILLs itself (or hangs, see ``hung``). Each run prints:

* ``survivor opens``: ``open()`` calls after the kill by the 3 other subtask indexes (target 0;
  the replacement's and standbys' are not counted);
* ``flowing again``: from the kill until every one of the 4 subtasks has processed a batch
  again (target: 1 s + the replacement's ``open()``);
* ``replaced``: from the kill (or the hang) until the replacement's ``open()`` began, the last
  one's where several subtasks were lost (target: 1 s; ``hung``: ``heartbeat.timeout`` + 2 s,
  "detected, dumped and replaced"); not for ``standby``, whose replacement opened ahead;
* ``recovery``: the JobManager's ``FailoverRecord.recovery_s`` (failure seen -> every subtask
  running again);
* ``survivors' rate``: records/s of the 3 survivors from the kill until all 4 flow again,
  against the 2 s before the kill;
* ``dup/lost``: duplicates and losses in the committed output (target 0/0).
* ``failovers``: how many the job went through (1: the kill alone);
* ``stack dumped`` (``hung`` only): 1 when the TaskExecutor logged the hung subtask's whole
  stack dump down to ``Model.__call__`` (its standard error, which the TaskExecutors inherit
  from this process, is caught in a file during each run and then copied to this one's).

Runs alternate five paths, ``--repeat`` times each: ``in-place``
(``execution.failover.in-place: true``, the default), ``standby`` (the same with
``execution.failover.standby-subtasks: 1``: a standby, opened ahead, takes the failed index),
``full restart`` (``in-place: false``: every subtask restarted, as Flink), ``hung``
(in place, but the subtask hangs in ``time.sleep(10**6)`` instead of dying, with
``heartbeat.timeout: 2 s``: "flowing again" and "replaced" then count from the hang and
include the timeout and the stack dump; "flowing again" the replacement's ``open()`` too),
and ``lost te`` (in place, but the whole TaskExecutor holding that subtask is SIGKILLed
instead, with the 2 subtask indexes it holds: on a cluster of 3 TaskExecutors with 2 GPUs
each, so the lost subtasks fit on the third; "flowing again" counts from that kill, "survivor
opens" counts the 2 other indexes). ``--paths`` runs only some of them (comma-separated, e.g.
``--paths hung,in-place``). The summary gives the median and the spread (min..max), then the
targets met or not by the worst run (``replaced``, and for ``hung`` whether every run dumped
the stack); the header and the last line give the load average before and after.

Without ``--gpu`` the GPUs are the fake ``nvidia-smi`` of ``accelflow.testing``
(``--fake-gpus``, default 6), and ``open()`` sleeps; ``--gpu`` uses the
host's GPUs and fails at once when ``nvidia-smi -L`` lists none; its ``open()`` imports PyTorch
and puts weights on the subtask's GPU (a CUDA context, which a replacement pays again; the rest
of ``--open-s`` is slept) and each batch goes through the device. The job fits what there is
(printed in the header): with 6 GPUs or more, whole GPUs (``{"gpu": 1}``, 3 per TaskExecutor:
room for the standby; ``lost te``: 2 per TaskExecutor); with fewer (a one-GPU host, as
``scripts/gpu-check``'s), fractional shares of one GPU (``{"gpu": 0.3}``, 3 per TaskExecutor;
``lost te``: 0.5, 2 per TaskExecutor), each TaskExecutor allocating that GPU with
``external-resource.gpu.param.coordination: false`` (with coordination TaskExecutors on one
host never share a GPU).

``--source kafka`` is issue 28's Kafka job: the embedded broker (``EmbeddedKafkaBroker``)
starts once; before each run the same records are produced into a fresh topic of 4
partitions (one per ``Numbers`` split, with the same records), which a bounded
``KafkaSource`` (stopping at the produced offsets, a consumer group per run) reads, paced as
``Numbers`` (:class:`PacedKafka`); the rest, and the duplicates and losses against the
produced records, is the same. Not measured here (a test covers it): checkpoints after the
sources finished (``tests/runtime/test_checkpoints_after_sources_end.py``).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import os
import platform
import re
import shutil
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections import Counter
from collections.abc import Generator, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import Environment, RuntimeContext, Source
from accelflow.connectors.files import FileSink
from accelflow.connectors.kafka import EmbeddedKafkaBroker, KafkaSource, _reader
from accelflow.dataflow import even_ranges, iter_records
from accelflow.testing import fake_nvidia_smi_env, install_fake_nvidia_smi

N = 8000
AT = 2500  # the record whose subtask kills itself
#: in place; in place with one standby subtask; every subtask restarted (as Flink)
PATHS = ("in-place", "standby", "full restart", "hung", "lost te")
#: ``heartbeat.timeout`` of the ``hung`` runs (its subtask sleeps in a batch instead of dying)
HUNG_TIMEOUT_S = 2.0
PARALLELISM = 4
#: ``--source``: what the job reads (the header's words)
SOURCES = {"numbers": "Numbers (in memory)", "kafka": "Kafka (embedded broker, a 4-partition topic per run)"}
#: the sources' pace: chunks of ``CHUNK`` records, ``PACE_S`` apart per source subtask
CHUNK, PACE_S = 10, 0.02


def _append(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _lines(path: Path) -> list[str]:
    """The whole lines of ``path`` (none if it does not exist yet)."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return []
    return [line for line in text.splitlines(keepends=True) if line.endswith("\n")]


class Model:
    """``open()`` costs ``open_s``; the subtask that meets record ``AT`` first SIGKILLs itself
    (with ``hang``: sleeps in ``time.sleep(10**6)``, until its TaskExecutor finds it hung;
    with ``survive``: goes on, and :class:`TaskExecutorKiller` kills its TaskExecutor)."""

    def __init__(self, directory: Path, open_s: float, hang: bool = False, survive: bool = False,
                 cuda: bool = False) -> None:
        self.dir, self.open_s, self.hang, self.survive, self.cuda = directory, open_s, hang, survive, cuda

    def open(self, ctx: RuntimeContext) -> None:
        started, begun = time.monotonic(), time.time()
        if self.cuda:  # a real model's first costs: torch, a CUDA context, weights on the device
            import torch

            self.torch, self.weights = torch, torch.ones(1024, device="cuda")
            torch.cuda.synchronize()
        time.sleep(max(0.0, self.open_s - (time.monotonic() - started)))
        self.ctx = ctx  # a standby learns its index when it takes over: read it at each call
        # when it ended, the index, when it began (the index second: Numbers reads it)
        _append(self.dir / "opens.log", f"{time.time():.6f} {ctx.index_of_this_subtask} {begun:.6f}")

    def __call__(self, batch: Any) -> Any:
        records = [int(r) for r in iter_records(batch)]
        if self.cuda:  # the batch through the device, as a model's would go
            assert int((self.torch.as_tensor(records, device="cuda") * self.weights[0]).sum().item()) == sum(records)
        time.sleep(0.005)
        if AT in records:
            try:
                os.close(os.open(self.dir / "killed", os.O_CREAT | os.O_EXCL | os.O_WRONLY))
            except FileExistsError:
                pass
            else:
                _append(self.dir / "kill.log", f"{time.time():.6f} {self.ctx.index_of_this_subtask}")
                if self.hang:
                    time.sleep(10**6)
                if not self.survive:
                    os.kill(os.getpid(), signal.SIGKILL)
        _append(self.dir / "calls.log", f"{time.time():.6f} {self.ctx.index_of_this_subtask} {len(records)}")
        return batch


def _await_opens(directory: Path) -> None:
    """Until every model subtask opened (``opens.log`` in ``directory``) or one was killed: a
    subtask that opened late (four CUDA contexts made at once on one GPU) would otherwise meet
    record ``AT`` after the others finished their splits, with nothing left to roll back."""
    deadline = time.monotonic() + 120
    while not (directory / "killed").exists() and time.monotonic() < deadline and len(
            {line.split()[1] for line in _lines(directory / "opens.log")} - {"-1"}) < PARALLELISM:
        time.sleep(0.01)


class Numbers(Source[int]):
    """``0..n-1`` in chunks of :data:`CHUNK`, :data:`PACE_S` apart per split, with exact
    positions; the first attempt starts once every model subtask opened (:func:`_await_opens`)."""

    def __init__(self, n: int, directory: Path) -> None:
        self.n, self.dir = n, directory

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return list(even_ranges(self.n, parallelism))

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        raise NotImplementedError

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        first, stop = split
        _await_opens(self.dir)
        for start in range(first, stop, CHUNK):
            time.sleep(PACE_S)
            yield np.arange(start, min(start + CHUNK, stop), dtype=np.int64)

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])


class PacedKafka(KafkaSource):
    """``--source kafka``: a bounded :class:`KafkaSource` of ``topic`` (group ``topic``),
    paced as :class:`Numbers`: it starts once every model subtask opened, then hands on chunks
    of at most :data:`CHUNK` records, :data:`PACE_S` apart. The chunk cap is the reader's
    records per poll (``_reader.POLL_RECORDS``, 1024, which no setting changes), lowered in the
    source subtask's process: a chunk cut after the poll would break the source's exact
    positions (a checkpoint keeps the offset after the whole poll)."""

    def __init__(self, bootstrap_servers: str, topic: str, directory: Path) -> None:
        super().__init__(bootstrap_servers, topic, group_id=topic, bounded=True, value_deserializer=int)
        self.dir = directory

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Generator[Any, None, None]:
        _await_opens(self.dir)
        _reader.POLL_RECORDS = CHUNK
        for chunk in super().read_chunks(split, ctx):
            time.sleep(PACE_S)
            yield chunk


class KafkaFeed:
    """The embedded broker of a ``--source kafka`` benchmark; :meth:`source` produces the
    :data:`N` records into a fresh topic of 4 partitions for each run (record ``i`` to
    partition ``i * 4 // N``: the ranges :class:`Numbers`' splits hold)."""

    def __init__(self, broker: EmbeddedKafkaBroker) -> None:
        self.broker, self.runs = broker, 0

    def source(self, work: Path) -> PacedKafka:
        import confluent_kafka  # the kafka extra: only --source kafka needs it

        self.runs += 1
        topic = f"failover-{self.runs}"
        self.broker.create_topic(topic, partitions=PARALLELISM)
        producer = confluent_kafka.Producer({"bootstrap.servers": self.broker.bootstrap_servers})
        for i in range(N):
            producer.produce(topic, str(i).encode(), partition=i * PARALLELISM // N)
        if producer.flush(30):
            raise RuntimeError(f"the embedded broker did not take all {N} records of topic {topic!r} within 30 s")
        return PacedKafka(self.broker.bootstrap_servers, topic, work)


class TaskExecutorKiller(threading.Thread):
    """Once a ``Model`` wrote ``kill.log``, SIGKILLs the TaskExecutor that runs that subtask;
    :attr:`killed` (when) and :attr:`victims` (the model's subtask indexes it held) say what."""

    def __init__(self, client: Any, work: Path) -> None:
        super().__init__(daemon=True)
        self.client, self.work = client, work
        self.killed, self.victims = float("nan"), set[int]()
        self.start()

    def run(self) -> None:
        log = self.work / "kill.log"
        while not log.exists() or not log.read_text().endswith("\n"):
            time.sleep(0.002)
        index = int(log.read_text().split()[1])
        jm = self.client.jobmanager
        with jm.state.lock:
            models = [st for st in jm.state.subtasks.values() if st.name.startswith("model") and st.state == "RUNNING"]
            te = next(st.taskexecutor for st in models if st.key.index == index)
            self.victims = {st.key.index for st in models if st.taskexecutor == te}
        os.kill(jm.taskexecutors[te].registration.pid, signal.SIGKILL)
        self.killed = time.time()


#: GPUs for whole-GPU subtasks: 2 TaskExecutors x 3 (4 subtasks + a standby), or 3 x 2 (``lost te``)
WHOLE_GPUS = 6


class GpuLayout:
    """How the job fits ``gpus`` GPUs: whole GPUs when there are :data:`WHOLE_GPUS`, else
    fractional shares of one GPU that every TaskExecutor allocates (no host coordination).

    Example:
        >>> GpuLayout(Path("/tmp/w"), 1).describe()
        '1 GPU: fractional shares of one GPU (gpu 0.3 per subtask, lost te 0.5)'
    """

    def __init__(self, work: Path, gpus: int) -> None:
        self.gpus, self.whole = gpus, gpus >= WHOLE_GPUS
        gpu: dict[str, Any] = {"external-resources": "gpu", "external-resource.gpu.driver-factory.class": "gpu"}
        if self.whole:  # TaskExecutors on one host take different GPUs through the coordination file
            gpu["external-resource.gpu.param.coordination-file"] = str(work / "gpu-coordination.json")
        else:  # each TaskExecutor takes the same (first) GPU
            gpu["external-resource.gpu.param.coordination"] = False
        self.conf = {**gpu, "local.number-taskmanager": 2, "taskmanager.numberOfTaskSlots": 4,
                     "external-resource.gpu.amount": 3 if self.whole else 1}

    def for_path(self, path: str) -> tuple[dict[str, Any], float]:
        """The configuration and a subtask's GPU share on ``path``; ``lost te`` runs 3
        TaskExecutors holding 2 subtasks each, so the 2 lost subtasks fit on the third."""
        if path != "lost te":
            return self.conf, 1.0 if self.whole else 0.3
        return {**self.conf, "local.number-taskmanager": 3, "external-resource.gpu.amount": 2 if self.whole else 1}, (
            1.0 if self.whole else 0.5)

    def describe(self) -> str:
        if self.whole:
            return f"{self.gpus} GPUs: whole GPUs (gpu 1 per subtask)"
        return f"{self.gpus} GPU{'s' if self.gpus > 1 else ''}: fractional shares of one GPU " \
               "(gpu 0.3 per subtask, lost te 0.5)"


def run_once(layout: GpuLayout, work: Path, path: str, open_s: float, cuda: bool = False,
             kafka: KafkaFeed | None = None) -> dict[str, float]:
    """One job with one SIGKILL on ``path`` (one of :data:`PATHS`), reading :class:`Numbers`
    or, with ``kafka``, a fresh topic (:class:`PacedKafka`); the figures of the module's
    description."""
    in_place, standbys = path != "full restart", int(path == "standby")
    conf, share = layout.for_path(path)
    if work.exists():
        shutil.rmtree(work)
    work.mkdir(parents=True)
    env = Environment({**conf, "parallelism.default": PARALLELISM, "execution.checkpointing.interval": "200 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "execution.failover.in-place": in_place,
                       "execution.failover.standby-subtasks": standbys,
                       "heartbeat.interval": "200 ms", "heartbeat.timeout": HUNG_TIMEOUT_S})
    source = Numbers(N, work) if kafka is None else kafka.source(work)
    (env.from_source(source, name="numbers" if kafka is None else "kafka")
        .map_batches(Model(work, open_s, hang=path == "hung", survive=path == "lost te", cuda=cuda), batch_size=10,
                     name="model", resources={"gpu": share})
        .sink_to(FileSink(work / "out"), name="files"))
    with _stderr_into(work / "stderr.log"):  # the TaskExecutors' too: the hung subtask's stack dump
        client = env.execute_async("failover")
        killer = TaskExecutorKiller(client, work) if path == "lost te" else None
        result = client.wait(300)
    failover, *more = client.jobmanager.jobs[result.job_id].failovers  # one kill: more is a finding
    killed_at, victim_index = (work / "kill.log").read_text().split()
    killed, victims = float(killed_at), {int(victim_index)}
    if killer is not None:
        killer.join()
        killed, victims = killer.killed, killer.victims
    calls = [(float(t), int(i), int(n)) for t, i, n in
             (line.split() for line in (work / "calls.log").read_text().splitlines())]
    idle = [index for index in range(PARALLELISM) if not any(i == index and t > killed for t, i, _ in calls)]
    if idle:
        raise RuntimeError(f"{path}: subtask index(es) {idle} processed no batch after the kill")
    resumed = max(min(t for t, i, _ in calls if i == index and t > killed) for index in range(PARALLELISM))
    survivors = [(t, n) for t, i, n in calls if i not in victims]
    before = sum(n for t, n in survivors if killed - 2.0 <= t < killed) / 2.0
    during = sum(n for t, n in survivors if killed <= t <= resumed) / max(resumed - killed, 1e-9)
    out = Counter(int(line) for p in (work / "out").glob("part-*") for line in p.read_text().splitlines())
    opens = [(float(t), int(i), float(begun)) for t, i, begun in
             (line.split() for line in (work / "opens.log").read_text().splitlines())]
    # after the kill, by the other indexes (a standby opens with index -1: it has none yet)
    reopened = sum(1 for t, i, _ in opens if t > killed and i not in victims and 0 <= i < PARALLELISM)
    figures = {"survivor opens": reopened, "flowing again": resumed - killed}
    if path != "standby":  # a standby opened ahead: nothing is opened after the kill
        figures["replaced"] = replaced(opens, killed, victims)
    figures |= {"recovery": failover.recovery_s or float("nan"), "survivors' rate %": 100 * during / max(before, 1e-9),
                "duplicates": sum(c - 1 for c in out.values()), "lost": len(set(range(N)) - out.keys()),
                "failovers": 1 + len(more)}
    if path == "hung":
        figures["stack dumped"] = float(stack_dumped((work / "stderr.log").read_text(errors="replace")))
    return figures


def replaced(opens: list[tuple[float, int, float]], killed: float, victims: set[int]) -> float:
    """Seconds from the kill (or hang) at ``killed`` until the last of the ``victims``'
    replacements began its ``open()``; ``opens``: ``(ended, index, began)`` per ``open()``.

    Example:
        >>> replaced([(3.0, 0, 0.0), (9.0, 1, 6.0), (9.5, 2, 6.5)], 5.0, {1, 2})
        1.5
    """
    return max(min(began for _, i, began in opens if i == index and began > killed) for index in victims) - killed


def stack_dumped(log: str) -> bool:
    """Whether the TaskExecutors' ``log`` has the hung subtask's whole stack dump (every thread's,
    which ``_watchdog`` logs after ``its threads were at:`` as it kills the subtask), down to the
    frame where the :class:`Model` hangs.

    Example:
        >>> stack_dumped('is hung and was killed: ... its threads were at: File "failover.py", line 9 in __call__')
        True
        >>> stack_dumped('is hung and was killed: ... it was at: File "failover.py", line 9 in __call__')
        False
    """
    _, found, stack = log.partition("its threads were at:")
    return bool(found) and re.search(r'File ".*failover\.py", line \d+ in __call__', stack) is not None


@contextlib.contextmanager
def _stderr_into(path: Path) -> Iterator[None]:
    """Standard error (file descriptor 2, which the TaskExecutors started meanwhile inherit)
    into ``path`` while the block runs; then copied to the real one."""
    sys.stderr.flush()
    saved = os.dup(2)
    try:
        with open(path, "wb") as log:
            os.dup2(log.fileno(), 2)
        yield
    finally:
        sys.stderr.flush()
        os.dup2(saved, 2)
        os.close(saved)
        sys.stderr.write(path.read_text(errors="replace"))


def summary(runs: dict[str, list[dict[str, float]]], width: int, title: str = "median (min..max)") -> list[str]:
    """``summary: <title>`` and one line per way of ``runs``: each figure's median (min..max)."""
    lines = [f"summary: {title}"]
    for way, figures in runs.items():
        cells = [f"{name} {statistics.median(vals):.2f} ({min(vals):.2f}..{max(vals):.2f})"
                 for name in figures[0] for vals in [[f[name] for f in figures]]]
        lines.append(f"  {way:{width}s} " + "  ".join(cells))
    return lines


def write_report(output: Path | None, lines: list[str]) -> None:
    """The report's ``lines`` into ``output`` (``--output``), if given."""
    if output:
        output.parent.mkdir(parents=True, exist_ok=True)
        output.write_text("\n".join(lines) + "\n")


def targets(runs: dict[str, list[dict[str, float]]]) -> list[str]:
    """``targets:`` and, per path that ran, whether its worst run replaced the failed subtask
    in time (its ``open()`` begun; in place: 1 s, hung: ``heartbeat.timeout`` + 2 s) and, for
    ``hung``, whether every run dumped the stack."""
    lines = ["targets: worst of the runs"]
    hung_limit = HUNG_TIMEOUT_S + 2.0
    for path, what, limit in (("in-place", "replaced within 1 s", 1.0), ("lost te", "replaced within 1 s", 1.0),
                              ("hung", f"detected, dumped and replaced within timeout + 2 s ({hung_limit:g} s)",
                               hung_limit)):
        if runs.get(path):
            worst = max(f["replaced"] for f in runs[path])
            lines.append(f"  {path:12s} {what}: {worst:.2f} s ({'met' if worst <= limit else 'not met'})")
    if runs.get("hung"):
        dumped = sum(int(f["stack dumped"]) for f in runs["hung"])
        lines.append(f"  {'hung':12s} stack dumped: {'yes' if dumped == len(runs['hung']) else 'no'} "
                     f"({dumped} of {len(runs['hung'])} runs)")
    return lines


def _paths(text: str) -> tuple[str, ...]:
    """``--paths``' value: comma-separated names of :data:`PATHS`, e.g. ``hung,in-place``."""
    paths = tuple(dict.fromkeys(name.strip() for name in text.split(",")))
    unknown = [name for name in paths if name not in PATHS]
    if unknown:
        raise argparse.ArgumentTypeError(f"unknown path(s) {unknown}; give some of {','.join(PATHS)}")
    return paths


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def _gpu_count() -> int:
    """The GPUs ``nvidia-smi -L`` lists (0 without ``nvidia-smi``)."""
    try:
        listed = subprocess.run(["nvidia-smi", "-L"], capture_output=True, text=True, timeout=30)
    except (OSError, subprocess.TimeoutExpired):
        return 0
    return sum(line.startswith("GPU ") for line in listed.stdout.splitlines()) if listed.returncode == 0 else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3)
    parser.add_argument("--open-s", type=float, default=3.0, help="the cost of Model.open() (seconds)")
    parser.add_argument("--gpu", action="store_true", help="use the host's GPUs (fails without one)")
    parser.add_argument("--fake-gpus", type=int, default=None,
                        help=f"without --gpu: how many fake GPUs (default {WHOLE_GPUS}; 1 runs --gpu's "
                             "one-GPU layout on a CPU)")
    parser.add_argument("--output", type=Path, default=None, help="also write the report here")
    parser.add_argument("--paths", type=_paths, default=PATHS,
                        help=f"which paths to run, comma-separated (default all: {','.join(PATHS)})")
    parser.add_argument("--source", choices=SOURCES, default="numbers",
                        help="what the job reads: the in-memory Numbers, or a topic of the embedded Kafka "
                             "broker (needs the kafka extra: pip install 'accelflow[kafka]')")
    args = parser.parse_args(argv)
    if args.gpu and args.fake_gpus is not None:
        parser.error("--fake-gpus is for runs without --gpu (which uses the host's GPUs); give one of them")
    if args.fake_gpus is not None and args.fake_gpus < 1:
        parser.error(f"--fake-gpus must be a positive integer, got {args.fake_gpus}")
    work = Path(tempfile.mkdtemp(prefix="failover-bench-"))
    if not args.gpu:
        fake = install_fake_nvidia_smi(work / "bin", args.fake_gpus or WHOLE_GPUS)
        os.environ.update({k: v for k, v in fake_nvidia_smi_env(fake).items() if v is not None})
    gpus = _gpu_count()
    if args.gpu and not gpus:
        shutil.rmtree(work, ignore_errors=True)
        print("--gpu: no GPU here (`nvidia-smi -L` lists none); run without --gpu for the fake GPUs",
              file=sys.stderr)
        return 2
    layout = GpuLayout(work, gpus)
    runs: dict[str, list[dict[str, float]]] = {path: [] for path in args.paths}
    lines = [f"# benchmarks/failover.py  {datetime.datetime.now(datetime.timezone.utc):%Y-%m-%d %H:%M} UTC  "
             f"{platform.node()} ({os.cpu_count()} CPUs), {'real' if args.gpu else 'fake (CPU proxy)'} "
             f"{layout.describe()}, "
             f"open() {args.open_s:g} s, {N} records from {SOURCES[args.source]}, parallelism {PARALLELISM}, "
             f"kill at record {AT}; "
             f"load average before: {_load()}"]
    print(lines[0], flush=True)
    try:
        with contextlib.ExitStack() as stack:  # the broker, once, for every run
            kafka = KafkaFeed(stack.enter_context(EmbeddedKafkaBroker())) if args.source == "kafka" else None
            for r in range(args.repeat):
                for path in args.paths:  # interleaved
                    figures = run_once(layout, work / "job", path, args.open_s, cuda=args.gpu, kafka=kafka)
                    runs[path].append(figures)
                    lines.append(f"run {r + 1} {path:12s} " + "  ".join(f"{k} {v:.2f}" for k, v in figures.items()))
                    print(lines[-1], flush=True)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    shown = len(lines)
    lines += summary(runs, 12) + targets(runs) + [f"# load average after: {_load()}"]
    print("\n".join(lines[shown:]))
    write_report(args.output, lines)
    return 0


if __name__ == "__main__":
    sys.exit(main())
