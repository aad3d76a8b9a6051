"""The Ray launcher: every TaskExecutor is a Ray actor; the JobManager stays in the client.

The JobManager talks to it through the launcher boundary only, so this module translates:
``handle(id).send(msg)`` becomes the actor call ``command(msg)``; one thread per actor
long-polls ``poll()`` and puts what the TaskExecutor said on ``events``; an actor that dies
(``ray.kill``, node loss) becomes a ``("te_lost", id, pid)`` event. Data channels between
subtasks are relayed through actor calls (see :mod:`accelflow.runtime.taskexecutor._ray_actor`), never through a socket of
ours between machines.

Requests: each actor asks for its slots' CPUs (``taskmanager.numberOfTaskSlots``), the GPU
plugin's amount as ``num_gpus`` and every other external resource as a Ray custom resource of
its name (or ``external-resource.<name>.ray.resource-name``). An actor Ray cannot place within
``ray.placement-timeout`` fails start-up with Ray's view of free resources per node.
"""

from __future__ import annotations

import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from accelflow._errors import DeploymentError, JobError, MissingDependencyError, encode_error
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.resources import ray_resources_of
from accelflow.runtime import (
    Command, Deploy, Registration, RegistrationFailed, Rollback, TaskExecutorLost,
)
from accelflow.runtime import RELAY_PREFIX
from accelflow.runtime.taskexecutor import TRACE_ENV_VAR, trace
from accelflow.runtime.launchers._base import Launcher, TaskExecutorHandle, child_environment
from accelflow.runtime.launchers._ray_connect import (
    in_client_mode, join_cluster, num as _num, ray_view_of_free_resources, without_ray_address,
)

_POLL_S = 0.25
_STOP_TIMEOUT_S = 15.0
_MAX_CONCURRENCY = 64

#: the cluster this process joined and keeps connected: ``(ray.address, local working dir)``
_kept: tuple[str | None, str | None] | None = None
_connect_lock = threading.Lock()


def import_ray() -> Any:
    """``ray``, or a clear error naming the extra that installs it."""
    try:
        import ray
    except ImportError as exc:
        raise MissingDependencyError("execution.target: ray", extra="ray") from exc
    return ray


def actor_resources(config: Configuration) -> dict[str, Any]:
    """The Ray options of one TaskExecutor actor: ``num_cpus``, ``num_gpus``, ``resources``.

    Example:
        >>> from accelflow.config import config_from
        >>> actor_resources(config_from(values={"taskmanager.numberOfTaskSlots": 2,
        ...     "external-resources": "gpu;fpga", "external-resource.gpu.amount": 2,
        ...     "external-resource.gpu.driver-factory.class": "gpu",
        ...     "external-resource.fpga.amount": 1}))
        {'num_cpus': 2, 'num_gpus': 2, 'resources': {'fpga': 1}}
    """
    gpus = 0
    custom: dict[str, float] = {}
    for spec in config.external_resources.values():
        wanted = ray_resources_of(spec)  # the factory's RayResourceDecorator, if it has one
        gpus += wanted.num_gpus
        for name, amount in wanted.resources.items():
            custom[name] = custom.get(name, 0) + amount
    return {"num_cpus": config.get(k.NUMBER_OF_TASK_SLOTS), "num_gpus": gpus, "resources": custom}


def actor_environment() -> dict[str, str]:
    """What accelflow sets in every actor and its subtasks: the client's import path and
    ``PYTHONHASHSEED`` (``child_environment``), and ``$ACCELFLOW_STARTUP_TRACE`` when set. The
    actor applies it itself before it starts its forkserver, so it needs no Ray runtime
    environment (one per actor made Ray start each actor's worker through its runtime-env
    agent: about 0.6 s more per job)."""
    env = child_environment()
    if os.environ.get(TRACE_ENV_VAR):  # the actors trace their start-up into the same file
        env[TRACE_ENV_VAR] = os.environ[TRACE_ENV_VAR]
    return env


