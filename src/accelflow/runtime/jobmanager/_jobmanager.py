"""The JobManager: the job lifecycle (submit, attempts, restarts, results) over three parts
that do not call each other: :class:`~._membership.Membership` (TaskExecutors come and go),
:class:`~._deployment.Deployer` (placement and shipping) and the
:class:`~._events.EventPump` (who hears which event), sharing one
:class:`~._state.ClusterState`. It runs in the client (embedded cluster) or in the session
cluster's process, where it runs several jobs at once, each driven by the thread that calls
:meth:`JobManager.run_job`.

A job that does not fit in the capacity free now but would fit the empty cluster waits
(``PENDING``, with the placement failure's reasons) and is placed when capacity is released;
a job that would not fit even the empty cluster fails at once with that explanation.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Callable
from concurrent.futures import Future
from typing import Any

from accelflow._errors import (
    AccelflowError, AllocationError, CheckpointError, JobCancelledError, JobError, decode_error,
)
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.dataflow import JobGraph
from accelflow.runtime import SYSTEM_CLOCK, Clock
from accelflow.runtime import (
    CheckpointAck, CheckpointCommitted, Collected, SubtaskExited, SubtaskFailed, SubtaskFinished, SubtaskKey, SubtaskProgress,
    SubtaskRunning, release_arrays, share_arrays,
)
from accelflow.runtime.jobmanager._checkpoints import CheckpointCoordinator, SavepointRequest
from accelflow.runtime.jobmanager._collected import CollectedResults
from accelflow.runtime.jobmanager._deployment import Deployer
from accelflow.runtime.jobmanager._events import POLL_S, EventPump, RoutedEvent, TaskExecutorDied
from accelflow.runtime.jobmanager._failover import Attempt, Failover, RestartBudget, in_place_off
from accelflow.runtime.jobmanager._job_sinks import FinalAcks, JobSinks, discard_sinks
from accelflow.runtime.jobmanager._jobs import (
    SUBTASK_ENDED, FailoverRecord, Job, JobResult, SubtaskState, TaskExecutorInfo,
)
from accelflow.runtime.jobmanager._membership import Membership
from accelflow.runtime.jobmanager._quarantine import inject_fault
from accelflow.runtime.jobmanager._plan import (
    job_config, never_deployed, progress_of, result_of, slot_requests,
)
from accelflow.runtime.jobmanager._root_cause import exit_text
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.runtime.launchers import Launcher
from accelflow.scheduling import DeviceLedger

_log = logging.getLogger("accelflow.runtime")


class JobManager:
    def __init__(self, config: Configuration, launcher: Launcher, *, clock: Clock = SYSTEM_CLOCK) -> None:
        self.config = config
        self.launcher = launcher
        self.clock = clock  # of every part; each can be made alone with its own (unit tests)
        self.state = ClusterState()
        self.pump = EventPump(launcher, self.state, clock=clock)
        self.membership = Membership(config, self.state, self.pump, clock=clock)
        self.deployer = Deployer(launcher, self.state, self.pump, clock=clock)
        self.progress_listeners: list[Callable[[dict[str, Any]], None]] = []
        self._job_counter = 0

    # the state, as the REST snapshot and tests read it (under ``lock``)
    @property
    def lock(self) -> Any:
        return self.state.lock

    @property
    def ledger(self) -> DeviceLedger:
        return self.state.ledger

    @property
    def taskexecutors(self) -> dict[str, TaskExecutorInfo]:
        return self.state.taskexecutors

    @property
    def jobs(self) -> dict[str, Job]:
        return self.state.jobs

    @property
    def subtasks(self) -> dict[SubtaskKey, SubtaskState]:
        return self.state.subtasks

    @property
    def cancel_requested(self) -> bool:
        """Whether every job is to stop (the embedded ``JobClient.cancel``, a session's stop)."""
        return self.state.cancel_all

    @cancel_requested.setter
    def cancel_requested(self, value: bool) -> None:
        with self.state.lock:
            self.state.cancel_all = value
            self.state.released.notify_all()

    # -- cluster -------------------------------------------------------------------------------
    def start_cluster(self) -> None:
        """Start the cluster's TaskExecutors and wait until they registered."""
        self.membership.start()

    def start_dispatcher(self) -> None:
        """Route events on a thread of their own (a session cluster; see :mod:`._events`)."""
        self.pump.start()

    def close(self) -> None:
        """Stop the dispatcher (the launcher is stopped by its owner)."""
        self.pump.close()

    # -- jobs ----------------------------------------------------------------------------------
    def submit(self, graph: JobGraph, *, config: Configuration | None = None,
               submitted: float | None = None) -> Job:
        """Register a job (state ``CREATED``); :meth:`run_job` then runs it.

        ``config`` is the job's own config: only ``JOB_KEYS`` are taken from it.
        """
        merged = self.config if config is None else job_config(self.config, config)
        with self.state.lock:
            self._job_counter += 1
            job = Job(f"job-{self._job_counter}", graph, merged,
                      submitted if submitted is not None else time.monotonic())
            self.state.jobs[job.id] = job
        return job

    def check_fits(self, graph: JobGraph, config: Configuration | None = None) -> None:
        """Refuse a job that would not fit even the empty cluster (a session's submission).

        Raises:
            AllocationError: with the reasons per TaskExecutor and device.
        """
        self.deployer.check_fits(slot_requests(graph, "check", 0),
                                 (config or self.config).get(k.PLACEMENT_POLICY))

    def run(self, graph: JobGraph, submitted: float | None = None) -> JobResult:
        """Run ``graph`` to the end; times count from ``submitted`` (``time.monotonic()``)."""
        return self.run_job(self.submit(graph, submitted=submitted))

    def run_job(self, job: Job) -> JobResult:
        """Run a submitted job to its end in this thread; the job's record ends up ended."""
        coordinator: CheckpointCoordinator | None = None
        try:
            coordinator = CheckpointCoordinator(job, self._send_to_subtask, self.state.lock, clock=self.clock)
            job.savepoints = coordinator.requests
            restored = coordinator.restore is not None
            with JobSinks(job.graph, lambda: restored or job.checkpoints.completed > 0) as sinks:
                result = self._run_attempts(job, coordinator, sinks)
        except JobCancelledError as exc:
            with self.state.lock:
                self._end_subtasks(job)
                job.end("CANCELED", error=str(exc))
            if coordinator is not None:
                coordinator.job_ended("CANCELED")
            raise
        except BaseException as exc:
            with self.state.lock:
                self._end_subtasks(job)
                job.end("FAILED", error=str(exc) or type(exc).__name__)
            if coordinator is not None:
                coordinator.job_ended("FAILED")
            raise
        finally:
            for t in job.graph.sources:
                release_arrays(t.source, wait=False)  # freeing 300 MB takes the kernel ~50 ms
        with self.state.lock:
            job.end("FINISHED", result=result)
        coordinator.job_ended("FINISHED")
        return result

    def _end_subtasks(self, job: Job) -> None:
        """A job that failed or was cancelled ends every subtask of its current attempt
        (under ``lock``): those still deploying or running (the attempt was not aborted)
        give back what they held and end ``CANCELED``; those never placed (the job ended
        before deploying them: a NumPy array that cannot be shared, user code that does not
        pickle, a cancel while ``PENDING``) get a ``CANCELED`` record with no TaskExecutor,
        as Flink cancels the tasks of a job that fails before they run. The REST API and
        the UI then show no subtask waiting for a job that is over."""
        for key, st in self.state.subtasks.items():
            if key.job_id == job.id and key.attempt == job.attempt and st.state not in SUBTASK_ENDED:
                self.state.release_devices(key)
                st.state = "CANCELED"
        for st in never_deployed(job, self.state.subtasks, "CANCELED"):
            self.state.subtasks[st.key] = st
        self.state.release_slots(job.id, job.attempt)

    def trigger_savepoint(self, job_id: str, target: str | None = None, *, stop: bool = False) -> Future[str]:
        """Ask a running job for a savepoint (in ``target``, or the configured
        ``execution.checkpointing.savepoint-dir``); with ``stop``, the job ends after it
        (Flink's stop-with-savepoint). The future gives the savepoint's path.

        Raises:
            KeyError: no such job. CheckpointError: it has ended, or no directory is known.
        """
        with self.state.lock:
            job = self.state.jobs[job_id]
            if job.done.is_set() or job.savepoints is None:
                raise CheckpointError(f"{job_id} is not running ({job.state})", path=job_id)
        if target is None and job.config.get_optional(k.SAVEPOINT_DIR) is None:
            raise CheckpointError(
                "no savepoint directory: give one, or set execution.checkpointing.savepoint-dir",
                path=job_id)
        request = SavepointRequest(target, stop)
        job.savepoints.put(request)
        return request.result

    def _send_to_subtask(self, key: SubtaskKey, message: Any) -> None:
        with self.state.lock:
            st = self.state.subtasks.get(key)
            te = st.taskexecutor if st is not None else None
            known = te in self.state.taskexecutors
        if known:
            assert te is not None
            self.launcher.handle(te).send(message)  # a dead one is reported as lost

    def cancel(self, job_id: str) -> bool:
        """Ask one job to stop; False when it has already ended.

        Raises:
            KeyError: no such job.
        """
        with self.state.lock:
            job = self.state.jobs[job_id]
            if job.done.is_set():
                return False
            job.cancel_requested = True
            self.state.released.notify_all()  # a pending job stops waiting
            return True

    def inject_fault(self, te_id: str, device: str, xid: object, resource: str | None = None) -> Any:
        """A fault drill on TaskExecutor ``te_id``'s ``device`` (see ``_quarantine.inject_fault``):
        the ``InjectFault`` sent. Raises ``KeyError`` (no such TaskExecutor) or ``ConfigError``."""
        return inject_fault(self.state, self.launcher, te_id, device, xid, resource)

    def prepare_sources(self, graph: JobGraph) -> None:
        """Share NumPy sources with the subtasks, never through a file (idempotent; may
        overlap cluster start): read from this process's memory, or copied into shared
        memory with ``pipeline.array-sharing: copy`` or where the kernel forbids the reading.
        :meth:`run_job` gives the memory back when the job ends, however it ends; a SIGKILLed
        client leaves nothing behind (anonymous memory, see ``runtime._array_sharing``). On the Ray
        target (``Launcher.put_array``) each array goes into Ray's object store once instead:
        subtasks on other machines cannot see this host's memory; each descriptor of a source
        subtask carries the source's handles (``SubtaskDescriptor.arrays``).

        Raises:
            JobError: an array could not be shared; names the source and what failed.
        """
        copy = self.config.get(k.ARRAY_SHARING) == "copy"
        for t in graph.sources:
            try:
                share_arrays(t.source, self.launcher.workdir, self.launcher.put_array, copy=copy)
            except Exception as exc:
                raise JobError(
                    f"source {t.name!r}: cannot share its NumPy array with the subtasks "
                    f"(pipeline.array-sharing: {self.config.get(k.ARRAY_SHARING)}): "
                    f"{type(exc).__name__}: {exc}") from exc

    def cleanup_after_failure(self, graph: JobGraph) -> None:
        """After a job (or its cluster's start) failed: shared sources and what the sinks left go."""
        for t in graph.sources:
            release_arrays(t.source)
        discard_sinks(graph)

    def _run_attempts(self, job: Job, coordinator: CheckpointCoordinator, sinks: JobSinks) -> JobResult:
        self.prepare_sources(job.graph)
        restarts = _restarts(job.config, coordinator.enabled)
        job.in_place_off = in_place_off(job.config, restarts)
        failover = Failover(job, coordinator, self.state, self.deployer, self.pump, self.launcher, self.clock,
                            RestartBudget(restarts))
        restarting: tuple[FailoverRecord, float] | None = None  # what the next attempt recovers from
        results = CollectedResults()
        while True:
            try:
                if restarting:  # a replacement that cannot start yet fails this attempt only
                    self.membership.replace_lost()
                job.restore_from, job.restore_id = coordinator.restored_states()
                collected, first_record, finals = self._run_attempt(job, coordinator, failover, restarting, results)
                break
            except (JobCancelledError, AllocationError, CheckpointError):
                raise
            except AccelflowError as exc:  # any failure of a running attempt, as Flink
                if job.cancel_requested or self.state.cancel_all:  # e.g. its cluster stopping
                    raise JobCancelledError(f"{job.id} ({job.name}) was cancelled") from exc
                if not failover.budget.take():
                    raise
                with self.state.lock:
                    job.attempt += 1
                    job.state = "RESTARTING"
                restarting = failover.full_restart(job.attempt - 1, exc)
                self.clock.sleep(job.config.get(k.RESTART_DELAY))
        self.state.release_slots(job.id, job.attempt)
        if job.stopped_with_savepoint is None:  # a stopped job's batch files are not complete
            sinks.commit(job.id, job.attempt, finals)
        with self.state.lock:
            states = [st for key, st in self.state.subtasks.items()
                      if key.job_id == job.id and key.attempt == job.attempt]
        return result_of(job, states, first_record, collected)

    def _run_attempt(self, job: Job, coordinator: CheckpointCoordinator, failover: Failover,
                     restarting: tuple[FailoverRecord, float] | None,
                     results: CollectedResults) -> tuple[list[Any], float | None, FinalAcks]:
        """Run one attempt to its end; a failure it confines rolls it back in place and the
        attempt goes on as the next one (``_failover``).

        Raises:
            AccelflowError: the attempt failed and was aborted (every subtask cancelled);
                ``failover.failure`` says what failed.
        """
        keys = self.deployer.deploy(job)
        results.rewind(job.restore_id)  # the restored subtasks send again what they sent after it
        attempt = Attempt(keys, results, recovery=restarting[0] if restarting else None,
                          failed_at=restarting[1] if restarting else 0.0)
        coordinator.start_attempt(keys)
        failover.pool.fill()
        while True:
            try:
                self._drive(job, attempt, coordinator, failover)
                failover.pool.stop()
                break
            except _Stopped:
                failover.pool.stop()
                self.deployer.abort(job, attempt.keys, attempt.exited)
                break
            except AccelflowError as exc:
                cancelled = job.cancel_requested or self.state.cancel_all
                rolled = None if cancelled or isinstance(exc, CheckpointError) else failover.roll_back(attempt, exc)
                if rolled is None:
                    failover.failure = attempt.failure
                    failover.pool.stop()
                    self.deployer.abort(job, attempt.keys, attempt.exited)
                    raise
                attempt = rolled
                results.rewind(job.restore_id)
        return results.chunks(), attempt.first_record, attempt.finals

    def _drive(self, job: Job, attempt: Attempt, coordinator: CheckpointCoordinator, failover: Failover) -> None:
        """Handle ``attempt``'s events until every subtask has finished."""
        while attempt.pending:
            if job.cancel_requested or self.state.cancel_all:
                raise JobCancelledError(f"{job.id} ({job.name}) was cancelled")
            event = self.pump.next_event(job.events, POLL_S)
            if event is not None and not failover.pool.on_any(event):
                self._on_event(job, attempt, event, coordinator)
                if attempt.recovery is not None and isinstance(event[1], SubtaskRunning):
                    failover.recovered(attempt)
            if (held := attempt.held.overdue(self.clock.monotonic())) is not None:  # no neighbour's came
                raise attempt.fail([], held, self.clock.monotonic())
            with self.state.lock:
                running = all(self.state.subtasks[key].state in ("RUNNING", "FINISHED") for key in attempt.keys)
            coordinator.tick(running)

    def _on_event(self, job: Job, attempt: Attempt, event: RoutedEvent,
                  coordinator: CheckpointCoordinator) -> None:
        te_id, msg = event
        if isinstance(msg, TaskExecutorDied):
            lost = [key for key in attempt.pending if self.state.subtasks[key].taskexecutor == te_id]
            if lost:
                raise attempt.fail(lost, JobError(f"{te_id} died while running {job.id} ({job.name})"),
                                   self.clock.monotonic(), te_id)
            return
        key = getattr(msg, "key", None)
        if key not in attempt.current:
            return  # an earlier attempt's
        st = self.state.subtasks[key]
        with self.state.lock:
            if isinstance(msg, SubtaskRunning):
                st.state = "RUNNING"
            elif isinstance(msg, SubtaskProgress):
                st.counts, st.metrics = msg.counts, msg.metrics
            elif isinstance(msg, SubtaskFinished):
                st.state, st.counts = "FINISHED", msg.counts
                self.state.release_devices(key)
                attempt.pending.discard(key)
                attempt.finished.add(key)
            elif isinstance(msg, SubtaskFailed):
                st.state = "FAILED"
                error = decode_error(msg.error, context=f"subtask {st.name} on {st.taskexecutor} failed")
                if not attempt.held.hold(key, error, self.clock.monotonic()):  # a neighbour's may come
                    raise attempt.fail([key], error, self.clock.monotonic())
            elif isinstance(msg, SubtaskExited):
                attempt.exited.add(key)
                if st.state != "FINISHED" and key not in attempt.held:
                    st.state = "FAILED"
                    raise attempt.fail([key], JobError(
                        f"subtask {st.name} on {st.taskexecutor} exited{exit_text(msg.exitcode)} without finishing"),
                        self.clock.monotonic())
        if isinstance(msg, CheckpointAck):
            if msg.final:  # what its sinks prepared last: their job-level commit's input
                attempt.finals[key] = (msg.checkpoint_id, msg.states)
            attempt.results.mark(key, msg.checkpoint_id)
            coordinator.on_ack(msg)
            if coordinator.latest is not None:
                attempt.results.forget_before(coordinator.latest.checkpoint_id)
        elif isinstance(msg, CheckpointCommitted) and coordinator.on_committed(msg):
            job.stopped_with_savepoint = coordinator.finish_stop()
            raise _Stopped()
        if isinstance(msg, CheckpointAck | SubtaskFinished):
            coordinator.on_subtask_ended(attempt.finished)
        if isinstance(msg, Collected):
            attempt.results.add(key, msg.chunk)
        if isinstance(msg, SubtaskProgress | SubtaskFinished):
            is_source = job.graph.chains[key.chain].head.source is not None
            if attempt.first_record is None and is_source and msg.counts[0][1]:
                attempt.first_record = time.monotonic() - job.submitted
            self._notify(job.graph)

    # -- reporting -----------------------------------------------------------------------------
    def _notify(self, graph: JobGraph) -> None:
        if self.progress_listeners:
            snapshot = self.progress(graph)
            for listener in self.progress_listeners:
                listener(snapshot)

    def progress(self, graph: JobGraph) -> dict[str, Any]:
        """Records the sinks of the job(s) running ``graph`` have finished, and the bounded
        total when every record reaches a sink (see ``_plan.progress_of``)."""
        with self.state.lock:
            current = {(j.id, j.attempt) for j in self.state.jobs.values() if j.graph is graph}
            states = [st for st in self.state.subtasks.values()
                      if (st.key.job_id, st.key.attempt) in current]
            return progress_of(graph, states)


class _Stopped(Exception):
    """The job's stop-with-savepoint completed: end the attempt, the job ends FINISHED."""


def _restarts(config: Configuration, checkpointing: bool) -> int:
    """How many restarts the job gets: with checkpointing on and no strategy set, Flink's
    default (fixed-delay, practically unbounded)."""
    strategy = config.get(k.RESTART_STRATEGY)
    if checkpointing and not config.is_set(k.RESTART_STRATEGY):
        strategy = "fixed-delay"
        if not config.is_set(k.RESTART_ATTEMPTS):
            return 2**31 - 1
    return config.get(k.RESTART_ATTEMPTS) if strategy == "fixed-delay" else 0


