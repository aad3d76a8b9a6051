"""Standby subtasks (issue 28.2, ``execution.failover.standby-subtasks: N``).

For every chain whose operators ask for devices, ``N`` extra subtasks are placed on spare
slots and devices, deployed and opened (``open()`` loads the model), and then wait idle,
without an index, channels, splits nor state. When a subtask of that chain fails and the
failure is rolled back in place, a ready standby takes its index at once (it is activated by
the same :class:`Rollback` the survivors get, so it restores the checkpoint and connects the
new epoch's channels as they do), and another standby is deployed in the background. A
standby that fails is simply replaced: the job goes on. Standbys that cannot be placed are
not waited for: the job runs without them, says so in its log and in REST
(``standby.missing``), and tries again whenever capacity may have come back (after a standby
took over, or one failed, and when a TaskExecutor says a failed subtask's devices are free:
``DevicesFree``, as the shares of a subtask that did not finish stay held until then).

A standby's key is ``SubtaskKey(job, attempt, chain, parallelism + j)`` (an index past the
last one: it has none yet); its slot and shares are held under that key in the attempt that
placed it, and move to the failed subtask's key when it takes over. Its name numbers it among
the chain's standbys (``model (standby 1 of 2)``), and its functions' ``RuntimeContext`` says
``is_standby()`` with index -1 until it takes over (``runtime/subtask/_runner.py``).

A standby that cannot be placed while a failed subtask's devices still wait for their
``DevicesFree`` (right after a standby took over) is missing for a moment only: REST shows it
missing at once, the log says so only if it is still missing once those devices are free, or
:data:`~._deployment.EXIT_WAIT_S` later, and says when the chain has all its standbys again.
"""

from __future__ import annotations

import itertools
import logging
from typing import Any

from accelflow._errors import AllocationError
from accelflow.config import keys as k
from accelflow.runtime import (
    CancelJob, Clock, DevicesFree, SubtaskExited, SubtaskFailed, SubtaskKey, SubtaskRunning,
)
from accelflow.runtime.jobmanager._deployment import EXIT_WAIT_S, Deployer, devices_of
from accelflow.runtime.jobmanager._events import TaskExecutorDied
from accelflow.runtime.jobmanager._jobs import SUBTASK_ENDED, Job, SubtaskState
from accelflow.runtime.jobmanager._plan import requester
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.runtime.launchers import Launcher
from accelflow.scheduling import SlotRequest, SubtaskRequest

_log = logging.getLogger("accelflow.runtime")


