"""The JobManager: registers TaskExecutors, places subtasks on slots and devices, deploys
them, follows their progress, and restarts or fails the job. It runs in the client.

Decisions (placement) are delegated to the pure :func:`accelflow.scheduling.place`; the
ledger records who holds which device share; this module is the I/O shell around them.
"""

from __future__ import annotations

import glob
import os
import queue
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any

import cloudpickle

from accelflow import _errors
from accelflow._errors import AccelflowError, JobCancelledError, JobError
from accelflow.api._sources import ArraySource
from accelflow.config import Configuration
from accelflow.config import _keys as k
from accelflow.runtime._graph import Chain, JobGraph
from accelflow.runtime._protocol import (
    ChainPlan, OutputEdge, Registration, SubtaskDescriptor, SubtaskKey,
)
from accelflow.runtime.launchers._base import Launcher
from accelflow.scheduling import (
    DeviceKey, DeviceLedger, SlotRequest, SubtaskRequest, TaskExecutorOffer, format_amount, place,
)

_EXIT_WAIT_S = 15.0


@dataclass
class TaskExecutorInfo:
    registration: Registration
    used_slots: int = 0

    @property
    def id(self) -> str:
        return self.registration.taskexecutor_id

    def infos(self, resource: str) -> list[dict[str, str]]:
        for r in self.registration.resources:
            if r["name"] == resource:
                return list(r["infos"])
        return []


@dataclass
class SubtaskState:
    key: SubtaskKey
    name: str
    taskexecutor: str
    devices: dict[str, list[tuple[str, Fraction]]]
    state: str = "DEPLOYING"
    counts: list[tuple[int, int]] = field(default_factory=list)
    parts: list[str] = field(default_factory=list)


@dataclass
class JobResult:
    """What :meth:`Environment.execute` returns.

    Attributes:
        job_id, name: the job.
        status: ``FINISHED`` (failures raise ``JobError`` instead; cancellation ``CANCELED``).
        duration_s: from submission to the end.
        startup_s: from submission until the first record left a source.
        attempts: 1 plus the number of restarts.
        operators: per operator name, ``records_in`` and ``records_out`` summed over subtasks.
        devices: per subtask (``"classify (1/2)"``), the TaskExecutor and devices it held.
        collected: records of ``execute_and_collect``, in subtask order.
    """

    job_id: str
    name: str
    status: str
    duration_s: float
    startup_s: float | None
    attempts: int
    operators: dict[str, dict[str, int]]
    devices: dict[str, str]
    collected: list[Any] = field(default_factory=list)


