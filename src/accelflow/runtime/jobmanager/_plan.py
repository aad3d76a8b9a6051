"""What the JobManager sends and decides per job, as plain functions: slot requests, the
pickled chain plans and source splits, the job-level config, names, and the result.

Nothing here touches the JobManager's state or a process; the JobManager calls these with
what it read under its lock.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Container
from fractions import Fraction
from typing import Any

import cloudpickle

from accelflow._errors import JobError
from accelflow.config import Configuration, config_from
from accelflow.config import keys as k
from accelflow.dataflow import Chain, JobGraph, SourceSpec, Transformation, default_max_parallelism
from accelflow.runtime import IN_FLIGHT_KIND, ChainPlan, OutputEdge, SubtaskKey, dumps, in_flight_name, shared_view
from accelflow.runtime.jobmanager._jobs import Job, JobResult, SubtaskState
from accelflow.scheduling import SlotRequest, SubtaskRequest, format_amount, is_counted

#: Keys a job submitted to a session cluster may set for itself; every other key (resources,
#: TaskExecutors, slots, REST) belongs to the cluster and is taken from the cluster's config.
JOB_KEYS = (
    k.RESTART_STRATEGY, k.RESTART_ATTEMPTS, k.RESTART_DELAY, k.PLACEMENT_POLICY,
    k.DEVICE_ISOLATION, k.RUNTIME_MODE, k.BATCH_SIZE, k.PARALLELISM_DEFAULT,
    k.CHECKPOINT_INTERVAL, k.CHECKPOINT_DIR, k.CHECKPOINT_TIMEOUT, k.CHECKPOINT_MIN_PAUSE,
    k.CHECKPOINTS_RETAINED, k.CHECKPOINT_RETENTION, k.SAVEPOINT_DIR, k.STATE_RECOVERY_PATH,
    k.ALLOW_NON_RESTORED_STATE, k.CHECKPOINT_PERMISSIONS, k.CHECKPOINT_SIGNING_KEY_FILE,
    k.VERIFY_CHECKPOINT_SIGNATURE, k.PIPELINE_MAX_PARALLELISM, k.AUTO_WATERMARK_INTERVAL, k.BUFFER_TIMEOUT,
    k.FAILOVER_IN_PLACE, k.STANDBY_SUBTASKS,
)


def chain_blob(job: Job, chain: Chain, address: Callable[[int, int], str]) -> bytes:
    """The pickled plan of one chain of ``job``'s current attempt; ``address(chain, i)`` is
    where subtask ``i`` of a chain listens.

    Raises:
        JobError: user code that does not pickle, naming its operator.
    """
    graph, config = job.graph, job.config
    outputs = tuple(
        OutputEdge(
            i.edge.partitioning, i.edge.key_fn, tuple(address(c.id, n) for n in range(c.parallelism)),
            input_index=i.edge.input_index, node=i.node, side=i.edge.side, partitioner=i.edge.partitioner,
            max_parallelism=max_parallelism_of(c, config), names=(chain.nodes[i.node].name, c.head.name),
        )
        for c, i in graph.outputs_of(chain)
    )
    try:
        checkpointing = config.get_optional(k.CHECKPOINT_INTERVAL) is not None
        timeout = config.get(k.BUFFER_TIMEOUT)
        return dumps(ChainPlan(
            chain.name, _as_deployed(chain), outputs, _rolling(job), checkpointing,
            in_place=job.in_place_off is None,
            max_parallelism=max_parallelism_of(chain, config),
            watermark_interval_ms=round(config.get(k.AUTO_WATERMARK_INTERVAL) * 1000),
            buffer_timeout_ms=-1 if timeout < 0 else round(timeout * 1000)))
    except Exception as exc:
        raise JobError(
            f"{_unpicklable(chain)} cannot be sent to its subtasks: {type(exc).__name__}: "
            f"{exc}. User code travels with cloudpickle; create what cannot be pickled "
            "(locks, open files, connections, models on a device) in open() of a rich "
            "function, or pass the class instead of an instance"
        ) from exc


def max_parallelism_of(chain: Chain, config: Configuration) -> int:
    """The number of key groups of ``chain``'s keyed state: an operator's own
    (``set_max_parallelism``), else ``pipeline.max-parallelism``, else Flink's rule."""
    own = [n.max_parallelism for n in chain.nodes if n.max_parallelism is not None]
    if own:
        return own[0]
    configured = config.get_optional(k.PIPELINE_MAX_PARALLELISM)
    return configured if configured is not None else default_max_parallelism(chain.parallelism)


