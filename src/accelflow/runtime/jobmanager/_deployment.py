"""Deployment: placing a job's subtasks on slots and devices (the cluster's
:class:`accelflow.scheduling.CapacityIndex` decides, as the pure
:func:`accelflow.scheduling.place` would), shipping them to their TaskExecutors, and taking
everything back when an attempt ends or is aborted."""

from __future__ import annotations

import logging
import os
from fractions import Fraction
from typing import Any

import msgspec

from accelflow._errors import AllocationError, JobCancelledError
from accelflow.config import keys as k
from accelflow.dataflow import Chain, ResidentMapBatchesSpec, ResidentMapSpec
from accelflow.runtime import (
    SYSTEM_CLOCK, CancelJob, Clock, Deploy, DeviceShare, SubtaskDescriptor, SubtaskExited,
    SubtaskKey, object_handles,
)
from accelflow.runtime.jobmanager._events import POLL_S, EventPump, TaskExecutorDied
from accelflow.runtime.jobmanager._jobs import Job, PendingReason, SubtaskState
from accelflow.runtime.jobmanager._plan import chain_blob, restored_of, slot_requests, splits_of, subtask_name
from accelflow.runtime.jobmanager._preferences import placement_wishes
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.runtime.launchers import Launcher
from accelflow.scheduling import SlotAssignment, SlotRequest, place

#: how long an aborted attempt waits for its subtasks to exit before giving up on them
EXIT_WAIT_S = 15.0
_log = logging.getLogger("accelflow.runtime")