class JobManager:
    def __init__(self, config: Configuration, launcher: Launcher) -> None:
        self.config = config
        self.launcher = launcher
        self.ledger = DeviceLedger()
        self.taskexecutors: dict[str, TaskExecutorInfo] = {}
        self.subtasks: dict[SubtaskKey, SubtaskState] = {}
        self.progress_listeners: list[Callable[[dict[str, Any]], None]] = []
        self.cancel_requested = False
        self._job_counter = 0
        self._slots: dict[tuple[str, int], list[str]] = {}
        self._lost_pids: set[int] = set()  # incarnations already given up on

    # -- cluster -------------------------------------------------------------------------------
    def start_cluster(self) -> None:
        n = self.config.get(k.NUMBER_TASKMANAGER)
        ids = [f"taskexecutor-{i}" for i in range(1, n + 1)]
        self.launcher.start(ids)
        self._await_registration(ids)

    def _await_registration(self, ids: list[str]) -> None:
        deadline = time.monotonic() + self.config.get(k.STARTUP_TIMEOUT)
        waiting = set(ids)
        while waiting:
            try:
                te_id, msg = self.launcher.events.get(timeout=max(0.0, deadline - time.monotonic()))
            except queue.Empty:
                raise JobError(
                    f"TaskExecutor(s) {sorted(waiting)} did not register within "
                    f"{self.config.get(k.STARTUP_TIMEOUT):g} s (taskmanager.registration.timeout)"
                ) from None
            if msg[0] == "register":
                reg: Registration = msg[1]
                self.taskexecutors[te_id] = TaskExecutorInfo(reg)
                self.ledger.add_devices(self._devices(reg))
                waiting.discard(te_id)
            elif msg[0] == "register_failed":
                raise _rebuild_error(te_id, msg[2], msg[3])
            elif msg[0] in ("te_exit", "te_lost") and te_id in waiting and msg[-1] not in self._lost_pids:
                how = f"exited (exit code {msg[2]})" if msg[0] == "te_exit" else "disconnected"
                raise JobError(f"{te_id} {how} during start-up; see its output above")

    @staticmethod
    def _devices(reg: Registration) -> list[DeviceKey]:
        keys = []
        for r in reg.resources:
            if r["status"] == "ok":
                keys += [DeviceKey(reg.taskexecutor_id, r["name"], _address(i)) for i in r["infos"]]
            else:  # no driver, or degraded: counted by amount, no infos (as in Flink)
                keys += [DeviceKey(reg.taskexecutor_id, r["name"], f"#{i}") for i in range(r["amount"])]
        return keys

    # -- jobs ----------------------------------------------------------------------------------
    def run(self, graph: JobGraph, submitted: float | None = None) -> JobResult:
        """Run ``graph`` to the end; times count from ``submitted`` (``time.monotonic()``)."""
        self._job_counter += 1
        job_id = f"job-{self._job_counter}"
        started = submitted if submitted is not None else time.monotonic()
        self.prepare_sources(graph)
        strategy = self.config.get(k.RESTART_STRATEGY)
        attempts_left = self.config.get(k.RESTART_ATTEMPTS) if strategy == "fixed-delay" else 0
        attempt = 0
        while True:
            try:
                collected, first_record = self._run_attempt(graph, job_id, attempt, started)
                break
            except JobCancelledError:
                raise
            except JobError as exc:
                if attempts_left <= 0:
                    raise
                attempts_left -= 1
                attempt += 1
                _log_restart(job_id, attempt, exc)
                time.sleep(self.config.get(k.RESTART_DELAY))
                self._replace_lost_taskexecutors()
        self.release_slots(job_id, attempt)
        self._commit_files(graph, job_id, attempt)
        return self._result(graph, job_id, attempt, started, first_record, collected)

    def prepare_sources(self, graph: JobGraph) -> None:
        """Spill NumPy sources to memory-mapped files (idempotent; may overlap cluster start)."""
        for t in graph.transformations:
            if isinstance(t.fn, ArraySource):
                t.fn.spill(self.launcher.workdir)

    def _run_attempt(self, graph: JobGraph, job_id: str, attempt: int, started: float
                     ) -> tuple[list[Any], float | None]:
        keys = self._deploy(graph, job_id, attempt)
        collected: dict[SubtaskKey, list[Any]] = {key: [] for key in keys}
        first_record: float | None = None
        pending = set(keys)
        try:
            while pending:
                if self.cancel_requested:
                    raise JobCancelledError(f"{job_id} ({graph.name}) was cancelled")
                try:
                    te_id, msg = self.launcher.events.get(timeout=0.1)
                except queue.Empty:
                    continue
                kind = msg[0]
                if kind in ("te_lost", "te_exit"):
                    if self._is_current(te_id, msg):
                        self._lose_taskexecutor(te_id)
                        raise JobError(f"{te_id} died while running {job_id} ({graph.name})")
                    continue
                key = msg[1]
                if not isinstance(key, SubtaskKey) or key not in self.subtasks or key.attempt != attempt:
                    continue
                st = self.subtasks[key]
                if kind == "running":
                    st.state = "RUNNING"
                elif kind == "progress":
                    st.counts = msg[2]
                    if first_record is None and graph.chains[key.chain].head.kind == "source" and msg[2][0][1]:
                        first_record = time.monotonic() - started
                    self._notify(graph)
                elif kind == "collect":
                    collected[key].append(msg[2])
                elif kind == "finished":
                    st.state, st.counts, st.parts = "FINISHED", msg[2], msg[3]
                    if first_record is None and graph.chains[key.chain].head.kind == "source" and msg[2][0][1]:
                        first_record = time.monotonic() - started
                    self.ledger.release(key)
                    pending.discard(key)
                    self._notify(graph)
                elif kind == "failed":
                    st.state = "FAILED"
                    raise JobError(f"subtask {st.name} on {st.taskexecutor} failed:\n{msg[2].rstrip()}")
                elif kind == "subtask_exit" and st.state != "FINISHED":
                    st.state = "FAILED"
                    raise JobError(
                        f"subtask {st.name} on {st.taskexecutor} exited with code {msg[2]} "
                        "without finishing"
                    )
        except AccelflowError:
            self._abort(job_id, attempt, keys)
            raise
        records = []
        for key in sorted(keys, key=lambda k_: (k_.chain, k_.index)):
            for chunk in collected[key]:
                records.extend(chunk if not hasattr(chunk, "rows") else chunk.rows())
        return records, first_record

    def _deploy(self, graph: JobGraph, job_id: str, attempt: int) -> list[SubtaskKey]:
        requests = []
        for i in range(graph.max_parallelism):
            requests.append(SlotRequest(tuple(
                SubtaskRequest(SubtaskKey(job_id, attempt, c.id, i), _requester_name(c, i), c.resources)
                for c in graph.chains if i < c.parallelism
            )))
        offers = [
            TaskExecutorOffer(te.id, te.registration.slots - te.used_slots, te.registration.slots,
                              self._free_devices(te.id))
            for te in sorted(self.taskexecutors.values(), key=lambda t: t.id)
        ]
        # user code is pickled and split before any slot or device is taken, so a job that
        # cannot be shipped fails with nothing to give back
        blobs = {c.id: self._chain_blob(graph, c, job_id, attempt) for c in graph.chains}
        splits = self._splits(graph)
        assignments = place(requests, offers, self.config.get(k.PLACEMENT_POLICY))  # type: ignore[arg-type]
        keys: list[SubtaskKey] = []
        slot_of: dict[SubtaskKey, str] = {}
        for assignment in assignments:
            self.taskexecutors[assignment.taskexecutor].used_slots += 1
            for holder, shares in assignment.shares.items():
                assert isinstance(holder, SubtaskKey)
                self.ledger.acquire(holder, shares)
                keys.append(holder)
                slot_of[holder] = assignment.taskexecutor
        self._slots[(job_id, attempt)] = [a.taskexecutor for a in assignments]
        isolate = self.config.get(k.DEVICE_ISOLATION)
        for key in keys:
            te_id = slot_of[key]
            chain = graph.chains[key.chain]
            held = self.ledger.held_by(key)
            devices: dict[str, list[tuple[str, Fraction]]] = {}
            for d, share in held.items():
                devices.setdefault(d.resource, []).append((d.address, share))
            self.subtasks[key] = SubtaskState(key, _subtask_name(chain, key.index), te_id, devices)
            te = self.taskexecutors[te_id]
            desc = SubtaskDescriptor(
                key=key, parallelism=chain.parallelism, chain_blob=blobs[chain.id],
                listen_address=self._address(job_id, attempt, chain.id, key.index) if chain.input is not None else None,
                expected_senders=graph.upstream_senders(chain, key.index),
                splits=splits.get((chain.id, key.index)),
                assigned={r: [(self._info(te, r, a), str(s)) for a, s in items if not a.startswith("#")]
                          for r, items in devices.items()},
                taskexecutor_infos={r["name"]: r["infos"] for r in te.registration.resources},
                isolate=isolate, authkey=getattr(self.launcher, "authkey", b""), taskexecutor_id=te_id,
            )
            self.launcher.handle(te_id).send(("deploy", desc))
        return keys

    def _free_devices(self, te_id: str) -> dict[str, dict[str, Fraction]]:
        free: dict[str, dict[str, Fraction]] = {}
        for d in self.ledger.devices():
            if d.taskexecutor == te_id:
                free.setdefault(d.resource, {})[d.address] = self.ledger.free(d)
        return free

    @staticmethod
    def _info(te: TaskExecutorInfo, resource: str, address: str) -> dict[str, str]:
        for props in te.infos(resource):
            if _address(props) == address:
                return props
        raise _errors.AccelflowInternalError(f"{te.id} has no {resource} {address}")

    def _address(self, job_id: str, attempt: int, chain: int, index: int) -> str:
        return self.launcher.channel_address(f"{job_id}-a{attempt}-c{chain}-{index}")

    def _chain_blob(self, graph: JobGraph, chain: Chain, job_id: str, attempt: int) -> bytes:
        outputs = tuple(
            OutputEdge(
                graph.chains[o].partitioning, graph.chains[o].key_fn,
                tuple(self._address(job_id, attempt, o, i) for i in range(graph.chains[o].parallelism)),
            )
            for o in chain.outputs
        )
        rolling = self._rolling(graph)
        nodes = []
        for n in chain.nodes:
            if n.kind == "reduce":
                n.options["rolling"] = rolling
            nodes.append(n)
        try:
            return bytes(cloudpickle.dumps(ChainPlan(chain.name, nodes, outputs, rolling)))
        except Exception as exc:
            raise JobError(
                f"{_unpicklable(chain)} cannot be sent to its subtasks: {type(exc).__name__}: "
                f"{exc}. User code travels with cloudpickle; create what cannot be pickled "
                "(locks, open files, connections, models on a device) in open() of a rich "
                "function, or pass the class instead of an instance"
            ) from exc

    def _rolling(self, graph: JobGraph) -> bool:
        mode = self.config.get(k.RUNTIME_MODE)
        if mode == "automatic":
            return not all(getattr(t.fn, "bounded", True) for t in graph.transformations if t.kind == "source")
        return mode == "streaming"

    @staticmethod
    def _splits(graph: JobGraph) -> dict[tuple[int, int], list[Any]]:
        out: dict[tuple[int, int], list[Any]] = {}
        for c in graph.chains:
            if c.head.kind == "source":
                try:
                    splits = list(c.head.fn.create_splits(c.parallelism))
                except Exception as exc:
                    raise JobError(
                        f"source {c.head.name!r}: create_splits({c.parallelism}) raised "
                        f"{type(exc).__name__}: {exc}"
                    ) from exc
                for i in range(c.parallelism):
                    out[(c.id, i)] = splits[i :: c.parallelism]
        return out

    # -- failure and cleanup ------------------------------------------------------------------
    def _abort(self, job_id: str, attempt: int, keys: list[SubtaskKey]) -> None:
        for te_id in self.taskexecutors:
            self.launcher.handle(te_id).send(("cancel", job_id))
        alive = {k_ for k_ in keys if self.subtasks[k_].taskexecutor in self.taskexecutors}
        alive = {k_ for k_ in alive if self.subtasks[k_].state != "FINISHED"}
        deadline = time.monotonic() + _EXIT_WAIT_S
        while alive and time.monotonic() < deadline:
            try:
                te_id, msg = self.launcher.events.get(timeout=0.1)
            except queue.Empty:
                continue
            if msg[0] == "subtask_exit":
                alive.discard(msg[1])
            elif msg[0] in ("te_lost", "te_exit") and self._is_current(te_id, msg):
                alive = {k_ for k_ in alive if self.subtasks[k_].taskexecutor != te_id}
                self._lose_taskexecutor(te_id)
        for key in keys:
            self.ledger.release(key)
            st = self.subtasks[key]
            if st.state not in ("FINISHED", "FAILED"):
                st.state = "CANCELED"
        self.release_slots(job_id, attempt)
        for path in glob.glob(str(self.launcher.workdir / "*.sock")):
            if f"{job_id}-a{attempt}-" in path:
                os.unlink(path)

    def release_slots(self, job_id: str, attempt: int) -> None:
        for te_id in self._slots.pop((job_id, attempt), []):
            if te_id in self.taskexecutors:
                self.taskexecutors[te_id].used_slots -= 1

    def _is_current(self, te_id: str, msg: tuple[Any, ...]) -> bool:
        """Whether a ``te_lost``/``te_exit`` event is about the registered incarnation."""
        te = self.taskexecutors.get(te_id)
        return te is not None and msg[-1] == te.registration.pid

    def _lose_taskexecutor(self, te_id: str) -> None:
        te = self.taskexecutors.pop(te_id, None)
        if te is not None:
            self._lost_pids.add(te.registration.pid)
        self.ledger.remove_taskexecutor(te_id)

    def _replace_lost_taskexecutors(self) -> None:
        n = self.config.get(k.NUMBER_TASKMANAGER)
        wanted = [f"taskexecutor-{i}" for i in range(1, n + 1)]
        lost = [te for te in wanted if te not in self.taskexecutors]
        if lost:
            self.launcher.start(lost)
            self._await_registration(lost)

    def _commit_files(self, graph: JobGraph, job_id: str, attempt: int) -> None:
        for chain in graph.chains:
            for node in chain.nodes:
                if node.kind != "sink_file":
                    continue
                target = str(node.fn)
                parts = [
                    p for i in range(chain.parallelism)
                    for p in self.subtasks[SubtaskKey(job_id, attempt, chain.id, i)].parts
                ]
                tmp = f"{target}.tmp-{os.getpid()}"
                try:
                    with open(tmp, "wb") as out:
                        for part in parts:
                            with open(part, "rb") as f:
                                while block := f.read(1 << 20):
                                    out.write(block)
                        out.flush()
                        os.fsync(out.fileno())
                    os.replace(tmp, target)
                except BaseException:
                    if os.path.exists(tmp):
                        os.unlink(tmp)
                    raise
                for part in parts:
                    os.unlink(part)
        self._remove_stale_parts(graph)

    @staticmethod
    def _remove_stale_parts(graph: JobGraph) -> None:
        for t in graph.transformations:
            if t.kind == "sink_file":
                directory, base = os.path.split(str(t.fn))
                for part in glob.glob(os.path.join(directory, f".{glob.escape(base)}.part-*.tmp")):
                    os.unlink(part)

    def cleanup_after_failure(self, graph: JobGraph) -> None:
        self._remove_stale_parts(graph)

    # -- reporting -----------------------------------------------------------------------------
    def _notify(self, graph: JobGraph) -> None:
        if self.progress_listeners:
            snapshot = self.progress(graph)
            for listener in self.progress_listeners:
                listener(snapshot)

    def progress(self, graph: JobGraph) -> dict[str, Any]:
        source_out = 0
        for st in self.subtasks.values():
            if graph.chains[st.key.chain].head.kind == "source" and st.counts:
                source_out += st.counts[0][1]
        total = 0
        for t in graph.transformations:
            if t.kind == "source":
                hint = t.fn.size_hint() if getattr(t.fn, "bounded", True) else None
                if hint is None:
                    total = -1
                    break
                total += hint
        return {"records": source_out, "total": total if total >= 0 else None}

    def _result(self, graph: JobGraph, job_id: str, attempt: int, started: float,
                first_record: float | None, collected: list[Any]) -> JobResult:
        operators: dict[str, dict[str, int]] = {}
        devices: dict[str, str] = {}
        for key, st in self.subtasks.items():
            if key.job_id != job_id or key.attempt != attempt:
                continue
            chain = graph.chains[key.chain]
            for node, (n_in, n_out) in zip(chain.nodes, st.counts):
                entry = operators.setdefault(node.name, {"records_in": 0, "records_out": 0})
                entry["records_in"] += n_in
                entry["records_out"] += n_out
            if st.devices:
                devices[_requester_name(chain, key.index)] = f"{st.taskexecutor} " + ", ".join(
                    f"{r} {a}" + ("" if s == 1 else f" ({format_amount(s)})")
                    for r, items in sorted(st.devices.items()) for a, s in items
                )
        return JobResult(job_id, graph.name, "FINISHED", time.monotonic() - started, first_record,
                         attempt + 1, operators, devices, collected)