def runtime_env(config: Configuration) -> dict[str, Any]:
    """The Ray runtime environment of every TaskExecutor actor, ``{}`` (none) unless asked
    for: ``ray.runtime-env.env-vars`` and a remote ``ray.runtime-env.working-dir`` (a URI; a
    local directory is uploaded for the whole Ray job when the launcher connects: see
    ``_connect``), and the client's import path where accelflow itself is importable only
    through ``$PYTHONPATH`` (the actor's worker must import it before it can run).

    Example:
        >>> from accelflow.config import config_from
        >>> env = runtime_env(config_from(values={"ray.runtime-env.working-dir": "s3://b/job.zip",
        ...     "ray.runtime-env.env-vars": "HF_HOME=/data"}))
        >>> env["working_dir"], env["env_vars"]["HF_HOME"]
        ('s3://b/job.zip', '/data')
    """
    extra: Mapping[str, str] = config.get_optional(k.RAY_RUNTIME_ENV_ENV_VARS) or {}
    env_vars = dict(extra)
    if _imported_through_pythonpath():
        env_vars.setdefault("PYTHONPATH", child_environment()["PYTHONPATH"])
    env: dict[str, Any] = {"env_vars": env_vars} if env_vars else {}
    working_dir: str | None = config.get_optional(k.RAY_RUNTIME_ENV_WORKING_DIR)
    if working_dir and "://" in working_dir:  # a local one is uploaded by ray.init (_connect)
        env["working_dir"] = working_dir
    return env


def _imported_through_pythonpath() -> bool:
    """Whether this accelflow was found through ``$PYTHONPATH`` (e.g. a source checkout)."""
    import accelflow

    root = os.path.dirname(os.path.dirname(os.path.abspath(accelflow.__file__)))
    entries = os.environ.get("PYTHONPATH", "").split(os.pathsep)
    return root in {os.path.abspath(p) for p in entries if p}


class _RayHandle(TaskExecutorHandle):
    def __init__(self, launcher: RayLauncher, te_id: str) -> None:
        self.id = te_id
        self.launcher = launcher

    def send(self, message: Command) -> None:
        self.launcher.send(self.id, message)