class Deployer:
    """Places, ships and aborts the subtasks of a job's attempts.

    Args:
        launcher: ships ``Deploy`` and ``CancelJob`` to TaskExecutors, names channels.
        state: the cluster's; slots and device shares are taken and given back there.
        pump: where an abort hears its subtasks exit.
        clock: what a ``PENDING`` job's wait and an abort's wait are measured with.
    """

    def __init__(self, launcher: Launcher, state: ClusterState, pump: EventPump, *,
                 clock: Clock = SYSTEM_CLOCK) -> None:
        self.launcher = launcher
        self.state = state
        self.pump = pump
        self.clock = clock

    def deploy(self, job: Job, slots: int | None = None) -> list[SubtaskKey]:
        """Place and ship the subtasks of ``job``'s current attempt; their keys.

        Raises:
            AllocationError: the job fits not even the empty cluster; the reasons say why.
            JobCancelledError: the job was cancelled while it waited for resources.
            JobError: user code that does not pickle (nothing is taken then).
        """
        graph = job.graph
        requests = slot_requests(graph, job.id, job.attempt)
        # user code is pickled and split before any slot or device is taken, so a job that
        # cannot be shipped fails with nothing to give back
        blobs = {c.id: chain_blob(job, c, lambda o, i: self.address(job, o, i)) for c in graph.chains}
        splits = job.splits = splits_of(graph)
        with self.state.lock:
            assignments = self._place_when_free(job, requests)
            keys = self._acquire(job, assignments)
            descriptors = [self._descriptor(job, key, blobs, splits) for key in keys]
            job.state, job.pending = "RUNNING", None
        for te_id, desc in descriptors:
            self.launcher.handle(te_id).send(Deploy(desc))
        return keys

    def deploy_one(self, job: Job, key: SubtaskKey, *, standby: bool = False) -> None:
        """Ship subtask ``key`` of ``job``'s current attempt, placed already (its
        ``SubtaskState`` names its TaskExecutor and devices): a replacement after a failure,
        or a standby (which gets no channels, splits nor state until it takes over)."""
        chain = job.graph.chains[key.chain]
        blob = chain_blob(job, chain, lambda o, i: self.address(job, o, i))
        with self.state.lock:
            te_id, desc = self._descriptor(job, key, {chain.id: blob}, job.splits)
        if standby:
            desc = msgspec.structs.replace(desc, listen_address=None, expected_senders=0, splits=None,
                                           restored=None, standby=True)
        self.launcher.handle(te_id).send(Deploy(desc))

    def check_fits(self, requests: list[SlotRequest], policy: Any) -> None:
        """Raise ``AllocationError`` unless ``requests`` would fit the empty cluster (naming
        the TaskExecutors a session lost and has not replaced yet)."""
        self._fits_empty(requests, policy)

    def _fits_empty(self, requests: list[SlotRequest], policy: Any) -> None:
        try:
            place(requests, self.state.offers(empty=True), policy)
        except AllocationError as exc:
            with self.state.lock:
                lost = [why for te, why in sorted(self.pump.lost.items()) if te not in self.state.taskexecutors]
            if not lost:
                raise
            first = str(exc).splitlines()[0]
            note = f" ({len(lost)} TaskExecutor(s) lost and not replaced yet)"
            raise AllocationError(
                first[:-1] + note + ":" if first.endswith(":") else first + note,
                [*exc.reasons, *(f"{why}; not replaced yet (the cluster keeps trying: see its log)"
                                 for why in lost)],
            ) from exc

    def _place_when_free(self, job: Job, requests: list[SlotRequest]) -> list[SlotAssignment]:
        """Place now, or wait (``PENDING``) while the request would fit the empty cluster.
        Called with the lock held; waiting releases it."""
        policy = job.config.get(k.PLACEMENT_POLICY)
        self.pump.route_pending()  # embedded: what TaskExecutors said meanwhile (DevicesFree, DeviceStatus)
        preferences, warm = placement_wishes(self.state, job, requests)  # resident, previous, warm devices
        fits_members = -1  # the membership the job was last found to fit when empty
        while True:
            if job.cancel_requested or self.state.cancel_all:
                raise JobCancelledError(f"{job.id} ({job.name}) was cancelled while waiting for resources")
            try:
                return self.state.place(requests, policy, preferences, warm)  # type: ignore[arg-type]
            except AllocationError as now:
                if fits_members != self.state.members:  # placing on the empty cluster: O(job)
                    self._fits_empty(requests, policy)
                    fits_members = self.state.members
                if job.pending is None:
                    _log.info("%s waits for resources: %s", job.id, str(now).splitlines()[0])
                job.state = "PENDING"
                since = self.clock.time() if job.pending is None else job.pending.since
                job.pending = PendingReason(str(now).splitlines()[0], now.reasons, since)
                # embedded, nobody else routes a TaskExecutor's ``DevicesFree`` meanwhile
                self.clock.wait(self.state.released, 1.0 if self.pump.dispatching else POLL_S)
                self.pump.route_pending()

    def _acquire(self, job: Job, assignments: list[SlotAssignment]) -> list[SubtaskKey]:
        keys: list[SubtaskKey] = []
        state = self.state
        state.take(job.id, job.attempt, assignments)
        for assignment in assignments:
            for holder, shares in assignment.shares.items():
                assert isinstance(holder, SubtaskKey)
                keys.append(holder)
                chain = job.graph.chains[holder.chain]
                state.subtasks[holder] = SubtaskState(
                    holder, subtask_name(chain, holder.index), assignment.taskexecutor, devices_of(assignment, holder))
        return keys

    def _descriptor(self, job: Job, key: SubtaskKey, blobs: dict[int, bytes],
                    splits: dict[tuple[int, int], list[Any]]) -> tuple[str, SubtaskDescriptor]:
        st = self.state.subtasks[key]
        assert st.taskexecutor is not None  # placed by _acquire
        te = self.state.taskexecutors[st.taskexecutor]
        chain = job.graph.chains[key.chain]
        return te.id, SubtaskDescriptor(
            key=key, parallelism=chain.parallelism, chain_blob=blobs[chain.id],
            listen_address=self.address(job, chain.id, key.index) if chain.input is not None else None,
            expected_senders=job.graph.upstream_senders(chain, key.index),
            splits=splits.get((chain.id, key.index)),
            assigned={r: self._shares(te.id, r, items) for r, items in st.devices.items()},
            taskexecutor_infos={r.name: r.devices for r in te.registration.resources},
            isolate=job.config.get(k.DEVICE_ISOLATION), authkey=getattr(self.launcher, "authkey", b""),
            taskexecutor_id=te.id,
            restored=restored_of(job, chain),
            restored_checkpoint=job.restore_id,
            arrays={} if chain.head.source is None else object_handles(chain.head.source),
            memory=self._memory(key),
            resident_only=resident_only(chain),
        )

    def _memory(self, key: SubtaskKey) -> dict[str, dict[str, int]]:
        """Per resource, the bytes ``key`` holds of each device (its per-process limits)."""
        out: dict[str, dict[str, int]] = {}
        for device, taken in self.state.ledger.memory_held_by(key).items():
            out.setdefault(device.resource, {})[device.address] = taken
        return out

    def _shares(self, te_id: str, resource: str, items: list[tuple[str, Fraction]]) -> tuple[DeviceShare, ...]:
        """The devices of ``resource`` (with their shares) to hand a subtask on ``te_id``: none
        for a resource counted by amount only (no driver, or a degraded one)."""
        registered = self.state.taskexecutors[te_id].registration.resource(resource)
        if registered is None or registered.counted:
            return ()
        return tuple(DeviceShare.of(self.state.info_properties(te_id, resource, a), s) for a, s in items)

    def address(self, job: Job, chain: int, index: int) -> str:
        return self.launcher.channel_address(self._channel(job, chain, index))

    @staticmethod
    def _channel(job: Job, chain: int, index: int) -> str:
        return f"{job.id}-a{job.attempt}-c{chain}-{index}"

    def abort(self, job: Job, keys: list[SubtaskKey], exited: set[SubtaskKey]) -> None:
        """Stop the attempt's subtasks, wait (bounded) for those not yet ``exited``, and
        give back every slot and device share of the attempt."""
        with self.state.lock:
            te_ids = list(self.state.taskexecutors)
            alive = {key for key in keys if key not in exited
                     and self.state.subtasks[key].taskexecutor in self.state.taskexecutors
                     and self.state.subtasks[key].state != "FINISHED"}
        for te_id in te_ids:
            self.launcher.handle(te_id).send(CancelJob(job.id))
        deadline = self.clock.monotonic() + EXIT_WAIT_S
        while alive and self.clock.monotonic() < deadline:
            event = self.pump.next_event(job.events, POLL_S)
            if event is None:
                continue
            te_id, msg = event
            if isinstance(msg, SubtaskExited):
                alive.discard(msg.key)
            elif isinstance(msg, TaskExecutorDied):
                alive = {key for key in alive if self.state.subtasks[key].taskexecutor != te_id}
        with self.state.lock:
            for key in keys:
                self.state.release_devices(key)
                st = self.state.subtasks[key]
                if st.state not in ("FINISHED", "FAILED"):
                    st.state = "CANCELED"
            self.state.release_slots(job.id, job.attempt)
        self._remove_channels(job, keys)

    def _remove_channels(self, job: Job, keys: list[SubtaskKey]) -> None:
        """Remove the attempt's Unix-socket channel files (local target only)."""
        for key in keys:
            path = self.launcher.channel_address(self._channel(job, key.chain, key.index))
            if os.path.isabs(path):
                try:
                    os.unlink(path)
                except OSError:
                    pass