def _unpicklable(chain: Chain) -> str:
    """Name the first operator of ``chain`` whose function (or key function) does not pickle."""
    for node in chain.nodes:
        for what, obj in (("function", node.fn), ("key function", node.key_fn)):
            try:
                cloudpickle.dumps(obj)
            except Exception:
                return f"the {what} of operator {node.name!r} ({node.kind})"
    return f"the operators of {chain.name!r}"


def _subtask_name(chain: Chain, index: int) -> str:
    return f"{chain.name} ({index + 1}/{chain.parallelism})"


def _requester_name(chain: Chain, index: int) -> str:
    """A subtask named after the operator(s) of its chain that requested devices."""
    asked = " -> ".join(n.name for n in chain.nodes if n.resources) or chain.name
    return f"{asked} ({index + 1}/{chain.parallelism})"


def _address(props: dict[str, str]) -> str:
    from accelflow.resources._api import ExternalResourceInfo

    return ExternalResourceInfo(props).address


def _rebuild_error(te_id: str, class_name: str, text: str) -> AccelflowError:
    """Re-raise a TaskExecutor's start-up error in the client, keeping its class."""
    cls = getattr(_errors, class_name, None)
    message = f"{te_id} could not start: {text}"
    if isinstance(cls, type) and issubclass(cls, AccelflowError):
        try:
            return cls(message)
        except TypeError:
            pass
    return AccelflowError(message)


def _log_restart(job_id: str, attempt: int, exc: BaseException) -> None:
    import logging

    logging.getLogger("accelflow.runtime").warning(
        "%s failed, restarting (attempt %d): %s", job_id, attempt + 1, str(exc).splitlines()[0]
    )
