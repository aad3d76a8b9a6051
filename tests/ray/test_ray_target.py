"""The Ray target on a real local Ray instance: TaskExecutors are Ray actors asking Ray for
their CPUs, logical GPUs and a custom resource; data channels are relayed through actor calls.

The instance (conftest) has 4 logical GPUs and 4 ``fpga`` units; there is no real GPU, so the
GPU driver reports what Ray assigned (Ray's accelerator ids), as it does on a GPU node.
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections import Counter
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import psutil
import pytest
from ray_jobs import GPU_CONF, RAY_GPUS, GatedNumbers, double, first, keyed_job_records, row_sums, wait_until
from runtime_jobs import FpgaProbe, Probe, ProbeJson

from accelflow import Environment
from accelflow._errors import AccelflowError, DeploymentError, JobError, MissingDependencyError
from accelflow.config import config_from
from accelflow.runtime.launchers import make_launcher
from accelflow.runtime.launchers._ray import actor_resources

N = 40
#: how long a job here may take: starting or replacing an actor is a new Ray worker process,
#: which takes tens of seconds on a loaded 2-core host (a hang still fails the test)
_JOB_WAIT_S = 180.0


def _one_per_subtask(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_index = {r["index"]: r for r in records}
    assert len(by_index) == records[0]["parallelism"]
    return [by_index[i] for i in sorted(by_index)]



def test_four_whole_gpu_subtasks_see_four_distinct_ray_gpus(ray_conf: dict[str, Any]) -> None:
    env = Environment(dict(ray_conf, **GPU_CONF))
    records = (
        env.from_sequence(0, 3, parallelism=4)
        .map(Probe, name="classify", parallelism=4, resources={"gpu": 1})
        .execute_and_collect()
    )
    subtasks = _one_per_subtask(records)
    assigned = [(s["taskexecutor"], s["infos"][0][0]) for s in subtasks]
    assert all(len(s["infos"]) == 1 for s in subtasks)
    # four distinct GPUs of the Ray instance, two per actor (each actor asked num_gpus=2)
    assert sorted(address for _, address in assigned) == [str(i) for i in range(RAY_GPUS)]
    assert Counter(te for te, _ in assigned) == {"taskexecutor-1": 2, "taskexecutor-2": 2}
    for s in subtasks:
        (address, _), = s["infos"]
        assert s["CUDA_VISIBLE_DEVICES"] == address  # exactly its own GPU
        assert s["shares"] == [(address, "1")]
    assert sorted(r["record"] for r in records) == [0, 1, 2, 3]


def test_eight_half_gpu_subtasks_put_exactly_two_on_each_ray_gpu(ray_conf: dict[str, Any]) -> None:
    env = Environment({**ray_conf, **GPU_CONF, "taskmanager.numberOfTaskSlots": 4})
    records = (
        env.from_sequence(0, 7, parallelism=8)
        .map(Probe, name="embed", parallelism=8, resources={"gpu": 0.5})
        .execute_and_collect()
    )
    subtasks = _one_per_subtask(records)
    per_gpu = Counter((s["taskexecutor"], s["infos"][0][0]) for s in subtasks)
    assert len(per_gpu) == RAY_GPUS and set(per_gpu.values()) == {2}
    assert len({address for _, address in per_gpu}) == RAY_GPUS  # the two actors never share one
    for s in subtasks:
        (address, _), = s["infos"]
        assert s["shares"] == [(address, "1/2")]
        assert s["CUDA_VISIBLE_DEVICES"] == address


def test_custom_resource_identities_come_from_the_driver(ray_conf: dict[str, Any]) -> None:
    """Ray hands out counts of ``fpga``; the driver names the devices each actor holds."""
    conf = dict(ray_conf, **{
        "external-resources": "accel",
        "external-resource.accel.amount": 2,
        "external-resource.accel.ray.resource-name": "fpga",
        "external-resource.accel.driver-factory.class": "accelflow.testing:StaticDriverFactory",
        "external-resource.accel.param.addresses": "a,b",
        "external-resource.accel.param.env-var": "FPGA_VISIBLE_DEVICES",
    })
    assert actor_resources(config_from(values=conf))["resources"] == {"fpga": 2}

    class AccelProbe(FpgaProbe):
        resource = "accel"

    records = env_records(conf, AccelProbe, {"accel": 1}, 4)
    subtasks = _one_per_subtask(records)
    per_device = Counter((s["taskexecutor"], s["infos"][0][0]) for s in subtasks)
    assert per_device == {(te, d): 1 for te in ("taskexecutor-1", "taskexecutor-2") for d in "ab"}
    for s in subtasks:
        assert s["FPGA_VISIBLE_DEVICES"] == s["infos"][0][0]


def env_records(conf: dict[str, Any], probe: Any, resources: dict[str, float], n: int) -> list[Any]:
    env = Environment(conf)
    return env.from_sequence(0, n - 1, parallelism=n).map(  # type: ignore[no-any-return]
        probe, name="probe", parallelism=n, resources=resources
    ).execute_and_collect()


def test_a_request_ray_cannot_place_fails_with_rays_view_of_free_resources(
    ray_conf: dict[str, Any],
) -> None:
    conf = {**ray_conf, **GPU_CONF, "external-resource.gpu.amount": 3, "ray.placement-timeout": "1 s"}
    env = Environment(conf)
    started = time.monotonic()
    with pytest.raises(DeploymentError) as caught:
        env.from_sequence(0, 3).map(Probe, resources={"gpu": 1}).execute_and_collect()
    message = str(caught.value)
    assert "could not place its actor (asks CPU 2, GPU 3) within 1 s (ray.placement-timeout)" in message
    assert "GPU 1/4" in message and "fpga 4/4" in message  # the first actor holds 3 of 4 GPUs
    assert time.monotonic() - started < 30  # failed, instead of waiting forever like Ray


def test_a_custom_resource_the_cluster_lacks_is_named_with_the_free_view(ray_conf: dict[str, Any]) -> None:
    conf = dict(ray_conf, **{
        "external-resources": "tpu",
        "external-resource.tpu.amount": 1,
        "ray.placement-timeout": "0.5 s",
    })
    env = Environment(conf)
    with pytest.raises(DeploymentError, match=r"asks CPU 2, tpu 1\) within 0\.5 s") as caught:
        env.from_sequence(0, 1).execute_and_collect()
    assert "GPU 4/4" in str(caught.value)


@pytest.mark.slow
def test_a_killed_actor_fails_the_job_naming_it(ray_conf: dict[str, Any], gated: Callable[..., Any],
                                                 tmp_path: Path) -> None:
    client = gated(dict(ray_conf, **GPU_CONF))
    assert not (tmp_path / "out.jsonl").exists()
    actor = psutil.Process(client.launcher.pids["taskexecutor-2"])
    forked = actor.children(recursive=True)  # its forkserver and subtasks
    assert len(forked) >= 3
    client.launcher.ray.kill(client.launcher.actor("taskexecutor-2"))
    with pytest.raises(JobError, match=r"^taskexecutor-2 died while running job-1 \(gated\)"):
        client.wait(_JOB_WAIT_S)
    _, alive = psutil.wait_procs(forked, timeout=10)
    assert not alive, f"the killed actor's subtasks outlived it: {alive}"
    assert client.status() == "FAILED"
    assert not client.launcher.workdir.exists()
    assert not (tmp_path / "out.jsonl").exists()  # nothing half-written


@pytest.mark.slow
def test_a_killed_actor_is_replaced_and_the_job_restarts(ray_conf: dict[str, Any], gated: Callable[..., Any],
                                                         tmp_path: Path) -> None:
    conf = {**ray_conf, **GPU_CONF, "restart-strategy": "fixed-delay",
            "restart-strategy.fixed-delay.delay": "0.1 s"}
    client = gated(conf)
    client.launcher.ray.kill(client.launcher.actor("taskexecutor-2"))
    (tmp_path / "marks" / "gate").touch()  # attempt 0 cannot finish without taskexecutor-2
    result = client.wait(_JOB_WAIT_S)  # a replacement actor is a new Ray worker: slow on a loaded host
    assert result.attempts == 2
    lines = (tmp_path / "out.jsonl").read_text(encoding="utf-8").splitlines()
    records = [json.loads(line) for line in lines]
    assert sorted(r["record"] for r in records) == list(range(N))  # complete, no duplicates
    assert {r["attempt"] for r in records} == {1}
    assert len({(r["taskexecutor"], r["infos"][0][0]) for r in records}) == 4


@pytest.fixture
def gated(tmp_path: Path) -> Iterator[Callable[[dict[str, Any]], Any]]:
    """Starts a job whose sources wait at a gate, with a keyed edge (chunks cross between
    actors through the relay) and a file sink, and returns its client once every source
    subtask has emitted. A job still running when the test ends (it failed midway) is
    cancelled and waited for: its actors would hold the shared instance's GPUs and CPUs and
    fail the tests after it."""
    clients: list[Any] = []

    def start(conf: dict[str, Any]) -> Any:
        marks = tmp_path / "marks"
        marks.mkdir()
        env = Environment(conf)
        (
            env.from_source(GatedNumbers(N, str(marks)), parallelism=4)
            .map(ProbeJson, name="classify", parallelism=4, resources={"gpu": 1})
            .key_by(len)
            .map(lambda line: line, name="same", parallelism=2)
            .sink_to_file(tmp_path / "out.jsonl")
        )
        clients.append(env.execute_async("gated"))
        wait_until(lambda: len(list(marks.glob("started-*-a0"))) == 4, "every source subtask to emit",
                    timeout=_JOB_WAIT_S)
        return clients[-1]

    yield start
    for client in clients:
        client.cancel()
        client._done.wait(_JOB_WAIT_S)


def test_one_script_gives_equal_results_on_both_targets(ray_conf: dict[str, Any]) -> None:
    results = {}
    for target in ("local", "ray"):
        env = Environment({**ray_conf, "execution.target": target, "taskmanager.numberOfTaskSlots": 3,
                           "execution.runtime-mode": "batch"})  # one final sum per key
        results[target] = sorted(
            env.from_collection(keyed_job_records(), parallelism=2)
            .map(double, parallelism=3)
            .key_by(first)
            .sum(1, parallelism=3)
            .execute_and_collect()
        )
    expected: dict[int, int] = {}
    for key, value in keyed_job_records():
        expected[key] = expected.get(key, 0) + 2 * value
    assert results["ray"] == results["local"] == sorted(expected.items())


def test_a_keyed_stream_across_actors_keeps_each_senders_order(ray_conf: dict[str, Any]) -> None:
    """One slot per actor: the source and reducer 1 share taskexecutor-1, reducer 2 is on
    taskexecutor-2, so half the keys cross through the relay, chunk after chunk (more than
    the relay's window in flight). Running sums expose any reordering."""
    conf = {**ray_conf, "taskmanager.numberOfTaskSlots": 1, "execution.runtime-mode": "streaming"}
    pairs = [(i % 5, i) for i in range(30000)]
    out = Environment(conf).from_collection(pairs).key_by(first).sum(1, parallelism=2).execute_and_collect()
    assert len(out) == len(pairs)
    for key in range(5):
        running = [total for k, total in out if k == key]
        expected, total = [], 0
        for k, v in pairs:
            if k == key:
                total += v
                expected.append(total)
        assert running == expected, f"key {key}: records arrived out of order"


def test_numpy_chunks_cross_actors_through_the_object_store(ray_conf: dict[str, Any]) -> None:
    """Two sources on two actors rebalance rows to two subtasks on both actors; chunks of
    rows (hundreds of KiB, so Ray moves them through its object store) arrive intact."""
    import numpy as np

    rows = np.random.default_rng(1).random((20000, 100), dtype=np.float32)
    conf = {**ray_conf, "taskmanager.numberOfTaskSlots": 1}
    out = (
        Environment(conf).from_collection(rows, parallelism=2).rebalance()
        .map_batches(row_sums, parallelism=2).execute_and_collect()
    )
    assert np.allclose(np.sort(np.asarray(out)), np.sort(rows.sum(axis=1)))


def test_the_ray_count_of_taskexecutors_wins_over_the_local_one(ray_conf: dict[str, Any]) -> None:
    conf = dict(ray_conf, **GPU_CONF)
    del conf["local.number-taskmanager"]  # 1 by default; ray.number-taskmanager is 2
    records = env_records(conf, Probe, {"gpu": 1}, 4)
    assert {r["taskexecutor"] for r in records} == {"taskexecutor-1", "taskexecutor-2"}


def test_missing_ray_names_the_extra(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "ray", None)  # import ray now raises ImportError
    with pytest.raises(MissingDependencyError, match=r"execution.target: ray .*accelflow\[ray\]"):
        make_launcher(config_from(values={"execution.target": "ray"}))


def test_actor_requests_map_gpu_to_num_gpus_and_others_to_custom_resources() -> None:
    config = config_from(values={
        "taskmanager.numberOfTaskSlots": 3,
        "external-resources": "gpu;fpga;npu",
        "external-resource.gpu.amount": 2,
        "external-resource.gpu.driver-factory.class": "accelflow.resources.gpu:GPUDriverFactory",
        "external-resource.fpga.amount": 1,
        "external-resource.npu.amount": 4,
        "external-resource.npu.ray.resource-name": "NPU",
    })
    assert actor_resources(config) == {"num_cpus": 3, "num_gpus": 2, "resources": {"fpga": 1, "NPU": 4}}


def test_a_failing_driver_in_an_actor_fails_start_up_with_its_error(ray_conf: dict[str, Any]) -> None:
    conf = dict(ray_conf, **{
        "external-resources": "fpga",
        "external-resource.fpga.amount": 1,
        "external-resource.fpga.driver-factory.class": "accelflow.testing:StaticDriverFactory",
        "external-resource.fpga.param.bogus": "1",
    })
    with pytest.raises(AccelflowError, match=r"taskexecutor-\d could not start: .*unknown parameter"):
        Environment(conf).from_sequence(0, 1).execute_and_collect()


@pytest.mark.slow
def test_done_when_the_cli_runs_one_script_on_ray_and_local_alike(tmp_path: Path) -> None:
    """The issue's Done-when, through ``accelflow run`` in fresh processes: Ray starts its own
    local instance with 4 logical GPUs; locally a fake ``nvidia-smi`` shows 4 GPUs."""
    import subprocess

    from accelflow.testing import install_fake_nvidia_smi

    script = tmp_path / "job.py"
    script.write_text(
        "import json, sys\n"
        "from accelflow import Environment\n"
        "from runtime_jobs import Probe\n"
        "env = Environment({'external-resources': 'gpu', 'external-resource.gpu.amount': 2,\n"
        "                   'external-resource.gpu.driver-factory.class': 'gpu',\n"
        "                   'external-resource.gpu.param.coordination-file': sys.argv[1],\n"
        "                   'taskmanager.numberOfTaskSlots': 2, 'local.number-taskmanager': 2})\n"
        "records = env.from_sequence(0, 3, parallelism=4).map(Probe, parallelism=4,\n"
        "    resources={'gpu': 1}).execute_and_collect()\n"
        "print('RESULT', json.dumps(sorted((r['record'], r['taskexecutor'], r['infos'][0][0],\n"
        "    r['CUDA_VISIBLE_DEVICES'] in (r['infos'][0][0], r['infos'][0][1])) for r in records)))\n",
        encoding="utf-8",
    )
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(Path(__file__).parent.parent / "runtime"),
                                                       os.environ.get("PYTHONPATH", "")]))
    install_fake_nvidia_smi(tmp_path / "bin", 4, environ=env)  # the fake wins over a real GPU
    accelflow = [sys.executable, "-m", "accelflow", "run", "--no-progress"]
    out = {}
    for target, extra in (
        ("ray", ["-D", "execution.target=ray", "-D", "ray.local.num-gpus=4",
                 "-D", "ray.number-taskmanager=2", "-D", "ray.local.num-cpus=4"]),
        ("local", []),
    ):
        proc = subprocess.run([*accelflow, *extra, str(script), str(tmp_path / "coord.json")],
                              env=env, capture_output=True, text=True, timeout=120, check=False)
        assert proc.returncode == 0, proc.stderr[-3000:]
        line = [ln for ln in proc.stdout.splitlines() if ln.startswith("RESULT ")][-1]
        out[target] = line
    for target, line in out.items():
        rows = json.loads(line[len("RESULT "):])
        assert [r[0] for r in rows] == [0, 1, 2, 3], target
        assert len({(r[1], r[2]) for r in rows}) == 4, target  # four distinct GPUs
        assert {r[2] for r in rows} == {"0", "1", "2", "3"}, target
        assert all(r[3] for r in rows), target  # CUDA_VISIBLE_DEVICES is its own GPU
