"""The JobManager: registers TaskExecutors, places subtasks on slots and devices, deploys
them, follows their progress, and restarts or fails jobs. It runs in the client (embedded
cluster) or in the session cluster's process, where it runs several jobs at once.

Decisions (placement) are delegated to the pure :func:`accelflow.scheduling.place`; the
ledger records who holds which device share; this module is the I/O shell around them.

Threads and state:

- the launcher's event queue is read in one place, :meth:`JobManager._route`: it records
  registrations and lost TaskExecutors itself and routes every subtask event to its job's
  own queue (by ``SubtaskKey.job_id``). A session cluster runs it on a *dispatcher* thread
  (:meth:`JobManager.start_dispatcher`); the embedded cluster lets the thread that waits for
  an event pump the queue instead, so the client runs no extra thread;
- each job is driven by the thread that calls :meth:`JobManager.run` / :meth:`run_job`, which
  reads only that job's queue;
- ``lock`` guards ``taskexecutors``, ``ledger``, ``jobs``, ``subtasks`` and the slot book;
  every change happens under it, so :mod:`accelflow.runtime.service._snapshot` can read a consistent
  view from other threads (the REST server) by taking it too.

A job that does not fit in the capacity free now but would fit the empty cluster waits
(``PENDING``, with the placement failure's reasons) and is placed when capacity is released;
a job that would not fit even the empty cluster fails at once with that explanation.
"""

from __future__ import annotations

import glob
import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from fractions import Fraction
from typing import Any

from accelflow import _errors
from accelflow._errors import AccelflowError, AllocationError, JobCancelledError, JobError
from accelflow.dataflow import ArraySource
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.dataflow import JobGraph
from accelflow.runtime.jobmanager._jobs import (
    Job, JobResult, PendingReason, SubtaskState, TaskExecutorInfo,
)
from accelflow.runtime.jobmanager._plan import (
    JOB_KEYS, chain_blob, job_config, rebuild_error, requester_name, slot_requests, source_total,
    splits_of, subtask_name,
)
from accelflow.runtime import Registration, SubtaskDescriptor, SubtaskKey
from accelflow.runtime import commit_files, remove_stale_parts
from accelflow.runtime.launchers import Event, Launcher
from accelflow.scheduling import (
    DeviceKey, DeviceLedger, SlotAssignment, SlotRequest, TaskExecutorOffer, format_amount, place,
)
from accelflow.scheduling import ONE

__all__ = ["JOB_KEYS", "JobManager", "JobResult", "SubtaskState", "TaskExecutorInfo"]

_EXIT_WAIT_S = 15.0
_POLL_S = 0.1
_log = logging.getLogger("accelflow.runtime")


