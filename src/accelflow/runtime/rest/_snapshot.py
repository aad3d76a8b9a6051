"""A consistent, JSON-ready view of a running JobManager, for the REST API, UI and metrics.

:func:`cluster_view` copies everything it needs while holding the JobManager's ``lock`` (the
JobManager changes its records only under that lock), so a view never mixes two moments:
a device's free share and its holders always add up to one.

Shares are exact: every share is ``{"exact": "1/2", "value": 0.5}`` (the fraction as a string,
plus a float for convenience).

Example (skipped in the doctest run: it needs a JobManager running a job; tests/rest runs one):
    >>> view = cluster_view(jobmanager)  # doctest: +SKIP
    >>> view["taskexecutors"][0]["resources"][0]["devices"][0]["holders"]  # doctest: +SKIP
    [{'job': 'job-1', 'operator': 'classify', 'subtask': 'classify (1/2)', 'share': {...}}]
"""

from __future__ import annotations

import time
from collections.abc import Hashable, Mapping
from fractions import Fraction
from typing import TYPE_CHECKING, Any

from msgspec import structs

from accelflow.runtime import RegisteredDevice, SubtaskKey
from accelflow.config import keys as k
from accelflow.runtime.jobmanager import (
    JOB_ENDED, JOB_STATES, SUBTASK_STATES, CheckpointRecord, FailoverRecord, Job, SubtaskState,
    checkpoints_retained, source_total,
)
from accelflow.scheduling import DeviceKey

if TYPE_CHECKING:
    from accelflow.runtime.jobmanager import JobManager

View = dict[str, Any]


def share(value: Fraction) -> dict[str, Any]:
    """``Fraction(1, 2)`` → ``{"exact": "1/2", "value": 0.5}``."""
    return {"exact": str(value), "value": float(value)}


def cluster_view(jm: JobManager) -> View:
    """Everything the REST API serves, taken at one moment.

    Returns:
        ``{"overview": ..., "taskexecutors": [...], "jobs": [...]}``; each job in ``jobs`` is
        the full detail of ``GET /v1/jobs/{id}``.
    """
    with jm.lock:
        jobs = [_job(jm, job) for job in jm.jobs.values()]
        taskexecutors = [_taskexecutor(jm, te_id) for te_id in sorted(jm.taskexecutors)]
    return {
        "overview": _overview(taskexecutors, jobs),
        "taskexecutors": taskexecutors,
        "jobs": jobs,
    }


def job_summary(job: View) -> View:
    """The short form of a job for ``GET /v1/jobs``: no operators or subtasks."""
    return {key: v for key, v in job.items() if key not in ("operators", "subtasks", "pending", "checkpoints")}


def pending_view(job: View) -> View:
    """``GET /v1/jobs/{id}/pending``: why the job's subtasks wait, per TaskExecutor/device."""
    waiting = job["state"] == "PENDING" and job["pending"] is not None
    return {
        "job": job["id"],
        "state": job["state"],
        "waiting": waiting,
        "subtasks": [s["name"] for s in job["subtasks"]] if waiting else [],
        **(job["pending"] if waiting else {"message": None, "since": None, "reasons": []}),
    }


# -- pieces ------------------------------------------------------------------------------------
def _overview(taskexecutors: list[View], jobs: list[View]) -> View:
    resources: dict[str, dict[str, Any]] = {}
    for te in taskexecutors:
        for r in te["resources"]:
            entry = resources.setdefault(r["name"], {"devices": 0, "total": Fraction(0), "free": Fraction(0)})
            entry["devices"] += len(r["devices"])
            entry["total"] += len(r["devices"])
            entry["free"] += sum((Fraction(d["free"]["exact"]) for d in r["devices"]), Fraction(0))
    return {
        "taskexecutors": len(taskexecutors),
        "slots": {
            "total": sum(te["slots"]["total"] for te in taskexecutors),
            "free": sum(te["slots"]["free"] for te in taskexecutors),
        },
        "jobs": {state: sum(1 for j in jobs if j["state"] == state) for state in JOB_STATES},
        "resources": {
            name: {"devices": e["devices"], "total": share(e["total"]), "free": share(e["free"])}
            for name, e in sorted(resources.items())
        },
        "resident": [i for te in taskexecutors for i in te["resident"]],
        "device_pools": [p for te in taskexecutors for p in te["device_pools"]],
        "time": time.time(),
    }


