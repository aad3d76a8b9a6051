"""The deployer places with soft preferences computed from what the JobManager knows (issue
27): a resident operator's subtasks go where its instance is (as the TaskExecutor reported it
in ``DeviceStatus``), a restarted attempt's subtasks where their predecessors ran, and a device
with an idle warm process wins among equals; each only when it has room. One TaskExecutor with
two GPUs; ``pack`` alone would always take ``gpu 0``."""

from __future__ import annotations

from fractions import Fraction
from pathlib import Path
from typing import Any

from accelflow import Environment
from accelflow.config import config_from
from accelflow.dataflow import ResidentFunction, build_job_graph
from accelflow.runtime import DevicePool, DeviceStatus, ManualClock, ResidentInstance, SubtaskKey
from accelflow.runtime.jobmanager import Job
from accelflow.runtime.jobmanager._deployment import Deployer
from accelflow.runtime.jobmanager._events import EventPump
from accelflow.runtime.jobmanager._state import ClusterState
from jm_parts import ScriptedLauncher, job


class Scale:
    def __init__(self, factor: int) -> None:
        self.factor = factor

    def map(self, x: Any) -> Any:
        return x * self.factor


class Cluster:
    def __init__(self, tmp_path: Path) -> None:
        self.clock = ManualClock()
        self.launcher = ScriptedLauncher(tmp_path, slots=4, gpus=2)
        self.state = ClusterState()
        self.pump = EventPump(self.launcher, self.state, clock=self.clock)
        self.deployer = Deployer(self.launcher, self.state, self.pump, clock=self.clock)
        self.state.add_taskexecutor(self.launcher.registration("taskexecutor-1"))

    def add(self, submitted: Job) -> Job:
        self.state.jobs[submitted.id] = submitted
        return submitted

    def report(self, **status: Any) -> None:
        """What the TaskExecutor said of its devices last (the event pump stores it so)."""
        self.state.taskexecutors["taskexecutor-1"].devices = DeviceStatus("taskexecutor-1", **status)

    def gpu_of(self, keys: list[SubtaskKey]) -> list[tuple[str, Fraction]]:
        return [d for key in keys for d in self.state.subtasks[key].devices.get("gpu", [])]


def resident_job(job_id: str, factor: int) -> tuple[Job, str]:
    """``sequence -> rebalance -> map(Scale(factor), resident=True)`` on a whole GPU; its key."""
    env = Environment()
    env.from_sequence(1, 10).rebalance().map(Scale(factor), resident=True, resources={"gpu": 1}, name="scale").print()
    graph = build_job_graph(job_id, list(env._transformations))
    fn = next(n.spec.fn for c in graph.chains for n in c.nodes if isinstance(getattr(n.spec, "fn", None), ResidentFunction))
    return Job(job_id, graph, config_from(values={}), 0.0), fn.key


def instance(address: str, key: str) -> ResidentInstance:
    return ResidentInstance("gpu", address, "scale", key, None, 0, 0.0)


def test_a_resident_operator_is_placed_on_the_gpu_that_holds_its_instance(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    first, key = resident_job("job-1", 10)
    cluster.report(resident=(instance("1", key),))
    assert cluster.gpu_of(cluster.deployer.deploy(cluster.add(first))) == [("1", Fraction(1))]
    changed, _ = resident_job("job-2", 20)  # its instance is nowhere: placed as usual
    assert cluster.gpu_of(cluster.deployer.deploy(cluster.add(changed))) == [("0", Fraction(1))]


def test_without_room_on_its_instances_gpu_a_resident_operator_is_placed_as_usual(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    blocker = cluster.add(job("job-0", gpus=1))
    cluster.deployer.deploy(blocker)  # takes gpu 0
    resident, key = resident_job("job-1", 10)
    cluster.report(resident=(instance("0", key),))
    assert cluster.gpu_of(cluster.deployer.deploy(cluster.add(resident))) == [("1", Fraction(1))]


def test_a_restarted_attempt_prefers_the_gpu_its_predecessor_held(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    blocker = cluster.add(job("job-0", gpus=1))
    blocked = cluster.deployer.deploy(blocker)  # gpu 0, so that attempt 0 gets gpu 1
    restarted = cluster.add(job("job-1", gpus=1))
    keys = cluster.deployer.deploy(restarted)
    assert cluster.gpu_of(keys) == [("1", Fraction(1))]
    cluster.deployer.abort(blocker, blocked, set(blocked))
    cluster.deployer.abort(restarted, keys, set(keys))  # attempt 0 failed: both GPUs free now
    restarted.attempt = 1
    assert cluster.gpu_of(cluster.deployer.deploy(restarted)) == [("1", Fraction(1))]
    fresh = cluster.add(job("job-2", gpus=1))  # no predecessor: pack's first GPU
    assert cluster.gpu_of(cluster.deployer.deploy(fresh)) == [("0", Fraction(1))]


def test_a_gpu_with_an_idle_warm_process_wins_among_equals(tmp_path: Path) -> None:
    cluster = Cluster(tmp_path)
    cluster.report(pools=(DevicePool("gpu", "0", 0, 1), DevicePool("gpu", "1", 1, 1)))
    assert cluster.gpu_of(cluster.deployer.deploy(cluster.add(job("job-1", gpus=1)))) == [("1", Fraction(1))]
    cluster.report(pools=(DevicePool("gpu", "0", 0, 1), DevicePool("gpu", "1", 0, 1)))  # none idle
    assert cluster.gpu_of(cluster.deployer.deploy(cluster.add(job("job-2", gpus=1)))) == [("0", Fraction(1))]
