"""The lines of ``accelflow cluster status``: what runs on a session cluster, with each
device's health as ``GET /v1/taskexecutors`` reports it.

A device out of service (quarantined, or rejoining after a quarantine) counts as not free, is
listed with its reason, and what it keeps is marked: a resident instance on it serves no new
subtask, a warm process on it is never taken. Example (one GPU fell off the bus)::

    gpu: 1 free of 2 (2 devices, 1 out of service)
    gpu 0 on taskexecutor-1: quarantined: Xid 79 (GPU has fallen off the bus); Xid 79 seen 1 time(s)
    warm processes: 1 ready of 1 on taskexecutor-1 gpu 0 (device quarantined: not used)
"""

from __future__ import annotations

import time
from fractions import Fraction
from typing import Any

View = dict[str, Any]
#: the key of the ``StatusReply`` overview that holds the TaskExecutors as REST shows them
TASKEXECUTOR_VIEWS = "taskexecutor_views"


def status_lines(overview: View) -> list[str]:
    """``accelflow cluster status``'s lines about what runs (indented by the caller) for the
    session's ``StatusReply`` overview (``TASKEXECUTOR_VIEWS``: those of ``GET
    /v1/taskexecutors``): slots, resources and devices out of service, jobs, resident
    instances and warm processes."""
    out = _out_of_service(overview.get(TASKEXECUTOR_VIEWS, []))
    jobs = ", ".join(f"{n} {s.lower()}" for s, n in overview["jobs"].items() if n) or "no jobs"
    lines = [f"TaskExecutors: {overview['taskexecutors']}, slots {overview['slots']['free']} "
             f"free of {overview['slots']['total']}"]
    for name, r in overview["resources"].items():
        lines.extend(_resource_lines(name, r, out))
    lines.append(f"jobs: {jobs}")
    return [*lines, *_warm_lines(overview, out)]


def _out_of_service(taskexecutors: list[View]) -> dict[tuple[str, str, str], View]:
    """``(taskexecutor, resource, address)`` -> device view, for each device out of service."""
    return {(te["id"], r["name"], d["address"]): d
            for te in taskexecutors for r in te["resources"] for d in r["devices"]
            if d["quarantined"] is not None or (d["health"] or {}).get("state", "healthy") != "healthy"}


def _resource_lines(name: str, resource: View, out: dict[tuple[str, str, str], View]) -> list[str]:
    """``gpu: 1 free of 2 (2 devices, 1 out of service)`` and one line per device out of service."""
    mine = {key: d for key, d in out.items() if key[1] == name}
    free = Fraction(resource["free"]["exact"]) - sum((Fraction(d["free"]["exact"]) for d in mine.values()),
                                                     Fraction(0))
    down = f", {len(mine)} out of service" if mine else ""
    lines = [f"{name}: {free} free of {resource['total']['exact']} ({resource['devices']} devices{down})"]
    for (te_id, _, address), device in sorted(mine.items()):
        lines.append(f"{name} {address} on {te_id}: {_health_text(device)}")
    return lines


def _health_text(device: View) -> str:
    """``quarantined: Xid 79 (GPU has fallen off the bus); Xid 79 seen 1 time(s)``."""
    health = device["health"] or {}
    state = health.get("state", "quarantined")
    reason = device["quarantined"] or health.get("reason") or "no reason given"
    text = f"{state}: {reason}"
    if health.get("needs_reset") and not health.get("reset_seen"):
        text += " (waits for a reset of the device)"
    counts = ", ".join(f"Xid {xid} seen {n} time(s)" for xid, n in sorted(health.get("xid_counts", {}).items()))
    return f"{text}; {counts}" if counts else text


def _warm_lines(overview: View, out: dict[tuple[str, str, str], View]) -> list[str]:
    """What is resident where, and the warm pools, one line each, e.g. ``resident: classify on
    taskexecutor-1 gpu 0 (key 3f2a..., 812.0 MiB, 2 subtasks, since 12:01:07)``; those on a
    device out of service end with what that means."""
    lines = []
    for i in overview.get("resident", []):
        memory = "memory unmeasured" if i["memory"] is None else f"{i['memory'] / 2**20:.1f} MiB"
        hung = "HUNG (a call never returned; dropped, closed once it returns), " if i.get("hung") else ""
        lines.append(f"resident: {i['operator']} on {i['taskexecutor']} {i['resource']} {i['address']} "
                     f"({hung}key {i['key']}, {memory}, {i['users']} subtask(s), {i.get('batches', 0)} "
                     f"batch(es), since {time.strftime('%H:%M:%S', time.localtime(i['since']))})"
                     + _marked(out, i, "serves no new subtask"))
    for p in overview.get("device_pools", []):
        lines.append(f"warm processes: {p['ready']} ready of {p['size']} on {p['taskexecutor']} "
                     f"{p['resource']} {p['address']}" + _marked(out, p, "not used"))
    return lines


def _marked(out: dict[tuple[str, str, str], View], item: View, meaning: str) -> str:
    device = out.get((item["taskexecutor"], item["resource"], item["address"]))
    if device is None:
        return ""
    return f" (device {(device['health'] or {}).get('state', 'quarantined')}: {meaning})"