class StandbyPool:
    """The standby subtasks of one job (see the module's description)."""

    def __init__(self, job: Job, state: ClusterState, deployer: Deployer, launcher: Launcher, clock: Clock) -> None:
        self.job, self.state, self.deployer, self.launcher, self.clock = job, state, deployer, launcher, clock
        self.wanted = job.config.get(k.STANDBY_SUBTASKS) if job.in_place_off is None else 0
        if job.config.get(k.STANDBY_SUBTASKS) and job.in_place_off is not None:
            _log.warning("%s: no standby subtasks: they take over in a rollback in place, and %s",
                         job.id, job.in_place_off)
        self.chains = [c.id for c in job.graph.chains if c.resources] if self.wanted else []
        self.keys: dict[int, list[SubtaskKey]] = {c: [] for c in self.chains}  # deployed, per chain
        self.ready: set[SubtaskKey] = set()
        self.numbers: dict[SubtaskKey, int] = {}  # its number among its chain's standbys, from 1
        self._numbers = itertools.count()
        #: per chain short of standbys: since when (``clock.monotonic()``), and whether the log said so
        self.short: dict[int, tuple[float, bool]] = {}
        with state.lock:
            job.standby_missing = {}

    def owns(self, key: Any) -> bool:
        return any(key in keys for keys in self.keys.values())

    def fill(self) -> None:
        """Deploy standbys until each chain has :attr:`wanted` (those that fit now)."""
        for chain_id in self.chains:
            while len(self.keys[chain_id]) < self.wanted:
                if not self._deploy(chain_id):
                    break
            if len(self.keys[chain_id]) == self.wanted:
                self._recovered(chain_id)

    def _deploy(self, chain_id: int) -> bool:
        """Place and deploy one more standby of chain ``chain_id``; whether it fitted."""
        chain = self.job.graph.chains[chain_id]
        key = SubtaskKey(self.job.id, self.job.attempt, chain_id, chain.parallelism + next(self._numbers))
        number = min(set(range(1, self.wanted + 1)) - {self.numbers[k] for k in self.keys[chain_id]})
        label = f"(standby {number} of {self.wanted})"
        request = SlotRequest((SubtaskRequest(key, f"{requester(chain)} {label}", chain.resources),))
        with self.state.lock:
            try:
                [placed] = self.state.place([request], self.job.config.get(k.PLACEMENT_POLICY))  # type: ignore[arg-type]
            except AllocationError as exc:
                self.job.standby_missing[chain.name] = str(exc)  # REST: at once, the whole reason
                self._short(chain_id)
                return False
            self.state.take(self.job.id, self.job.attempt, [placed], more=True)
            self.state.subtasks[key] = SubtaskState(key, f"{chain.name} {label}", placed.taskexecutor,
                                                    devices_of(placed, key))
        self.keys[chain_id].append(key)
        self.numbers[key] = number
        self.deployer.deploy_one(self.job, key, standby=True)
        return True

    def _short(self, chain_id: int) -> None:
        """Chain ``chain_id`` has fewer standbys than wanted: say so, unless capacity is about
        to come back (a failed subtask's devices wait for ``DevicesFree``, which fills again)
        and has not taken longer than :data:`EXIT_WAIT_S`."""
        now = self.clock.monotonic()
        since, said = self.short.setdefault(chain_id, (now, False))
        if said or (self._devices_coming() and now - since < EXIT_WAIT_S):
            return
        self.short[chain_id] = (since, True)
        chain = self.job.graph.chains[chain_id]
        _log.warning("%s runs without %d of its %d standby subtask(s) of %s: %s", self.job.id,
                     self.wanted - len(self.keys[chain_id]), self.wanted, chain.name,
                     self.job.standby_missing[chain.name])

    def _recovered(self, chain_id: int) -> None:
        """Chain ``chain_id`` has every standby again: clear what REST shows, and tell the log
        if it said the chain ran short."""
        chain = self.job.graph.chains[chain_id]
        with self.state.lock:
            self.job.standby_missing.pop(chain.name, None)
        if self.short.pop(chain_id, (0.0, False))[1]:
            _log.warning("%s has its %d standby subtask(s) of %s again", self.job.id, self.wanted, chain.name)

    def _devices_coming(self) -> bool:
        """Whether devices of this job's failed subtasks wait for their ``DevicesFree``."""
        return any(key.job_id == self.job.id for key in self.state.reconciling)

    def on_event(self, te_id: str, msg: Any) -> None:
        """An event of a standby: it is ready, or it failed (then it is replaced)."""
        key = msg.key
        if isinstance(msg, SubtaskRunning):
            with self.state.lock:
                self.state.subtasks[key].state = "STANDBY"
            self.ready.add(key)
        elif isinstance(msg, SubtaskFailed | SubtaskExited):
            st = self.state.subtasks[key]
            _log.warning("%s: standby subtask %s on %s failed; deploying another", self.job.id, st.name,
                         st.taskexecutor)
            self._drop(key, "FAILED")
            self.fill()

    def on_lost(self, te_id: str) -> None:
        """A TaskExecutor was lost: its standbys are gone."""
        lost = [key for keys in self.keys.values() for key in keys if self.state.subtasks[key].taskexecutor == te_id]
        for key in lost:
            self._drop(key, "FAILED")
        if lost:
            self.fill()

    def ready_count(self, chain_id: int) -> int:
        """How many standbys of chain ``chain_id`` are ready to take a failed subtask's place."""
        return sum(key in self.ready for key in self.keys.get(chain_id, []))

    def take(self, chain_id: int) -> SubtaskKey | None:
        """A ready standby of chain ``chain_id`` to take a failed subtask's place, or None."""
        for key in self.keys.get(chain_id, []):
            if key in self.ready:
                self.keys[chain_id].remove(key)
                self.ready.discard(key)
                del self.numbers[key]
                return key
        return None

    def _drop(self, key: SubtaskKey, state: str) -> None:
        with self.state.lock:
            st = self.state.subtasks[key]
            self.state.release_devices(key)
            if st.taskexecutor is not None:
                self.state.release_slot(self.job.id, self.job.attempt, st.taskexecutor)
            if st.state not in SUBTASK_ENDED:
                st.state = state
        self.keys[key.chain].remove(key)
        self.ready.discard(key)
        del self.numbers[key]

    def stop(self) -> None:
        """The attempt ended (the job finished, or every subtask is being cancelled): stop
        the standbys and give back what they hold."""
        keys = [key for keys in self.keys.values() for key in keys]
        hosts = {self.state.subtasks[key].taskexecutor for key in keys}
        for key in keys:
            self._drop(key, "CANCELED")
        for te_id in sorted(h for h in hosts if h in self.state.taskexecutors):
            self.launcher.handle(te_id).send(CancelJob(self.job.id))

    def on_any(self, event: tuple[str, Any]) -> bool:
        """Handle ``event`` if it is about the standbys; whether it is theirs only."""
        te_id, msg = event
        if isinstance(msg, DevicesFree):  # a failed subtask's devices came back (``docs/gpu.md``)
            if self.short:
                self.fill()
            return True
        now = self.clock.monotonic()
        if any(not said and now - since >= EXIT_WAIT_S for since, said in self.short.values()):
            self.fill()  # no DevicesFree in EXIT_WAIT_S: try once more, and say so if still short
        if isinstance(msg, TaskExecutorDied):
            self.on_lost(te_id)
            return False  # the job's subtasks there are lost too
        if self.owns(getattr(msg, "key", None)):
            self.on_event(te_id, msg)
            return True
        return False
