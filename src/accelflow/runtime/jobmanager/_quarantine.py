"""What the JobManager does with its TaskExecutors' device reports, and the fault drill.

A TaskExecutor watches its devices (``runtime/taskexecutor/_health.py``) and tells the
JobManager (``_device_messages``):

* :class:`DeviceReport`: the device's health, kept for the REST API, the UI and ``/metrics``;
  with a ``quarantined`` change the ledger gives the device no new share
  (``DeviceLedger.quarantine``) and placement skips it, naming why; ``rejoined`` ends that.
  The subtasks on a device that failed are failed by their TaskExecutor itself, with a
  ``HardwareFailure`` (or a ``DeviceFault`` for an application Xid), and restart through the
  job's restart strategy: a lone one in place (``_failover``: on the same device after an
  application Xid, on a healthy one placement finds after a quarantine), else every subtask.
* :class:`MemoryReport`: the device memory each subtask's processes hold.
* :class:`DevicesFree`: a subtask's processes are gone from its devices; only then do its
  shares of them go back (``ClusterState.devices_free``).

:func:`inject_fault` is the drill behind ``POST /v1/taskexecutors/{id}/faults`` and
``accelflow cluster inject-fault``: it checks the TaskExecutor, device and Xid and sends
:class:`InjectFault`, which the TaskExecutor feeds to the device's health as an NVML event.
"""

from __future__ import annotations

import logging

from accelflow._errors import ConfigError
from accelflow.runtime import (
    DeviceChange, DeviceEvent, DeviceReport, DevicesFree, InjectFault, MemoryReport, RegisteredResource,
)
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.runtime.launchers import Launcher
from accelflow.scheduling import DeviceKey

_log = logging.getLogger("accelflow.runtime")


def on_device_event(state: ClusterState, te_id: str, msg: DeviceEvent) -> None:
    """Record what TaskExecutor ``te_id`` reported (the event pump calls this)."""
    with state.lock:
        if te_id not in state.taskexecutors:
            return  # a TaskExecutor given up on: its devices are gone already
        if isinstance(msg, DevicesFree):
            state.devices_free(msg.key)
        elif isinstance(msg, MemoryReport):
            state.memory_used[te_id] = msg.usage
        elif isinstance(msg, DeviceReport):
            device = DeviceKey(te_id, msg.resource, msg.address)
            if device not in state.ledger.devices():
                return
            state.health[device] = msg.health
            if msg.change is not None:
                _apply(state, device, msg.change)


def _apply(state: ClusterState, device: DeviceKey, change: DeviceChange) -> None:
    if change.kind == "application-fault":
        _log.warning("%s: %s; the subtasks on it fail and restart, the device stays", device, change.reason)
        return
    if change.kind == "quarantined":
        state.ledger.quarantine(device, change.reason)
        if change.permanent:
            state.permanent.add(device)
        _log.warning("%s quarantined: %s", device, change.reason)
    else:
        state.ledger.rejoin(device)
        state.permanent.discard(device)
        _log.warning("%s rejoined (it was out for: %s)", device, change.reason)
    state.capacity.put(state.offer(device.taskexecutor))
    state.released.notify_all()


def inject_fault(state: ClusterState, launcher: Launcher, te_id: str, device: str, xid: object,
                 resource: str | None = None) -> InjectFault:
    """Send TaskExecutor ``te_id`` a drill: Xid ``xid`` on its device ``device`` (an address,
    e.g. ``"0"``, or the device's UUID, e.g. ``"GPU-8f6c..."``) of ``resource`` (default: its only watched resource).

    Raises:
        KeyError: no TaskExecutor ``te_id`` (the message lists the registered ones).
        ConfigError: no such device, a resource nobody watches, or an Xid that is not in
            NVIDIA's catalogue (the message lists the known ones).
    """
    from accelflow.resources.gpu import drill_xid

    code = drill_xid(xid).code
    with state.lock:
        te = state.taskexecutors.get(te_id)
        if te is None:
            raise KeyError(f"no TaskExecutor {te_id!r}; registered: {', '.join(sorted(state.taskexecutors)) or 'none'}")
        watched = [r for r in te.registration.resources if r.watched]
        if resource is None and len(watched) == 1:
            resource = watched[0].name
        registered = te.registration.resource(resource or "")
        if registered is None or not registered.watched:
            names = ", ".join(r.name for r in watched) or "none (param.health.enabled false, or no NVML or nvidia-smi)"
            raise ConfigError(f"{te_id} watches no resource {resource!r}; it watches: {names}", key="resource")
        address = _address(te_id, registered, device)
    message = InjectFault(registered.name, address, code)
    launcher.handle(te_id).send(message)
    _log.warning("drill: Xid %d injected on %s: %s %s", code, te_id, registered.name, address)
    return message


def _address(te_id: str, registered: RegisteredResource, device: str) -> str:
    """The address of ``device``: an address, or a device's UUID (as ``nvidia-smi -i`` takes
    it; case aside), e.g. ``"GPU-8f6c..."`` -> ``"1"``.

    Raises:
        ConfigError: no such device; the message lists each one's address and UUID.
    """
    for d in registered.devices:
        uuid = d.properties.get("uuid")
        if device == d.address or (uuid and device.lower() == uuid.lower()):
            return d.address
    known = ", ".join(d.address + (f" ({d.properties['uuid']})" if d.properties.get("uuid") else "")
                      for d in registered.devices)
    raise ConfigError(f"{te_id} has no {registered.name} device {device!r}; it has: {known} "
                      "(give an index or a UUID)", key="device")