def _as_deployed(chain: Chain) -> list[Transformation]:
    """The nodes of ``chain`` as its subtasks get them: a source whose arrays are shared reads
    them through the copy that sharing made (the graph's own node is left as it is)."""
    head = chain.head
    if head.source is None or (view := shared_view(head.source)) is head.source:
        return chain.nodes
    return [dataclasses.replace(head, spec=SourceSpec(view)), *chain.nodes[1:]]


def _rolling(job: Job) -> bool:
    mode = job.config.get(k.RUNTIME_MODE)
    if mode == "automatic":
        return not all(getattr(t.source, "bounded", True) for t in job.graph.sources)
    return mode == "streaming"


def splits_of(graph: JobGraph) -> dict[tuple[int, int], list[Any]]:
    """Per (chain, subtask index) of every source, its splits (round-robin)."""
    out: dict[tuple[int, int], list[Any]] = {}
    for c in graph.chains:
        if (source := c.head.source) is not None:
            try:
                splits = list(source.create_splits(c.parallelism))
            except Exception as exc:
                raise JobError(
                    f"source {c.head.name!r}: create_splits({c.parallelism}) raised "
                    f"{type(exc).__name__}: {exc}"
                ) from exc
            for i in range(c.parallelism):
                out[(c.id, i)] = splits[i :: c.parallelism]
    return out


def source_total(graph: JobGraph) -> int | None:
    """How many records the job's sources will read; ``None`` when one is unbounded."""
    total = 0
    for t in graph.sources:
        assert t.source is not None
        hint = t.source.size_hint() if getattr(t.source, "bounded", True) else None
        if hint is None:
            return None
        total += hint
    return total


def slot_requests(graph: JobGraph, job_id: str, attempt: int) -> list[SlotRequest]:
    """Slot request *i* holds subtask *i* of every chain (Flink's default slot sharing)."""
    return [
        SlotRequest(tuple(
            SubtaskRequest(SubtaskKey(job_id, attempt, c.id, i), requester_name(c, i), c.resources)
            for c in graph.chains if i < c.parallelism
        ))
        for i in range(graph.max_parallelism)
    ]


def job_config(cluster: Configuration, job: Configuration) -> Configuration:
    """The cluster's config with the job's own :data:`JOB_KEYS` on top."""
    raw = cluster.to_raw_dict()
    job_raw = job.to_raw_dict()
    raw.update({key.name: job_raw[key.name] for key in JOB_KEYS if key.name in job_raw})
    return config_from(values=raw)


def _unpicklable(chain: Chain) -> str:
    """Name the first operator of ``chain`` whose function (or key function) does not pickle."""
    for node in chain.nodes:
        edges = [(what, obj) for e in node.inputs for what, obj in (("key function", e.key_fn), ("partitioner", e.partitioner))]
        for what, obj in [("function", node.spec), *edges]:
            try:
                cloudpickle.dumps(obj)
            except Exception:
                return f"the {what} of operator {node.name!r} ({node.kind})"
    return f"the operators of {chain.name!r}"


