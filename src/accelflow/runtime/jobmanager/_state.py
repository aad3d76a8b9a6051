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

from accelflow._errors import AccelflowInternalError
from accelflow.resources import ExternalResourceInfo
from accelflow.runtime import Registration, SubtaskKey
from accelflow.runtime.jobmanager._jobs import Job, SubtaskState, TaskExecutorInfo
from accelflow.scheduling import ONE, DeviceKey, DeviceLedger, TaskExecutorOffer


class ClusterState:
    def __init__(self) -> None:
        self.lock = threading.RLock()
        #: notified (under ``lock``) whenever capacity frees up or a TaskExecutor registers
        self.released = threading.Condition(self.lock)
        self.ledger = DeviceLedger()
        self.taskexecutors: dict[str, TaskExecutorInfo] = {}
        self.jobs: dict[str, Job] = {}
        self.subtasks: dict[SubtaskKey, SubtaskState] = {}
        #: (job id, attempt) -> the TaskExecutor of each slot it holds
        self.slots: dict[tuple[str, int], list[str]] = {}
        #: pids of TaskExecutor incarnations already given up on
        self.lost_pids: set[int] = set()
        #: cancels every job (the embedded cluster's ``JobClient.cancel``, a session's stop)
        self.cancel_all = False

    # -- membership --------------------------------------------------------------------------
    def add_taskexecutor(self, reg: Registration) -> None:
        with self.lock:
            self.taskexecutors[reg.taskexecutor_id] = TaskExecutorInfo(reg)
            self.ledger.add_devices(devices_of(reg))
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
            return True

    def running_jobs(self) -> list[Job]:
        with self.lock:
            return [j for j in self.jobs.values() if not j.done.is_set()]

    # -- capacity ----------------------------------------------------------------------------
    def offers(self, *, empty: bool = False) -> list[TaskExecutorOffer]:
        """What each TaskExecutor offers now (or when ``empty``, with nothing running)."""
        with self.lock:
            return [
                TaskExecutorOffer(
                    te.id, te.registration.slots - (0 if empty else te.used_slots),
                    te.registration.slots, self.free_devices(te.id, empty=empty),
                )
                for te in sorted(self.taskexecutors.values(), key=lambda t: t.id)
            ]

    def free_devices(self, te_id: str, *, empty: bool = False) -> dict[str, dict[str, Fraction]]:
        free: dict[str, dict[str, Fraction]] = {}
        for d in self.ledger.devices():
            if d.taskexecutor == te_id:
                free.setdefault(d.resource, {})[d.address] = ONE if empty else self.ledger.free(d)
        return free

    def release_slots(self, job_id: str, attempt: int) -> None:
        with self.lock:
            for te_id in self.slots.pop((job_id, attempt), []):
                if te_id in self.taskexecutors:
                    self.taskexecutors[te_id].used_slots -= 1
            self.released.notify_all()

    def release_devices(self, key: SubtaskKey) -> None:
        """Give back what subtask ``key`` holds (nothing when it holds nothing)."""
        with self.lock:
            self.ledger.release_if_held(key)
            self.released.notify_all()

    def info_properties(self, te_id: str, resource: str, address: str) -> dict[str, str]:
        """The properties of the device ``address`` that ``te_id`` registered."""
        te = self.taskexecutors[te_id]
        for props in te.infos(resource):
            if address_of(props) == address:
                return props
        raise AccelflowInternalError(f"{te_id} has no {resource} {address}")


def devices_of(reg: Registration) -> list[DeviceKey]:
    """The devices a TaskExecutor registered, as ledger keys."""
    keys = []
    for r in reg.resources:
        if r["status"] == "ok":
            keys += [DeviceKey(reg.taskexecutor_id, r["name"], address_of(i)) for i in r["infos"]]
        else:  # no driver, or degraded: counted by amount, no infos (as in Flink)
            keys += [DeviceKey(reg.taskexecutor_id, r["name"], f"#{i}") for i in range(r["amount"])]
    return keys


def address_of(props: dict[str, str]) -> str:
    return ExternalResourceInfo(props).address
