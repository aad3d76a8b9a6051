"""Where the JobManager would rather put a job's subtasks: soft placement preferences
(:func:`accelflow.scheduling.place`) computed from what it knows already, with no round trip
to a TaskExecutor at placement time.

* A subtask of a chain with a resident operator (``resident=True``) prefers the devices that
  hold an instance of that operator (same key: its pickled bytes and call options), as the
  TaskExecutors last reported them (``DeviceStatus.resident``): the second job of a session
  cluster and a restart reuse the instance without ``open()``.
* A subtask of a restarted attempt prefers the devices its predecessor (same chain and index,
  previous attempt) held, first: the same TaskExecutor and device address, when it is healthy
  and has room (the scheduler checks both).
* Devices with an idle warm subtask process (``DeviceStatus.pools``, ``ready > 0``) are
  *warm*: taken first among devices the placement policy finds equally good.

Example: a job of one resident chain whose operator's key is ``"3f2a"``, with an instance on
``taskexecutor-1``'s ``gpu 1``, gets ``{SubtaskKey(job, 0, 0, i): [DeviceKey("taskexecutor-1",
"gpu", "1")]}`` for every subtask ``i``.
"""

from __future__ import annotations

from collections.abc import Hashable

from accelflow.dataflow import JobGraph, ResidentFunction
from accelflow.runtime import SubtaskKey
from accelflow.runtime.jobmanager._jobs import Job
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.scheduling import DeviceKey, SlotRequest, natural_key


def placement_wishes(
    state: ClusterState, job: Job, requests: list[SlotRequest]
) -> tuple[dict[Hashable, list[DeviceKey]], frozenset[DeviceKey]]:
    """The preferences of ``requests`` (``job``'s current attempt) and the warm devices, from
    ``state`` (read under its lock)."""
    with state.lock:
        instances = _resident_devices(state, _resident_keys(job.graph))
        preferences: dict[Hashable, list[DeviceKey]] = {}
        for request in requests:
            for subtask in request.subtasks:
                key = subtask.holder
                assert isinstance(key, SubtaskKey)
                wished = [*_previous_devices(state, key), *instances.get(key.chain, ())]
                if wished:
                    preferences[key] = list(dict.fromkeys(wished))
        warm = frozenset(DeviceKey(te.id, pool.resource, pool.address) for te in state.taskexecutors.values()
                         if te.devices is not None for pool in te.devices.pools if pool.ready > 0)
    return preferences, warm


def _resident_keys(graph: JobGraph) -> dict[int, set[str]]:
    """Per chain id, the keys of its resident operators' instances."""
    keys: dict[int, set[str]] = {}
    for chain in graph.chains:
        for node in chain.nodes:
            fn = getattr(node.spec, "fn", None)
            if isinstance(fn, ResidentFunction):
                keys.setdefault(chain.id, set()).add(fn.key)
    return keys


def _resident_devices(state: ClusterState, keys: dict[int, set[str]]) -> dict[int, list[DeviceKey]]:
    """Per chain id, the devices holding an instance of one of its resident operators, in
    natural order of TaskExecutor and address."""
    if not keys:
        return {}
    found: dict[int, list[DeviceKey]] = {}
    for te in state.taskexecutors.values():
        for instance in te.devices.resident if te.devices is not None else ():
            for chain, wanted in keys.items():
                if instance.key in wanted:
                    found.setdefault(chain, []).append(DeviceKey(te.id, instance.resource, instance.address))
    for devices in found.values():
        devices.sort(key=lambda d: (natural_key(d.taskexecutor), d.resource, natural_key(d.address)))
    return found


def _previous_devices(state: ClusterState, key: SubtaskKey) -> list[DeviceKey]:
    """The devices the subtask of ``key``'s chain and index held in the previous attempt."""
    if key.attempt == 0:
        return []
    before = state.subtasks.get(SubtaskKey(key.job_id, key.attempt - 1, key.chain, key.index))
    if before is None or before.taskexecutor is None:
        return []
    return [DeviceKey(before.taskexecutor, resource, address)
            for resource, held in sorted(before.devices.items()) for address, _ in held]