class RayLauncher(Launcher):
    """TaskExecutors as Ray actors on the cluster at ``ray.address`` (or a local instance).

    Example (skipped in the doctest run: it starts a Ray instance; tests/ray runs one):
        >>> launcher = RayLauncher(config_from(values={"execution.target": "ray"}))  # doctest: +SKIP
    """

    def __init__(self, config: Configuration) -> None:
        self.ray = import_ray()
        self.config = config
        self.options = actor_resources(config)
        self._owns_ray = self._connect()
        self._set_up()  # once connected: a failed connect leaves no working directory
        self.actors: dict[str, Any] = {}
        self.pids: dict[str, int] = {}
        self._alive: set[str] = set()
        self._placed: list[Any] = []  # actors that answered ping: stop() cleans their folders
        self._lock = threading.Lock()
        self._threads: list[threading.Thread] = []
        self._stopped = False
        self._actor_class: Any = None

    # -- cluster ---------------------------------------------------------------------------
    def _connect(self) -> bool:
        """Join ``ray.address`` or start a local instance; ``True`` when this launcher owns
        the connection (a local instance it started: :meth:`stop` shuts it down).

        A cluster joined at ``ray.address`` stays connected after the job, for the next job
        of this process (one ``ray.init`` per process and cluster; Ray disconnects at exit).
        A connection this process made itself (e.g. a test's Ray instance) is used as it is.
        """
        global _kept
        ray = self.ray
        address: str | None = self.config.get_optional(k.RAY_ADDRESS)
        working_dir: str | None = self.config.get_optional(k.RAY_RUNTIME_ENV_WORKING_DIR)
        local_dir = working_dir if working_dir and "://" not in working_dir else None
        with _connect_lock:
            if ray.is_initialized():
                if _kept is None or _kept == (address, local_dir):
                    trace("ray connection reused")
                    return False
                ray.shutdown()  # kept for another address or working directory
            _kept = None
            trace("ray connect")
            common: dict[str, Any] = {"include_dashboard": False, "log_to_driver": True}
            if local_dir:  # Ray uploads a local one for the job
                common["runtime_env"] = {"working_dir": local_dir}
            if address:
                join_cluster(ray, address, self.config.get(k.RAY_CONNECT_TIMEOUT), **common)
                _kept = (address, local_dir)
                trace("ray connected")
                return False
            self._start_local(common)
            trace("ray connected")
            return True

    def _start_local(self, common: dict[str, Any]) -> None:
        slots = self.config.get(k.NUMBER_OF_TASK_SLOTS)
        wanted_cpus = slots * self.config.get(k.RAY_NUMBER_TASKMANAGER)
        custom: Mapping[str, Any] = self.config.get_optional(k.RAY_LOCAL_RESOURCES) or {}
        with without_ray_address():  # unset means a new local instance, whatever runs here
            self.ray.init(
                address="local",
                num_cpus=self.config.get_optional(k.RAY_LOCAL_NUM_CPUS) or max(os.cpu_count() or 1, wanted_cpus),
                num_gpus=self.config.get_optional(k.RAY_LOCAL_NUM_GPUS) or 0,
                resources=dict(custom),
                **common,
            )

    def start(self, ids: list[str]) -> None:
        """Create every actor at once and ask each to ``ping`` before waiting for any: Ray
        places and starts them side by side; a thread registers each as soon as it answers."""
        created = {te_id: self._create(te_id) for te_id in ids}
        since = time.monotonic()
        pending: dict[Any, tuple[str, str]] = {}  # ObjectRef -> (phase, te_id)
        for te_id, actor in created.items():
            trace(f"actor ping {te_id}")
            pending[actor.ping.remote()] = ("ping", te_id)
        thread = threading.Thread(target=self._register_all, args=(created, pending, since),
                                  daemon=True, name="accelflow-ray-start")
        thread.start()
        self._threads.append(thread)

    def _create(self, te_id: str) -> Any:
        if self._actor_class is None:
            from accelflow.runtime.taskexecutor import TaskExecutorActor

            self._actor_class = self.ray.remote(TaskExecutorActor)
        options: dict[str, Any] = {"name": None, "max_concurrency": _MAX_CONCURRENCY, "max_restarts": 0,
                                   **self.options}
        env = runtime_env(self.config)
        if env:  # none unless asked for: an actor with one waits for Ray's runtime-env agent
            options["runtime_env"] = env
        trace(f"actor create {te_id}")
        actor = self._actor_class.options(**options).remote(
            te_id, self.config.to_raw_dict(), self.authkey, actor_environment())
        with self._lock:
            old = self.actors.get(te_id)
            self.actors[te_id] = actor
        if old is not None:
            self._kill(old)
        return actor

    def _register_all(self, created: dict[str, Any], pending: dict[Any, tuple[str, str]],
                      since: float) -> None:
        """Wait for the pings and then the ``start`` calls of all actors together; report
        each actor as soon as it has registered, or failed (unplaced within
        ``ray.placement-timeout``, or died while starting)."""
        ray = self.ray
        deadline = since + self.config.get(k.RAY_PLACEMENT_TIMEOUT)
        while pending:
            pinging = any(phase == "ping" for phase, _ in pending.values())
            timeout = max(0.0, deadline - time.monotonic()) if pinging else None
            try:
                ready, _ = ray.wait(list(pending), num_returns=1, timeout=timeout)
            except BaseException:  # Ray itself went away (the launcher stopped): nothing to report
                return
            if not ready:  # every actor not placed by now is reported unplaced
                for ref, (phase, te_id) in list(pending.items()):
                    if phase == "ping":
                        del pending[ref]
                        self._kill(created[te_id])
                        failure = RegistrationFailed(te_id, encode_error(DeploymentError(self._unplaced(te_id))))
                        self.events.put((te_id, failure))
                continue
            phase, te_id = pending.pop(ready[0])
            actor = created[te_id]
            try:
                reply = ray.get(ready[0])
            except Exception as exc:  # the actor died while starting
                self.events.put((te_id, RegistrationFailed(
                    te_id, encode_error(JobError(f"its Ray actor died while starting: {exc}")))))
                continue
            if phase == "ping":
                trace(f"actor placed {te_id}")
                with self._lock:
                    self._placed.append(actor)
                pending[actor.start.remote()] = ("start", te_id)
            else:
                self.events.put((te_id, self._registered(te_id, actor, reply)))

    def _registered(self, te_id: str, actor: Any,
                    reply: Registration | RegistrationFailed) -> Registration | RegistrationFailed:
        if isinstance(reply, Registration):
            trace(f"actor registered {te_id}")
            self.pids[te_id] = reply.pid
            with self._lock:
                self._alive.add(te_id)
            thread = threading.Thread(target=self._poll, args=(te_id, actor, reply.pid), daemon=True,
                                      name=f"accelflow-ray-poll-{te_id}")
            thread.start()
            self._threads.append(thread)
        return reply

    def _unplaced(self, te_id: str) -> str:
        o = self.options
        wanted = {"CPU": o["num_cpus"], **({"GPU": o["num_gpus"]} if o["num_gpus"] else {}), **o["resources"]}
        asked = ", ".join(f"{name} {_num(v)}" for name, v in wanted.items())
        client = in_client_mode(self.ray, self.config.get_optional(k.RAY_ADDRESS))
        try:
            view = "\n".join(f"  {line}" for line in ray_view_of_free_resources(self.ray, client=client))
        except Exception as exc:
            view = f"  (Ray's view is unavailable: {exc})"
        unknown = (" (free amounts are unknown: a Ray client, over ray://, cannot read them; "
                   "`ray status` on the cluster shows them)") if client else ""
        return (
            f"Ray could not place its actor (asks {asked}) within "
            f"{self.config.get(k.RAY_PLACEMENT_TIMEOUT):g} s (ray.placement-timeout). Free/total "
            f"resources per node, as Ray sees them{unknown}:\n{view}\nLower taskmanager.numberOfTaskSlots, "
            "ray.number-taskmanager or external-resource.<name>.amount, add nodes with these "
            "resources, or check external-resource.<name>.ray.resource-name"
            + self._local_hint()
        )

    def _local_hint(self) -> str:
        """On a Ray instance accelflow started itself, the keys that size it."""
        address: str | None = self.config.get_optional(k.RAY_ADDRESS)
        if not self._owns_ray or address:
            return ""
        gpus: int | None = self.config.get_optional(k.RAY_LOCAL_NUM_GPUS)
        return ("; this local Ray instance was started by accelflow with ray.local.num-gpus="
                f"{gpus or 0}, ray.local.num-cpus and "
                "ray.local.resources: raise those to give it the GPUs and resources this host has")

    def _poll(self, te_id: str, actor: Any, pid: int) -> None:
        while not self._stopped:
            try:
                messages = self.ray.get(actor.poll.remote(_POLL_S))
            except BaseException:  # a dead actor; SystemExit when Ray shuts down in this process
                break
            for message in messages:
                self.events.put((te_id, message))
        with self._lock:
            if self.actors.get(te_id) is actor:
                self._alive.discard(te_id)
        if not self._stopped:
            self.events.put((te_id, TaskExecutorLost(te_id, pid)))

    # -- the JobManager's side -------------------------------------------------------------
    def handle(self, te_id: str) -> TaskExecutorHandle:
        return _RayHandle(self, te_id)

    def channel_address(self, name: str) -> str:
        return f"{RELAY_PREFIX}{name}"

    def put_array(self, array: Any) -> tuple[str, Any]:
        """Put one NumPy source array into Ray's object store (once per job, see
        ``JobManager.prepare_sources``): its id and ``ObjectRef``. The actors fetch it on
        their own node; it is freed when the JobManager drops the ref (the job's end)."""
        ref = self.ray.put(array)
        return str(ref.hex()), ref

    def actor(self, te_id: str) -> Any:
        """The Ray actor handle of TaskExecutor ``te_id`` (e.g. for ``ray.kill`` in tests)."""
        return self.actors[te_id]

    def send(self, te_id: str, message: Command) -> None:
        """Deliver ``message`` to ``te_id``'s actor, in order; a dead actor is reported by its
        poll thread as ``TaskExecutorLost``."""
        actor = self.actors.get(te_id)
        if actor is None:
            return
        if isinstance(message, Deploy | Rollback):  # a new epoch's channel: before its senders look
            listen = message.descriptor.listen_address if isinstance(message, Deploy) else message.listen_address
            self._broadcast_route(te_id, actor, listen)
        try:
            self.ray.get(actor.command.remote(message))
        except Exception:
            pass

    def _broadcast_route(self, te_id: str, actor: Any, listen_address: str | None) -> None:
        """Tell every living actor that ``te_id`` receives the channel at ``listen_address``
        (a deployed subtask's, or a survivor's of the epoch its ``Rollback`` starts)."""
        if listen_address is None:
            return
        name = listen_address[len(RELAY_PREFIX):]
        with self._lock:
            living = [self.actors[t] for t in self._alive]
        refs = [a.add_route.remote(name, te_id, actor) for a in living]
        for ref in refs:
            try:
                self.ray.get(ref)
            except Exception:
                pass  # that actor is dead; its poll thread reports it

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        ray = self.ray
        with self._lock:
            actors = dict(self.actors)
            placed = [a for a in self._placed if any(a is b for b in actors.values())]
        if ray.is_initialized():  # else (e.g. at exit, after ray.shutdown) the actors went with it
            stops = [a.stop.remote() for a in placed]  # registered, or still starting
            try:
                ray.wait(stops, num_returns=len(stops), timeout=_STOP_TIMEOUT_S)
            except Exception:
                pass
            for actor in actors.values():
                self._kill(actor)
        for thread in self._threads:
            thread.join(_STOP_TIMEOUT_S)
        if self._owns_ray:
            ray.shutdown()
        self._torn_down()

    def _kill(self, actor: Any) -> None:
        try:
            self.ray.kill(actor, no_restart=True)
        except Exception:
            pass