def resident_only(chain: Chain) -> bool:
    """Whether every operator of ``chain`` that asks for a device is resident
    (``resident=True``), and one does: its subtasks ship their batches to the device's host and
    need no device context of their own (``SubtaskDescriptor.resident_only``).

    Example:
        >>> from accelflow.dataflow import MapSpec, ResidentMapSpec, Transformation, build_job_graph
        >>> from accelflow.scheduling import ResourceProfile
        >>> half = ResourceProfile.parse({"gpu": 0.5}, operator="m")
        >>> def chain(spec):
        ...     return build_job_graph("j", [Transformation(0, "m", spec, 2, half)]).chains[0]
        >>> resident_only(chain(ResidentMapSpec(abs))), resident_only(chain(MapSpec(abs)))
        (True, False)
    """
    users = [node for node in chain.nodes if node.resources]
    return bool(users) and all(isinstance(node.spec, ResidentMapSpec | ResidentMapBatchesSpec) for node in users)


def devices_of(assignment: SlotAssignment, key: SubtaskKey) -> dict[str, list[tuple[str, Fraction]]]:
    """What ``assignment`` gives subtask ``key``, as ``SubtaskState.devices``: per resource,
    ``(address, share)`` pairs, e.g. ``{"gpu": [("0", Fraction(1, 2))]}``."""
    devices: dict[str, list[tuple[str, Fraction]]] = {}
    for d, share in assignment.shares.get(key, {}).items():
        devices.setdefault(d.resource, []).append((d.address, share))
    return devices