class JobManager:
    def __init__(self, config: Configuration, launcher: Launcher) -> None:
        self.config = config
        self.launcher = launcher
        self.lock = threading.RLock()
        self.ledger = DeviceLedger()
        self.taskexecutors: dict[str, TaskExecutorInfo] = {}
        self.jobs: dict[str, Job] = {}
        self.subtasks: dict[SubtaskKey, SubtaskState] = {}
        self.progress_listeners: list[Callable[[dict[str, Any]], None]] = []
        #: cancels every job (the embedded cluster's ``JobClient.cancel``)
        self.cancel_requested = False
        self._released = threading.Condition(self.lock)  # notified when capacity frees up
        self._job_counter = 0
        self._slots: dict[tuple[str, int], list[str]] = {}
        self._lost_pids: set[int] = set()  # incarnations already given up on
        self._registrations: queue.Queue[Event] = queue.Queue()
        self._starting = threading.Lock()  # one start/replacement of TaskExecutors at a time
        self._pump = threading.Lock()
        self._launches: queue.Queue[tuple[list[str], queue.Queue[BaseException | None]]] = queue.Queue()
        self._closed = threading.Event()
        self._dispatcher: threading.Thread | None = None

    # -- cluster -------------------------------------------------------------------------------
    def start_cluster(self) -> None:
        """Start ``local.number-taskmanager`` TaskExecutors and wait until they registered."""
        with self._starting:
            ids = self._wanted_taskexecutors()
            self._launch(ids)
            self._await_registration(ids)

    def start_dispatcher(self) -> None:
        """Route events on a thread of their own (a session cluster, where several jobs run).

        Without it (the embedded cluster) the thread waiting for an event pumps the launcher's
        queue itself, so the client runs no extra thread. This thread also starts every
        TaskExecutor: Linux signals a TaskExecutor's parent-death signal when the *thread*
        that started it ends, so they must be started by a thread that lives as long as the
        cluster, not by a job's thread.
        """
        if self._dispatcher is None:
            self._dispatcher = threading.Thread(target=self._dispatch, daemon=True,
                                                name="accelflow-dispatch")
            self._dispatcher.start()

    def close(self) -> None:
        """Stop the dispatcher (the launcher is stopped by its owner)."""
        self._closed.set()
        if self._dispatcher is not None and self._dispatcher is not threading.current_thread():
            self._dispatcher.join(5)

    def _launch(self, ids: list[str]) -> None:
        if self._dispatcher is None or self._dispatcher is threading.current_thread():
            self.launcher.start(ids)
            return
        done: queue.Queue[BaseException | None] = queue.Queue()
        self._launches.put((ids, done))
        error = done.get()
        if error is not None:
            raise error

    def _next_event(self, source: queue.Queue[Event], timeout: float) -> Event | None:
        """The next event of ``source``, pumping the launcher's queue when nobody else does."""
        if self._dispatcher is None and self._pump.acquire(blocking=False):
            try:
                try:
                    return source.get_nowait()
                except queue.Empty:
                    pass
                try:
                    te_id, msg = self.launcher.events.get(timeout=timeout)
                except queue.Empty:
                    return None
                self._route(te_id, msg)
            finally:
                self._pump.release()
            try:
                return source.get_nowait()
            except queue.Empty:
                return None
        try:
            return source.get(timeout=timeout)
        except queue.Empty:
            return None

    def _wanted_taskexecutors(self) -> list[str]:
        ray = self.config.get(k.EXECUTION_TARGET) == "ray"
        n = self.config.get(k.RAY_NUMBER_TASKMANAGER if ray else k.NUMBER_TASKMANAGER)
        return [f"taskexecutor-{i}" for i in range(1, n + 1)]

    def _await_registration(self, ids: list[str]) -> None:
        deadline = time.monotonic() + self.config.get(k.STARTUP_TIMEOUT)
        waiting = set(ids)
        while waiting:
            left = deadline - time.monotonic()
            event = self._next_event(self._registrations, min(_POLL_S, max(0.0, left)))
            if event is None:
                if left > 0:
                    continue
                raise JobError(
                    f"TaskExecutor(s) {sorted(waiting)} did not register within "
                    f"{self.config.get(k.STARTUP_TIMEOUT):g} s (taskmanager.registration.timeout)"
                )
            te_id, msg = event
            if msg[0] == "register":
                waiting.discard(te_id)
            elif msg[0] == "register_failed":
                raise rebuild_error(te_id, msg[2], msg[3])
            elif msg[0] in ("te_exit", "te_lost") and te_id in waiting and msg[-1] not in self._lost_pids:
                how = f"exited (exit code {msg[2]})" if msg[0] == "te_exit" else "disconnected"
                raise JobError(f"{te_id} {how} during start-up; see its output above")

    def _dispatch(self) -> None:
        while not self._closed.is_set():
            while not self._launches.empty():
                ids, done = self._launches.get()
                try:
                    self.launcher.start(ids)
                    done.put(None)
                except BaseException as exc:
                    done.put(exc)
            try:
                te_id, msg = self.launcher.events.get(timeout=_POLL_S)
            except queue.Empty:
                continue
            try:
                self._route(te_id, msg)
            except Exception:  # the dispatcher must outlive any one bad event
                _log.exception("accelflow internal error while handling %r from %s", msg[:1], te_id)

    def _route(self, te_id: str, msg: tuple[Any, ...]) -> None:
        kind = msg[0]
        if kind == "register":
            reg: Registration = msg[1]
            with self.lock:
                self.taskexecutors[te_id] = TaskExecutorInfo(reg)
                self.ledger.add_devices(self._devices(reg))
                self._released.notify_all()
        if kind in ("te_lost", "te_exit"):
            with self.lock:
                lost = self._is_current(te_id, msg)
                if lost:
                    self._lose_taskexecutor(te_id)
                jobs = [j for j in self.jobs.values() if not j.done.is_set()] if lost else []
            for running in jobs:
                running.events.put((te_id, ("te_died", te_id)))
        if kind in ("register", "register_failed", "te_lost", "te_exit"):
            self._registrations.put((te_id, msg))
            return
        key = msg[1] if len(msg) > 1 else None
        if isinstance(key, SubtaskKey):
            job = self.jobs.get(key.job_id)
            if job is not None:
                job.events.put((te_id, msg))

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
    def submit(self, graph: JobGraph, *, config: Configuration | None = None,
               submitted: float | None = None) -> Job:
        """Register a job (state ``CREATED``); :meth:`run_job` then runs it.

        ``config`` is the job's own config: only :data:`JOB_KEYS` are taken from it.
        """
        merged = self.config if config is None else job_config(self.config, config)
        with self.lock:
            self._job_counter += 1
            job = Job(f"job-{self._job_counter}", graph, merged,
                      submitted if submitted is not None else time.monotonic())
            self.jobs[job.id] = job
        return job

    def check_fits(self, graph: JobGraph, config: Configuration | None = None) -> None:
        """Refuse a job that would not fit even the empty cluster (a session's submission).

        Raises:
            AllocationError: with the reasons per TaskExecutor and device.
        """
        policy = (config or self.config).get(k.PLACEMENT_POLICY)
        with self.lock:
            place(slot_requests(graph, "check", 0), self._offers(empty=True), policy)  # type: ignore[arg-type]

    def run(self, graph: JobGraph, submitted: float | None = None) -> JobResult:
        """Run ``graph`` to the end; times count from ``submitted`` (``time.monotonic()``)."""
        return self.run_job(self.submit(graph, submitted=submitted))

    def run_job(self, job: Job) -> JobResult:
        """Run a submitted job to its end in this thread; the job's record ends up ended."""
        try:
            result = self._run_attempts(job)
        except JobCancelledError as exc:
            with self.lock:
                job.end("CANCELED", error=str(exc))
            raise
        except BaseException as exc:
            with self.lock:
                job.end("FAILED", error=str(exc) or type(exc).__name__)
            raise
        with self.lock:
            job.end("FINISHED", result=result)
        return result

    def cancel(self, job_id: str) -> bool:
        """Ask one job to stop; False when it has already ended.

        Raises:
            KeyError: no such job.
        """
        with self.lock:
            job = self.jobs[job_id]
            if job.done.is_set():
                return False
            job.cancel_requested = True
            self._released.notify_all()  # a pending job stops waiting
            return True

    def _run_attempts(self, job: Job) -> JobResult:
        self.prepare_sources(job.graph)
        strategy = job.config.get(k.RESTART_STRATEGY)
        attempts_left = job.config.get(k.RESTART_ATTEMPTS) if strategy == "fixed-delay" else 0
        while True:
            try:
                collected, first_record = self._run_attempt(job)
                break
            except JobCancelledError:
                raise
            except JobError as exc:
                if attempts_left <= 0:
                    raise
                attempts_left -= 1
                with self.lock:
                    job.attempt += 1
                    job.state = "RESTARTING"
                _log_restart(job.id, job.attempt, exc)
                time.sleep(job.config.get(k.RESTART_DELAY))
                self._replace_lost_taskexecutors()
        self.release_slots(job.id, job.attempt)
        commit_files(job.graph, lambda c, i: self.subtasks[SubtaskKey(job.id, job.attempt, c, i)].parts)
        return self._result(job, first_record, collected)

    def prepare_sources(self, graph: JobGraph) -> None:
        """Spill NumPy sources to memory-mapped files (idempotent; may overlap cluster start)."""
        for t in graph.transformations:
            if isinstance(t.fn, ArraySource):
                t.fn.spill(self.launcher.workdir)

    def _cancelled(self, job: Job) -> bool:
        return job.cancel_requested or self.cancel_requested

    def _run_attempt(self, job: Job) -> tuple[list[Any], float | None]:
        keys = self._deploy(job)
        collected: dict[SubtaskKey, list[Any]] = {key: [] for key in keys}
        first: list[float] = []
        pending = set(keys)
        try:
            while pending:
                if self._cancelled(job):
                    raise JobCancelledError(f"{job.id} ({job.name}) was cancelled")
                event = self._next_event(job.events, _POLL_S)
                if event is None:
                    continue
                te_id, msg = event
                if msg[0] == "te_died":
                    if any(self.subtasks[key].taskexecutor == te_id for key in pending):
                        raise JobError(f"{te_id} died while running {job.id} ({job.name})")
                    continue
                key = msg[1]
                if key in collected:
                    self._subtask_event(job, key, msg, collected, pending, first)
        except AccelflowError:
            self._abort(job, keys)
            raise
        records = []
        for key in sorted(keys, key=lambda k_: (k_.chain, k_.index)):
            for chunk in collected[key]:
                records.extend(chunk if not hasattr(chunk, "rows") else chunk.rows())
        return records, (first[0] if first else None)

    def _subtask_event(self, job: Job, key: SubtaskKey, msg: tuple[Any, ...],
                       collected: dict[SubtaskKey, list[Any]], pending: set[SubtaskKey],
                       first: list[float]) -> None:
        kind = msg[0]
        st = self.subtasks[key]
        is_source = job.graph.chains[key.chain].head.kind == "source"
        with self.lock:
            if kind == "running":
                st.state = "RUNNING"
            elif kind == "progress":
                st.counts = msg[2]
            elif kind == "finished":
                st.state, st.counts, st.parts = "FINISHED", msg[2], msg[3]
                self.ledger.release(key)
                pending.discard(key)
                self._released.notify_all()
            elif kind == "failed":
                st.state = "FAILED"
                raise JobError(f"subtask {st.name} on {st.taskexecutor} failed:\n{msg[2].rstrip()}")
            elif kind == "subtask_exit" and st.state != "FINISHED":
                st.state = "FAILED"
                raise JobError(
                    f"subtask {st.name} on {st.taskexecutor} exited with code {msg[2]} "
                    "without finishing"
                )
        if kind == "collect":
            collected[key].append(msg[2])
        if kind in ("progress", "finished"):
            if not first and is_source and msg[2][0][1]:
                first.append(time.monotonic() - job.submitted)
            self._notify(job.graph)

    def _deploy(self, job: Job) -> list[SubtaskKey]:
        graph = job.graph
        requests = slot_requests(graph, job.id, job.attempt)
        # user code is pickled and split before any slot or device is taken, so a job that
        # cannot be shipped fails with nothing to give back
        blobs = {c.id: chain_blob(job, c, lambda o, i: self._address(job.id, job.attempt, o, i)) for c in graph.chains}
        splits = splits_of(graph)
        with self.lock:
            assignments = self._place_when_free(job, requests)
            keys = self._acquire(job, assignments)
            descriptors = [self._descriptor(job, key, blobs, splits) for key in keys]
            job.state, job.pending = "RUNNING", None
        for te_id, desc in descriptors:
            self.launcher.handle(te_id).send(("deploy", desc))
        return keys

    def _place_when_free(self, job: Job, requests: list[SlotRequest]) -> list[SlotAssignment]:
        """Place now, or wait (``PENDING``) while the request would fit the empty cluster.

        Called with ``lock`` held; waiting releases it.

        Raises:
            AllocationError: the request fits not even the empty cluster; the reasons say why.
            JobCancelledError: the job was cancelled while it waited.
        """
        policy = job.config.get(k.PLACEMENT_POLICY)
        while True:
            if self._cancelled(job):
                raise JobCancelledError(f"{job.id} ({job.name}) was cancelled while waiting for resources")
            try:
                return place(requests, self._offers(), policy)  # type: ignore[arg-type]
            except AllocationError as now:
                place(requests, self._offers(empty=True), policy)  # type: ignore[arg-type]
                if job.pending is None:
                    _log.info("%s waits for resources: %s", job.id, str(now).splitlines()[0])
                job.state = "PENDING"
                job.pending = PendingReason(str(now).splitlines()[0], now.reasons, time.time())
                self._released.wait(1.0)

    def _offers(self, *, empty: bool = False) -> list[TaskExecutorOffer]:
        return [
            TaskExecutorOffer(
                te.id, te.registration.slots - (0 if empty else te.used_slots), te.registration.slots,
                self._free_devices(te.id, empty=empty),
            )
            for te in sorted(self.taskexecutors.values(), key=lambda t: t.id)
        ]

    def _acquire(self, job: Job, assignments: list[SlotAssignment]) -> list[SubtaskKey]:
        keys: list[SubtaskKey] = []
        for assignment in assignments:
            te = self.taskexecutors[assignment.taskexecutor]
            te.used_slots += 1
            for holder, shares in assignment.shares.items():
                assert isinstance(holder, SubtaskKey)
                self.ledger.acquire(holder, shares)
                keys.append(holder)
                devices: dict[str, list[tuple[str, Fraction]]] = {}
                for d, share in shares.items():
                    devices.setdefault(d.resource, []).append((d.address, share))
                chain = job.graph.chains[holder.chain]
                self.subtasks[holder] = SubtaskState(
                    holder, subtask_name(chain, holder.index), te.id, devices
                )
        self._slots[(job.id, job.attempt)] = [a.taskexecutor for a in assignments]
        return keys

    def _descriptor(self, job: Job, key: SubtaskKey, blobs: dict[int, bytes],
                    splits: dict[tuple[int, int], list[Any]]) -> tuple[str, SubtaskDescriptor]:
        st = self.subtasks[key]
        te = self.taskexecutors[st.taskexecutor]
        chain = job.graph.chains[key.chain]
        return te.id, SubtaskDescriptor(
            key=key, parallelism=chain.parallelism, chain_blob=blobs[chain.id],
            listen_address=self._address(job.id, job.attempt, chain.id, key.index) if chain.input is not None else None,
            expected_senders=job.graph.upstream_senders(chain, key.index),
            splits=splits.get((chain.id, key.index)),
            assigned={r: [(self._info(te, r, a), str(s)) for a, s in items if not a.startswith("#")]
                      for r, items in st.devices.items()},
            taskexecutor_infos={r["name"]: r["infos"] for r in te.registration.resources},
            isolate=job.config.get(k.DEVICE_ISOLATION), authkey=getattr(self.launcher, "authkey", b""),
            taskexecutor_id=te.id,
        )

    def _free_devices(self, te_id: str, *, empty: bool = False) -> dict[str, dict[str, Fraction]]:
        free: dict[str, dict[str, Fraction]] = {}
        for d in self.ledger.devices():
            if d.taskexecutor == te_id:
                free.setdefault(d.resource, {})[d.address] = ONE if empty else self.ledger.free(d)
        return free

    @staticmethod
    def _info(te: TaskExecutorInfo, resource: str, address: str) -> dict[str, str]:
        for props in te.infos(resource):
            if _address(props) == address:
                return props
        raise _errors.AccelflowInternalError(f"{te.id} has no {resource} {address}")

    def _address(self, job_id: str, attempt: int, chain: int, index: int) -> str:
        return self.launcher.channel_address(f"{job_id}-a{attempt}-c{chain}-{index}")

    # -- failure and cleanup ------------------------------------------------------------------
    def _abort(self, job: Job, keys: list[SubtaskKey]) -> None:
        with self.lock:
            te_ids = list(self.taskexecutors)
            alive = {k_ for k_ in keys if self.subtasks[k_].taskexecutor in self.taskexecutors
                     and self.subtasks[k_].state != "FINISHED"}
        for te_id in te_ids:
            self.launcher.handle(te_id).send(("cancel", job.id))
        deadline = time.monotonic() + _EXIT_WAIT_S
        while alive and time.monotonic() < deadline:
            event = self._next_event(job.events, _POLL_S)
            if event is None:
                continue
            te_id, msg = event
            if msg[0] == "subtask_exit":
                alive.discard(msg[1])
            elif msg[0] == "te_died":
                alive = {k_ for k_ in alive if self.subtasks[k_].taskexecutor != te_id}
        with self.lock:
            for key in keys:
                self.ledger.release(key)
                st = self.subtasks[key]
                if st.state not in ("FINISHED", "FAILED"):
                    st.state = "CANCELED"
            self.release_slots(job.id, job.attempt)
        for path in glob.glob(str(self.launcher.workdir / "*.sock")):
            if f"{job.id}-a{job.attempt}-" in path:
                os.unlink(path)

    def release_slots(self, job_id: str, attempt: int) -> None:
        with self.lock:
            for te_id in self._slots.pop((job_id, attempt), []):
                if te_id in self.taskexecutors:
                    self.taskexecutors[te_id].used_slots -= 1
            self._released.notify_all()

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
        with self._starting:
            lost = [te for te in self._wanted_taskexecutors() if te not in self.taskexecutors]
            if lost:
                self._launch(lost)
                self._await_registration(lost)

    def cleanup_after_failure(self, graph: JobGraph) -> None:
        remove_stale_parts(graph)

    # -- reporting -----------------------------------------------------------------------------
    def _notify(self, graph: JobGraph) -> None:
        if self.progress_listeners:
            snapshot = self.progress(graph)
            for listener in self.progress_listeners:
                listener(snapshot)

    def progress(self, graph: JobGraph) -> dict[str, Any]:
        """Records read by the sources of the job(s) running ``graph`` and the bounded total."""
        with self.lock:
            current = {(j.id, j.attempt) for j in self.jobs.values() if j.graph is graph}
            source_out = sum(
                st.counts[0][1] for st in self.subtasks.values()
                if (st.key.job_id, st.key.attempt) in current
                and graph.chains[st.key.chain].head.kind == "source" and st.counts
            )
        return {"records": source_out, "total": source_total(graph)}

    def _result(self, job: Job, first_record: float | None, collected: list[Any]) -> JobResult:
        operators: dict[str, dict[str, int]] = {}
        devices: dict[str, str] = {}
        with self.lock:
            states = [st for key, st in self.subtasks.items()
                      if key.job_id == job.id and key.attempt == job.attempt]
        for st in states:
            chain = job.graph.chains[st.key.chain]
            for node, (n_in, n_out) in zip(chain.nodes, st.counts):
                entry = operators.setdefault(node.name, {"records_in": 0, "records_out": 0})
                entry["records_in"] += n_in
                entry["records_out"] += n_out
            if st.devices:
                devices[requester_name(chain, st.key.index)] = f"{st.taskexecutor} " + ", ".join(
                    f"{r} {a}" + ("" if s == 1 else f" ({format_amount(s)})")
                    for r, items in sorted(st.devices.items()) for a, s in items
                )
        return JobResult(job.id, job.name, "FINISHED", time.monotonic() - job.submitted, first_record,
                         job.attempt + 1, operators, devices, collected)


def _address(props: dict[str, str]) -> str:
    from accelflow.resources import ExternalResourceInfo

    return ExternalResourceInfo(props).address


def _log_restart(job_id: str, attempt: int, exc: BaseException) -> None:
    _log.warning(
        "%s failed, restarting (attempt %d): %s", job_id, attempt + 1, str(exc).splitlines()[0]
    )