def _taskexecutor(jm: JobManager, te_id: str) -> View:
    te = jm.taskexecutors[te_id]
    reg = te.registration
    devices_of: dict[str, list[DeviceKey]] = {}
    for d in jm.ledger.devices():
        if d.taskexecutor == te_id:
            devices_of.setdefault(d.resource, []).append(d)
    resources = []
    for r in reg.resources:
        registered = {device.address: device for device in r.devices}
        resources.append({
            "name": r.name, "amount": r.amount, "driver": r.driver,
            "status": r.status, "message": r.message,
            "devices": [_device(jm, d, registered.get(d.address)) for d in devices_of.get(r.name, [])],
        })
    warm = te.devices
    return {
        "id": te_id, "pid": reg.pid,
        "slots": {"total": reg.slots, "free": reg.slots - te.used_slots},
        "resources": resources,
        # what resident operators keep on its devices, and its warm subtask processes
        "resident": [dict(structs.asdict(i), taskexecutor=te_id) for i in warm.resident] if warm else [],
        "device_pools": [dict(structs.asdict(p), taskexecutor=te_id) for p in warm.pools] if warm else [],
    }


def _device(jm: JobManager, device: DeviceKey, registered: RegisteredDevice | None) -> View:
    memory = jm.ledger.memory(device)
    used: dict[tuple[Hashable, str], int] = {(u.key, u.address): u.used for u in jm.state.memory_used.get(device.taskexecutor, ())
            if u.resource == device.resource}
    return {
        "address": device.address,
        # a degraded or driver-less resource is counted by amount: stand-ins
        # (``scheduling.counted_address``) without a registered device
        "placeholder": registered is None,
        "properties": dict(registered.properties) if registered is not None else {},
        "free": share(jm.ledger.free(device)),
        # bytes (the ledger's: what holders took, not what they use; None: unknown)
        "memory": None if memory is None else {"free": memory[0], "total": memory[1]},
        # None where nobody watches it (see docs/gpu.md, "Health and memory")
        "health": _health(jm.state.health.get(device)),
        "quarantined": jm.ledger.quarantined().get(device),
        "holders": [{**_holder(jm, h, s), "memory": jm.ledger.memory_held_by(h).get(device),
                     "memory_used": used.get((h, device.address))}
                    for h, s in _sorted_holders(jm.ledger.holders(device))],
    }


def _health(health: dict[str, Any] | None) -> View | None:
    """A device's health as its TaskExecutor reported it, Xid counts by Xid (as strings)."""
    if health is None:
        return None
    return {**health, "xid_counts": dict(health.get("xid_counts", {})),
            "history": [dict(h) for h in health.get("history", [])]}


def _sorted_holders(holders: Mapping[Hashable, Fraction]) -> list[tuple[Hashable, Fraction]]:
    return sorted(holders.items(), key=lambda item: str(item[0]))


def _holder(jm: JobManager, holder: Hashable, amount: Fraction) -> View:
    st = jm.subtasks.get(holder) if isinstance(holder, SubtaskKey) else None
    if st is None or not isinstance(holder, SubtaskKey):
        return {"job": None, "operator": None, "subtask": str(holder), "share": share(amount)}
    job = jm.jobs.get(holder.job_id)
    return {
        "job": holder.job_id,
        "operator": _operator_of(job, holder) if job else None,
        "subtask": st.name, "index": holder.index, "attempt": holder.attempt,
        "share": share(amount),
    }


