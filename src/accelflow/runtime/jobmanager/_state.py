"""What the JobManager knows, in one place: TaskExecutors, the device ledger, jobs, subtasks
and the slot book, guarded by one lock.

Membership (:mod:`._membership`), deployment (:mod:`._deployment`) and the job lifecycle
(:mod:`._jobmanager`) each change it only under ``lock``, so the REST server's snapshot
(:mod:`accelflow.runtime.service`) reads a consistent view by taking the lock too. None of
them calls another: they share this state and the event pump (:mod:`._events`).
"""

from __future__ import annotations

import threading
from fractions import Fraction
from typing import Any

from accelflow._errors import AccelflowInternalError
from accelflow.runtime import Registration, SubtaskKey, SubtaskMemory
from accelflow.runtime.jobmanager._jobs import Job, SubtaskState, TaskExecutorInfo
from accelflow.scheduling import (
    CapacityIndex,
    DeviceKey,
    DeviceLedger,
    Policy,
    Preferences,
    SlotAssignment,
    SlotRequest,
    TaskExecutorOffer,
    Warm,
    counted_address,
    device_memory,
    offer_from_ledger,
)


class ClusterState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: notified (under ``lock``) whenever capacity frees up or a TaskExecutor registers
        self.released = threading.Condition(self.lock)
        self.ledger = DeviceLedger()
        #: the ledger's free shares and the free slots, indexed for placement; every change
        #: below updates the TaskExecutors it touches (O(their devices + log n))
        self.capacity = CapacityIndex()
        self.taskexecutors: dict[str, TaskExecutorInfo] = {}
        self.jobs: dict[str, Job] = {}
        self.subtasks: dict[SubtaskKey, SubtaskState] = {}
        #: (job id, attempt) -> the TaskExecutor (id, pid) of each slot it holds: a replacement
        #: registering under a lost one's id does not get the lost one's slots back
        self.slots: dict[tuple[str, int], list[tuple[str, int]]] = {}
        #: pids of TaskExecutor incarnations already given up on
        self.lost_pids: set[int] = set()
        #: counts TaskExecutors registered and lost: what the empty cluster offers changes with it
        self.members = 0
        #: cancels every job (the embedded cluster's ``JobClient.cancel``, a session's stop)
        self.cancel_all = False
        #: devices' health as their TaskExecutors last reported it (``_quarantine``)
        self.health: dict[DeviceKey, dict[str, Any]] = {}
        #: per TaskExecutor, the device memory each subtask's processes held at its last probe
        self.memory_used: dict[str, tuple[SubtaskMemory, ...]] = {}
        #: quarantined devices that stay out until their TaskExecutor restarts (``max-faults``)
        self.permanent: set[DeviceKey] = set()
        #: subtasks the JobManager is done with whose watched devices their TaskExecutor has
        #: not said free yet (``DevicesFree``): those shares stay held
        self.reconciling: dict[SubtaskKey, set[DeviceKey]] = {}
        #: subtasks whose ``DevicesFree`` came before the JobManager was done with them
        self.freed_early: set[SubtaskKey] = set()

    # -- membership --------------------------------------------------------------------------
    def add_taskexecutor(self, reg: Registration) -> None:
        with self.lock:
            self.taskexecutors[reg.taskexecutor_id] = TaskExecutorInfo(reg)
            self.ledger.add_devices(devices_of(reg), memory_of(reg))
            self.capacity.put(self.offer(reg.taskexecutor_id))
            self.members += 1
            self.released.notify_all()

    def lose_taskexecutor(self, te_id: str, pid: int | None) -> bool:
        """Forget ``te_id`` if ``pid`` is its registered incarnation; whether it was."""
        with self.lock:
            te = self.taskexecutors.get(te_id)
            if te is None or te.registration.pid != pid:
                return False
            del self.taskexecutors[te_id]
            self.lost_pids.add(te.registration.pid)
            self.ledger.remove_taskexecutor(te_id)
            self.capacity.remove(te_id)
            self.members += 1
            self._forget_devices_of(te_id)
            return True

    def _forget_devices_of(self, te_id: str) -> None:
        """A lost TaskExecutor's devices have no health, memory or shares waiting any more."""
        self.health = {d: h for d, h in self.health.items() if d.taskexecutor != te_id}
        self.permanent = {d for d in self.permanent if d.taskexecutor != te_id}
        self.memory_used.pop(te_id, None)
        for key, devices in list(self.reconciling.items()):
            devices -= {d for d in devices if d.taskexecutor == te_id}
            if not devices:
                del self.reconciling[key]

    def running_jobs(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if not j.done.is_set()]

    # -- capacity ----------------------------------------------------------------------------
    def place(self, requests: list[SlotRequest], policy: Policy, preferences: Preferences | None = None,
              warm: Warm = ()) -> list[SlotAssignment]:
        """Where ``requests`` go now (all or nothing); the caller then takes the slots and
        acquires the shares (``Deployer``), which :attr:`capacity` already counts as taken.
        ``preferences`` and ``warm``: soft (``_preferences``).

        Raises:
            AllocationError: one does not fit now; the reasons say why.
        """
        with self.lock:
            return self.capacity.place(requests, policy, preferences, warm)

    def take(self, job_id: str, attempt: int, assignments: list[SlotAssignment], *, more: bool = False) -> None:
        """Take the slots and acquire the shares that :meth:`place` just gave ``assignments``
        (``more``: in addition to the slots the attempt holds already)."""
        with self.lock:
            held = self.slots.setdefault((job_id, attempt), []) if more else []
            self.slots[(job_id, attempt)] = held
            for assignment in assignments:
                te = self.taskexecutors[assignment.taskexecutor]
                te.used_slots += 1
                held.append((te.id, te.registration.pid))
                for holder, shares in assignment.shares.items():
                    self.ledger.acquire(holder, shares, assignment.memory.get(holder))

    def offers(self, *, empty: bool = False) -> list[TaskExecutorOffer]:
        """What each TaskExecutor offers now (or when ``empty``, with nothing running)."""
        with self.lock:
            return [self.offer(te_id, empty=empty) for te_id in sorted(self.taskexecutors)]

    def offer(self, te_id: str, *, empty: bool = False) -> TaskExecutorOffer:
        """What ``te_id`` offers now (shares, memory, quarantines): O(its devices). ``empty``:
        as if nothing ran and every device that may rejoin had (a job waits for those)."""
        te = self.taskexecutors[te_id]
        offer = offer_from_ledger(self.ledger, te_id, te.registration.slots - (0 if empty else te.used_slots),
                                  te.registration.slots, empty=empty)
        if empty:
            for resource, out in list(offer.quarantined.items()):
                kept = {a: why for a, why in out.items() if DeviceKey(te_id, resource, a) in self.permanent}
                offer.quarantined[resource] = kept
        return offer

    def release_slots(self, job_id: str, attempt: int) -> None:
        with self.lock:
            freed: dict[str, int] = {}
            for te_id, pid in self.slots.pop((job_id, attempt), []):
                te = self.taskexecutors.get(te_id)
                if te is not None and te.registration.pid == pid:
                    te.used_slots -= 1
                    freed[te_id] = freed.get(te_id, 0) + 1
            for te_id, count in freed.items():
                self.capacity.release(te_id, slots=count)
            self.released.notify_all()

    def release_slot(self, job_id: str, attempt: int, te_id: str) -> None:
        """Give back one slot the attempt holds on ``te_id`` (a standby's, or a failed
        subtask's that shared it with nobody)."""
        with self.lock:
            held = self.slots.get((job_id, attempt), [])
            te = self.taskexecutors.get(te_id)
            if te is None or (te_id, te.registration.pid) not in held:
                return
            held.remove((te_id, te.registration.pid))
            te.used_slots -= 1
            self.capacity.release(te_id, slots=1)
            self.released.notify_all()

    def rekey(self, old: SubtaskKey, new: SubtaskKey) -> None:
        """Make ``new`` the holder of what ``old`` holds, device memory included (capacity is
        unchanged)."""
        with self.lock:
            memory = self.ledger.memory_held_by(old)
            self.ledger.acquire(new, self.ledger.release_if_held(old), memory)
            self.freed_early.discard(old)

    def devices_unsettled(self, key: SubtaskKey) -> bool:
        """Whether subtask ``key``, failed, holds watched devices that its TaskExecutor has not
        said free yet (``DevicesFree``: what its processes left computing there is gone)."""
        with self.lock:
            return key not in self.freed_early and any(self._watched(d) for d in self.ledger.held_by(key))

    def release_devices(self, key: SubtaskKey) -> None:
        """Give back what subtask ``key`` holds (nothing when it holds nothing). A subtask that
        did not finish (it failed, or was stopped) may have left processes holding device
        memory: its shares of watched devices wait for their TaskExecutor's ``DevicesFree``,
        unless that came already."""
        with self.lock:
            if not self.ledger.is_holder(key):
                return
            early = key in self.freed_early
            self.freed_early.discard(key)
            st = self.subtasks.get(key)
            finished = st is not None and st.state == "FINISHED"
            waiting = set() if early or finished else {d for d in self.ledger.held_by(key) if self._watched(d)}
            if waiting:
                self.reconciling[key] = waiting
            self._give_back(key, [d for d in self.ledger.held_by(key) if d not in waiting])

    def devices_free(self, key: SubtaskKey) -> None:
        """Subtask ``key``'s TaskExecutor says its watched devices are free (``DevicesFree``)."""
        with self.lock:
            waiting = self.reconciling.pop(key, None)
            if waiting is not None:
                self._give_back(key, [d for d in waiting if d in self.ledger.held_by(key)])
            elif self.ledger.is_holder(key):
                self.freed_early.add(key)

    def _give_back(self, key: SubtaskKey, devices: list[DeviceKey]) -> None:
        """Release ``devices`` of ``key`` (the holder goes once it holds none) to the ledger
        and the capacity index."""
        held, memory = self.ledger.held_by(key), self.ledger.memory_held_by(key)
        if held and not devices:
            return
        released = self.ledger.release(key, None if set(devices) >= set(held) else devices)
        by_te: dict[str, dict[DeviceKey, Fraction]] = {}
        for device, share in released.items():
            by_te.setdefault(device.taskexecutor, {})[device] = share
        for te_id, shares in by_te.items():
            self.capacity.release(te_id, shares, memory={d: memory[d] for d in shares if d in memory})
        self.released.notify_all()

    def _watched(self, device: DeviceKey) -> bool:
        te = self.taskexecutors.get(device.taskexecutor)
        registered = te.registration.resource(device.resource) if te is not None else None
        return registered is not None and registered.watched and not device.counted

    def info_properties(self, te_id: str, resource: str, address: str) -> dict[str, str]:
        """The properties of the device ``address`` that ``te_id`` registered."""
        registered = self.taskexecutors[te_id].registration.resource(resource)
        device = registered.device(address) if registered is not None else None
        if device is None:
            raise AccelflowInternalError(f"{te_id} has no {resource} {address}")
        return device.properties


def memory_of(reg: Registration) -> dict[DeviceKey, int]:
    """The memory (bytes) of each device ``reg`` names whose properties give it."""
    return {DeviceKey(reg.taskexecutor_id, r.name, d.address): memory
            for r in reg.resources if not r.counted for d in r.devices
            if (memory := device_memory(d.properties)) is not None}


def devices_of(reg: Registration) -> list[DeviceKey]:
    """The devices a TaskExecutor registered, as ledger keys; a resource counted by amount only
    (no driver, or a degraded one: no devices, as in Flink) gets ``amount`` stand-ins."""
    keys = []
    for r in reg.resources:
        addresses = ([counted_address(i) for i in range(r.amount)] if r.counted
                     else [d.address for d in r.devices])
        keys += [DeviceKey(reg.taskexecutor_id, r.name, a) for a in addresses]
    return keys