def never_deployed(job: Job, known: Container[SubtaskKey], state: str) -> list[SubtaskState]:
    """Records, in ``state``, of the subtasks of ``job``'s current attempt not in ``known``
    (never placed): on no TaskExecutor, holding nothing.

    Example: a job of one chain at parallelism 2 that failed before placement gives
    ``[SubtaskState(SubtaskKey(job.id, 0, 0, 0), "collection -> map (1/2)", None, {},
    "CANCELED"), ...(2/2)...]``.
    """
    return [
        SubtaskState(key, subtask_name(c, i), None, {}, state)
        for c in job.graph.chains for i in range(c.parallelism)
        if (key := SubtaskKey(job.id, job.attempt, c.id, i)) not in known
    ]


def state_names(chain: Chain) -> list[tuple[str, str]]:
    """``(name, kind)`` of each state the subtasks of ``chain`` may checkpoint: one per
    operator (its ``state_name``: uid, else name), and for a chain with inputs the records taken out of ended inputs and not
    processed yet (``in_flight_name``, see ``runtime/subtask/_in_flight.py``)."""
    names = [(n.state_name, n.kind) for n in chain.nodes]
    if chain.head.source is None:
        names.append((in_flight_name(chain.head.state_name), IN_FLIGHT_KIND))
    return names


def restored_of(job: Job, chain: Chain) -> dict[str, list[bytes]] | None:
    """What the subtasks of ``chain`` restore in ``job``'s current attempt (None: nothing)."""
    restored = job.restore_from
    if not restored:
        return None
    return {name: restored[name] for name, _ in state_names(chain) if name in restored}


def subtask_name(chain: Chain, index: int) -> str:
    return f"{chain.name} ({index + 1}/{chain.parallelism})"


def requester_name(chain: Chain, index: int) -> str:
    """A subtask named after the operator(s) of its chain that requested devices."""
    return f"{requester(chain)} ({index + 1}/{chain.parallelism})"


def requester(chain: Chain) -> str:
    """The operator(s) of ``chain`` that requested devices (``"model"``), else its name."""
    return " -> ".join(n.name for n in chain.nodes if n.resources) or chain.name


def progress_of(graph: JobGraph, states: list[SubtaskState]) -> dict[str, Any]:
    """``{"records": records the sinks have taken, "total": ...}``; the total is the
    sources' bounded size when every operator passes each record on (its spec is
    ``one_to_one``: map, map_batches), else ``None`` (a count without a bar)."""
    done = 0
    for st in states:
        chain = graph.chains[st.key.chain]
        for node, (n_in, _) in zip(chain.nodes, st.counts):  # a source's count comes first
            if node.is_sink:
                done += n_in
    total = source_total(graph)
    if not all(t.spec.one_to_one for t in graph.transformations if t.source is None and not t.is_sink):
        total = None
    return {"records": done, "total": total}


def result_of(job: Job, states: list[SubtaskState], first_record: float | None,
              collected: list[Any]) -> JobResult:
    """The :class:`JobResult` of ``job``'s last attempt from its subtasks' final states."""
    operators: dict[str, dict[str, int]] = {}
    devices: dict[str, str] = {}
    for st in states:
        chain = job.graph.chains[st.key.chain]
        for node, (n_in, n_out) in zip(chain.nodes, st.counts):
            entry = operators.setdefault(node.name, {"records_in": 0, "records_out": 0})
            entry["records_in"] += n_in
            entry["records_out"] += n_out
        if st.devices:
            devices[requester_name(chain, st.key.index)] = f"{st.taskexecutor} " + ", ".join(
                _device_text(r, a, s) for r, items in sorted(st.devices.items()) for a, s in items
            )
    return JobResult(job.id, job.name, "FINISHED", time.monotonic() - job.submitted, first_record,
                     job.attempt + 1, operators, devices, collected)


def _device_text(resource: str, address: str, share: Fraction) -> str:
    amount = "" if share == 1 else f" ({format_amount(share)})"
    if is_counted(address):  # counted by amount only: no driver, or a degraded one
        return f"{resource} (no device: counted only){amount}"
    return f"{resource} {address}{amount}"