def _operator_of(job: Job, key: SubtaskKey) -> str:
    chain = job.graph.chains[key.chain]
    return " -> ".join(n.name for n in chain.nodes if n.resources) or chain.name


def _job(jm: JobManager, job: Job) -> View:
    states = [st for key, st in jm.subtasks.items() if key.job_id == job.id and key.attempt == job.attempt]
    states.sort(key=lambda st: (st.key.chain, st.key.index))
    operators = _operators(job, states)
    end = job.ended_at if job.ended_at is not None else time.time()
    return {
        "id": job.id, "name": job.name, "state": job.state, "attempt": job.attempt,
        "restarts": job.attempt,
        "submitted_at": job.submitted_at, "ended_at": job.ended_at,
        "duration_s": round(end - job.submitted_at, 3),
        "error": job.error if job.state in JOB_ENDED else None,
        "progress": {"records": _records_read(jm, job), "total": source_total(job.graph)},
        "subtasks_by_state": {s: sum(1 for st in states if st.state == s) for s in SUBTASK_STATES},
        "operators": operators,
        "subtasks": [_subtask(job, st) for st in states] if states else _planned(job),
        "pending": None if job.pending is None else {
            "message": job.pending.message, "since": job.pending.since,
            "reasons": [_reason(r) for r in job.pending.reasons],
        },
        "checkpoints": checkpoints_view(job),
        "failovers": [_failover(r) for r in job.failovers],
        "standby_ready": sum(1 for key, st in jm.subtasks.items() if key.job_id == job.id and st.state == "STANDBY"),
        "standby_missing": dict(job.standby_missing),
    }


def _records_read(jm: JobManager, job: Job) -> int:
    """The records the job's sources have read, as the user sees them: each source subtask's
    count in the newest attempt it reported in. A restored subtask counts on from its
    checkpoint's count (``runtime/subtask/_source_slices.py``), and until it reports (a
    rollback restoring, a replacement in ``open()``) its count before the failure stands, so
    progress goes back to the checkpoint's count after a failover, never to 0.

    Example: subtask 1/2 read 900 records in attempt 0, rolled back to a checkpoint where it
    had read 700 and read 100 more in attempt 1 (it reports 800); subtask 2/2 read 500 in
    attempt 0 and has not reported in attempt 1 yet: 800 + 500 = 1300.
    """
    newest: dict[tuple[int, int], tuple[int, int]] = {}  # (chain, index) -> (attempt, records)
    for key, st in jm.subtasks.items():
        chain = job.graph.chains[key.chain] if key.job_id == job.id else None
        if chain is None or chain.head.source is None or not st.counts or key.index >= chain.parallelism:
            continue  # another job's, not a source, no report yet, or a standby
        if newest.get((key.chain, key.index), (-1, 0))[0] < key.attempt:
            newest[(key.chain, key.index)] = (key.attempt, st.counts[0][1])
    return sum(records for _, records in newest.values())


def _failover(record: FailoverRecord) -> View:
    """One failure and its recovery (``docs/failover.md``): ``path`` is ``in-place`` (the
    failed subtask replaced, the others rolled back in their processes) or ``full``."""
    return {
        "attempt": record.attempt, "path": record.path, "cause": record.cause, "failed": list(record.failed),
        "why_full": record.why_full, "replaced": list(record.replaced), "rolled_back": list(record.rolled_back),
        "standby": record.standby, "at": record.at, "recovery_s": record.recovery_s,
    }


