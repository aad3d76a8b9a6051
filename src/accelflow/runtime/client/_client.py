"""Submitting a job: start the embedded cluster, run the job in a background thread, stop.

``JobClient`` is what ``Environment.execute_async`` returns. The cluster lives exactly as long
as the job; Ctrl-C (or any exception) in the caller cancels the job and stops the cluster.
With ``rest.enabled: true`` the cluster serves the REST API and web UI for as long as it
lives. When the execution context names a session cluster (``accelflow run --cluster URL``),
jobs go there instead (:class:`~._remote.RemoteJobClient`; :func:`~._submit.submit` picks).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

from accelflow._errors import JobCancelledError
from accelflow.config import Configuration, config_from, local_slots
from accelflow.config import keys as k
from accelflow.dataflow import JobGraph
from accelflow.runtime.client._context import ExecutionContext
from accelflow.runtime.client._waitable import Waitable
from accelflow.runtime.jobmanager import JobManager, JobResult, resident_only
from accelflow.runtime.launchers import make_launcher, start_zygote

class JobClient(Waitable):
    """Handle of a running job: ``status()``, ``cancel()``, ``wait()``."""

    def __init__(self, graph: JobGraph, config: Configuration, context: ExecutionContext) -> None:
        self.name = graph.name
        self.submitted = time.monotonic()
        self.graph = graph
        config = sized_for(graph, config)
        self.launcher = make_launcher(config)
        self.launcher.warm_ahead(devices_wanted(graph, config))  # warmed while the cluster starts
        self.jobmanager = JobManager(config, self.launcher)
        self.rest: Any = None  # a RestServer while rest.enabled
        self._status = "CREATED"
        self._result: JobResult | None = None
        self._error: BaseException | None = None
        self._done = threading.Event()
        self._stop_progress: Callable[[], None] | None = None
        if context.progress is not None:
            self._stop_progress = context.progress(self.jobmanager, self.graph)
        self._thread = threading.Thread(target=self._run, name="accelflow-jobmanager", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        try:
            self._status = "STARTING"
            failed: list[BaseException] = []  # what sharing raised, for this thread to raise

            def share() -> None:
                try:
                    self.jobmanager.prepare_sources(self.graph)
                except BaseException as exc:
                    failed.append(exc)

            sharing = threading.Thread(target=share, name="accelflow-share-sources")
            sharing.start()  # large arrays go to shared memory while TaskExecutors start
            try:
                self.jobmanager.start_cluster()
            finally:
                sharing.join()
            if failed:
                raise failed[0]
            if self.jobmanager.config.get(k.REST_ENABLED):
                from accelflow.runtime.rest import RestServer  # http.server only when asked

                self.rest = RestServer(self.jobmanager, self.jobmanager.config, embedded=True)
                self.rest.start()
            self._status = "RUNNING"
            self._result = self.jobmanager.run(self.graph, self.submitted)
            self._status = "FINISHED"
        except JobCancelledError as exc:
            self._status, self._error = "CANCELED", exc
        except BaseException as exc:  # reported to the waiting caller
            self._status, self._error = "FAILED", exc
        finally:
            try:
                self.jobmanager.cleanup_after_failure(self.graph) if self._error else None
                self.jobmanager.close()  # before the launcher: its exit events are no news
                if self.rest is not None:
                    self.rest.stop()
                self.launcher.stop()
            finally:
                self._done.set()

    def status(self) -> str:
        """``STARTING``, ``RUNNING``, ``FINISHED``, ``FAILED`` or ``CANCELED``."""
        return self._status

    def cancel(self) -> None:
        """Ask the job to stop; ``wait()`` then raises ``JobCancelledError``."""
        self.jobmanager.cancel_requested = True


def sized_for(graph: JobGraph, config: Configuration) -> Configuration:
    """``config`` with ``taskmanager.numberOfTaskSlots`` sized to ``graph`` when it is not set,
    as Flink's local environment does (``Environment()`` runs a parallelism-4 job)."""
    if config.is_set(k.NUMBER_OF_TASK_SLOTS):
        return config
    ray = config.get(k.EXECUTION_TARGET) == "ray"
    taskexecutors = config.get(k.RAY_NUMBER_TASKMANAGER if ray else k.NUMBER_TASKMANAGER)
    slots = local_slots(config, graph.max_parallelism, taskexecutors)
    return config_from(values={**config.to_raw_dict(), k.NUMBER_OF_TASK_SLOTS.name: slots})


def devices_wanted(graph: JobGraph, config: Configuration) -> dict[str, tuple[int, int]]:
    """The devices ``graph``'s subtasks that hold one device (or a share of one) will want,
    per resource: ``(devices, subtasks per device)``, packed as ``pack`` places them; none
    without device isolation (no subtask runs in a warm process then). Resident-only chains
    (:func:`~accelflow.runtime.jobmanager.resident_only`) are not counted: their subtasks are
    forked (their device host, which makes the device's context, starts on first use).

    Example:
        >>> from accelflow.dataflow import MapSpec, ResidentMapSpec, Transformation, build_job_graph
        >>> from accelflow.scheduling import ResourceProfile
        >>> half = ResourceProfile.parse({"gpu": 0.5}, operator="m")
        >>> graph = build_job_graph("j", [Transformation(0, "m", MapSpec(abs), 3, half)])
        >>> devices_wanted(graph, config_from(values={}))
        {'gpu': (2, 2)}
        >>> resident = build_job_graph("j", [Transformation(0, "m", ResidentMapSpec(abs), 3, half)])
        >>> devices_wanted(resident, config_from(values={}))
        {}
    """
    if not config.get(k.DEVICE_ISOLATION):
        return {}
    wanted: dict[str, tuple[int, int]] = {}
    for chain in graph.chains:
        if resident_only(chain):
            continue
        asked = [(resource, amount) for resource, amount in chain.resources.items() if amount > 0]
        if len(asked) == 1 and asked[0][1] <= 1:  # one device (a share of one) per subtask
            (resource, amount), = asked
            each = min(chain.parallelism, int(1 / amount))
            devices, most = wanted.get(resource, (0, 0))
            wanted[resource] = (devices - (-chain.parallelism // each), max(most, each))
    return wanted


def warm_up(config: Configuration, context: ExecutionContext) -> None:
    """Start, in the background, what this client's first job would wait for: the zygote
    (``local.start-method: zygote`` on the local target), whose imports take 0.2-0.3 s, so
    a job submitted later finds it ready. Nothing for a session cluster or Ray."""
    if (context.cluster_url is None and config.get(k.EXECUTION_TARGET) == "local"
            and config.get(k.LOCAL_START_METHOD) == "zygote"):
        threading.Thread(target=start_zygote, name="accelflow-warm-up", daemon=True).start()