def checkpoints_view(job: Job) -> View:
    """``GET /v1/jobs/{id}/checkpoints`` (Flink's checkpoint statistics): counts, the latest
    completed, savepoint and failed checkpoints, the history (newest first) and the last
    restore. Called under the JobManager's lock (the coordinator fills records in place)."""
    stats = job.checkpoints
    history = [_checkpoint(r) for r in reversed(list(stats.history))]

    def latest(status: str, savepoint: bool | None = None) -> View | None:
        return next((r for r in history if r["status"] == status
                     and (savepoint is None or r["savepoint"] == savepoint)), None)

    restored = dict(stats.restored) if stats.restored is not None else None
    return {
        "job": job.id,
        "enabled": job.config.get_optional(k.CHECKPOINT_INTERVAL) is not None,
        "interval_s": job.config.get_optional(k.CHECKPOINT_INTERVAL),
        "directory": job.checkpoint_path,
        "counts": {
            "completed": stats.completed, "failed": stats.failed,
            "in_progress": sum(1 for r in history if r["status"] == "IN_PROGRESS"),
            "restored": 1 if restored is not None else 0,
        },
        "latest": {
            "completed": latest("COMPLETED", False), "savepoint": latest("COMPLETED", True),
            "failed": latest("FAILED"), "restored": restored,
        },
        "restored": restored,
        "stopped_with_savepoint": job.stopped_with_savepoint,
        "history": history,
    }


def _checkpoint(record: CheckpointRecord) -> View:
    return {
        "id": record.id, "status": record.status, "savepoint": record.savepoint,
        "trigger_time": record.trigger_time,
        "duration_s": None if record.duration_s is None else round(record.duration_s, 6),
        "size": record.size, "path": record.path, "failure": record.failure,
    }


def retained_checkpoint(job: Job) -> str | None:
    """The checkpoint an ended job left behind to resume from (``checkpoints_retained``), or
    None."""
    if not checkpoints_retained(job.state, job.config.get(k.CHECKPOINT_RETENTION)):
        return None
    for record in reversed(list(job.checkpoints.history)):
        if record.status == "COMPLETED" and not record.savepoint and record.path:
            return record.path
    return None


def _operators(job: Job, states: list[SubtaskState]) -> list[View]:
    counts: dict[str, list[int]] = {}
    for st in states:
        for node, (n_in, n_out) in zip(job.graph.chains[st.key.chain].nodes, st.counts):
            entry = counts.setdefault(node.name, [0, 0])
            entry[0] += n_in
            entry[1] += n_out
    return [
        {
            "name": t.name, "kind": t.kind, "parallelism": t.parallelism,
            "resources": {r: share(a) for r, a in t.resources.items()},
            "chain": next(c.id for c in job.graph.chains if t in c.nodes),
            "records_in": counts.get(t.name, [0, 0])[0],
            "records_out": counts.get(t.name, [0, 0])[1],
        }
        for t in job.graph.transformations
    ]


def _subtask(job: Job, st: SubtaskState) -> View:
    chain = job.graph.chains[st.key.chain]
    return {
        "name": st.name, "chain": st.key.chain, "index": st.key.index, "attempt": st.key.attempt,
        "state": st.state, "taskexecutor": st.taskexecutor, "recovery": st.recovery,
        "devices": [
            {"resource": r, "address": a, "share": share(s)}
            for r, items in sorted(st.devices.items()) for a, s in items
        ],
        "records": [
            {"operator": node.name, "in": n_in, "out": n_out}
            for node, (n_in, n_out) in zip(chain.nodes, st.counts)
        ],
        "metrics": dict(getattr(st, "metrics", None) or {}),  # the source's gauges
    }


def _planned(job: Job) -> list[View]:
    """The subtasks of a job not placed yet (``CREATED``/``PENDING``): no TaskExecutor."""
    return [
        {
            "name": f"{c.name} ({i + 1}/{c.parallelism})", "chain": c.id, "index": i,
            "attempt": job.attempt, "state": "WAITING", "taskexecutor": None, "devices": [],
            "records": [], "metrics": {},
        }
        for c in job.graph.chains for i in range(c.parallelism)
    ]


def _reason(text: str) -> View:
    """``"taskexecutor-1: gpu 0 has 0.5 free, 1 needed"`` → its TaskExecutor and the rest."""
    te, sep, rest = text.partition(": ")
    return {"taskexecutor": te, "reason": rest} if sep else {"taskexecutor": None, "reason": text}
