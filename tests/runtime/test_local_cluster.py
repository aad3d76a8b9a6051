"""Devices on the real multi-process cluster: placement, isolation, release, exhaustion.

Two TaskExecutor processes each discover 2 of the host's 4 fake GPUs (an honest fake
``nvidia-smi`` on PATH) through the coordination file, and register their slots and GPUs.
"""

from __future__ import annotations

import json
import re
import time
from collections import Counter
from pathlib import Path
from typing import Any

import pytest
from runtime_jobs import FpgaProbe, JsonLinesSink, Probe, WaitForFlag

from accelflow import AllocationError, Environment
from accelflow.testing._nvidia_smi import fake_gpu_uuid


def _one_per_subtask(records: list[dict[str, Any]]) -> list[dict[str, Any]]:
    by_index = {r["index"]: r for r in records}
    assert len(by_index) == records[0]["parallelism"]
    return [by_index[i] for i in sorted(by_index)]


def _coordination(path: str) -> list[Any]:
    return json.loads(Path(path).read_text(encoding="utf-8"))["allocations"]  # type: ignore[no-any-return]


@pytest.mark.slow
def test_four_whole_gpu_subtasks_see_four_distinct_isolated_gpus(gpu_conf: dict[str, Any]) -> None:
    env = Environment(gpu_conf)
    records = (
        env.from_sequence(0, 3, parallelism=4)
        .map(Probe, name="classify", parallelism=4, resources={"gpu": 1})
        .execute_and_collect()
    )
    subtasks = _one_per_subtask(records)
    assigned = [(s["taskexecutor"], s["infos"][0][1]) for s in subtasks]
    assert all(len(s["infos"]) == 1 for s in subtasks)
    assert len(set(assigned)) == 4  # four distinct (TaskExecutor, GPU) pairs
    assert {uuid for _, uuid in assigned} == {fake_gpu_uuid(i) for i in range(4)}
    assert Counter(te for te, _ in assigned) == {"taskexecutor-1": 2, "taskexecutor-2": 2}
    for s in subtasks:
        (address, uuid), = s["infos"]
        assert s["CUDA_VISIBLE_DEVICES"] == uuid  # exactly its own GPU
        assert s["CUDA_DEVICE_ORDER"] == "PCI_BUS_ID"
        assert s["shares"] == [(address, "1")]
    # coordination was on: while the job ran, the file recorded all 4 GPUs, 2 per TaskExecutor
    held = subtasks[0]["coordination"]
    assert sorted(index for index, _ in held) == ["0", "1", "2", "3"]
    assert sorted(Counter(pid for _, pid in held).values()) == [2, 2]
    assert _coordination(gpu_conf["external-resource.gpu.param.coordination-file"]) == []


@pytest.mark.slow
def test_eight_half_gpu_subtasks_put_exactly_two_on_each_gpu(gpu_conf: dict[str, Any]) -> None:
    env = Environment(gpu_conf)
    result_stream = env.from_sequence(0, 7, parallelism=8).map(
        Probe, name="embed", parallelism=8, resources={"gpu": 0.5}
    )
    subtasks = _one_per_subtask(result_stream.execute_and_collect())
    per_gpu = Counter((s["taskexecutor"], s["infos"][0][1]) for s in subtasks)
    assert len(per_gpu) == 4 and set(per_gpu.values()) == {2}
    for s in subtasks:
        (address, uuid), = s["infos"]
        assert s["shares"] == [(address, "1/2")]
        assert s["CUDA_VISIBLE_DEVICES"] == uuid
    result = env.last_result
    assert sorted(result.devices) == [f"embed ({i}/8)" for i in range(1, 9)]
    assert all(v.endswith("(0.5)") for v in result.devices.values())


def test_three_gpus_on_two_gpu_taskexecutors_fail_with_an_explanation(gpu_conf: dict[str, Any]) -> None:
    env = Environment(gpu_conf)
    stream = env.from_sequence(0, 1).map(Probe, name="train", resources={"gpu": 3})
    with pytest.raises(AllocationError) as info:
        stream.execute_and_collect()
    assert str(info.value).startswith(
        "cannot place train (1/1) asking for gpu: 3 on any of 2 TaskExecutor(s) (8 slots in all):"
    )
    # which TaskExecutor got which two GPUs is a race won in the coordination file
    pattern = re.compile(
        r"taskexecutor-(\d): gpu needs 3 whole device\(s\), 2 of 2 are wholly free "
        r"\(gpu (\d) has 1 free, gpu (\d) has 1 free\)"
    )
    matches = [pattern.fullmatch(reason) for reason in info.value.reasons]
    assert all(matches), info.value.reasons
    assert [m.group(1) for m in matches if m] == ["1", "2"]
    assert sorted(g for m in matches if m for g in m.groups()[1:]) == ["0", "1", "2", "3"]
    assert _coordination(gpu_conf["external-resource.gpu.param.coordination-file"]) == []


def test_exhausted_gpus_fail_the_whole_job_naming_every_gpu(gpu_conf: dict[str, Any]) -> None:
    env = Environment(dict(gpu_conf, **{"taskmanager.numberOfTaskSlots": 8}))
    stream = env.from_sequence(0, 8, parallelism=2).map(Probe, name="embed", parallelism=9, resources={"gpu": 0.5})
    with pytest.raises(AllocationError) as info:
        stream.execute_and_collect()
    assert "cannot place embed (9/9) asking for gpu: 0.5" in str(info.value)
    reasons = [re.fullmatch(r"taskexecutor-(\d): gpu (\d) has 0 free, 0.5 needed", r) for r in info.value.reasons]
    assert all(reasons) and len(reasons) == 4, info.value.reasons
    assert sorted(m.group(2) for m in reasons if m) == ["0", "1", "2", "3"]
    assert [m.group(1) for m in reasons if m] == ["1", "1", "2", "2"]


def test_more_subtasks_than_slots_fail_naming_the_slots(fpga_conf: dict[str, Any]) -> None:
    env = Environment(dict(fpga_conf, **{"taskmanager.numberOfTaskSlots": 1}))
    with pytest.raises(AllocationError) as info:
        env.from_sequence(0, 5, parallelism=3).execute_and_collect()
    assert "no free slot for sequence -> collect (3/3) on any of 2 TaskExecutor(s) (2 slots in all)" in str(info.value)
    assert "taskmanager.numberOfTaskSlots" in str(info.value)
    assert info.value.reasons == tuple(f"taskexecutor-{i}: no free slot (1 of 1 used)" for i in (1, 2))


def test_a_resource_no_taskexecutor_has_is_refused(fpga_conf: dict[str, Any]) -> None:
    env = Environment(fpga_conf)
    with pytest.raises(AllocationError) as info:
        env.from_sequence(0, 1).map(Probe, name="infer", resources={"gpu": 1}).execute_and_collect()
    assert info.value.reasons == ("taskexecutor-1: has no gpu", "taskexecutor-2: has no gpu")


def test_operators_that_request_nothing_see_their_taskexecutors_whole_set(
    gpu_conf: dict[str, Any], tmp_path: Path
) -> None:
    env = Environment(gpu_conf)
    (tmp_path / "out").mkdir()
    records = JsonLinesSink(str(tmp_path / "out"))
    env.from_sequence(0, 1, parallelism=2).map(Probe, parallelism=2).add_sink(records)
    client = env.execute_async()
    client.wait(30)
    gpu = client.jobmanager.taskexecutors["taskexecutor-1"].registration.resource("gpu")
    registered = [d.properties for d in gpu.devices]
    subtasks = _one_per_subtask(records.read())
    assert {s["taskexecutor"] for s in subtasks} == {"taskexecutor-1"}  # pack: one TaskExecutor
    for s in subtasks:
        assert [tuple(i) for i in s["infos"]] == sorted((i["index"], i["uuid"]) for i in registered)
        assert len(s["infos"]) == 2
        assert s["shares"] == []
        assert s["CUDA_VISIBLE_DEVICES"] is None  # nothing assigned, nothing restricted


def test_spread_policy_uses_both_taskexecutors(gpu_conf: dict[str, Any]) -> None:
    env = Environment(dict(gpu_conf, **{"scheduler.placement-policy": "spread"}))
    records = env.from_sequence(0, 1, parallelism=2).map(Probe, parallelism=2, resources={"gpu": 0.5}).execute_and_collect()
    subtasks = _one_per_subtask(records)
    assert [s["taskexecutor"] for s in subtasks] == ["taskexecutor-1", "taskexecutor-2"]


def test_isolation_off_leaves_the_environment_alone(gpu_conf: dict[str, Any]) -> None:
    env = Environment(dict(gpu_conf, **{"scheduler.device-isolation": False}))
    records = env.from_sequence(0, 1, parallelism=2).map(Probe, parallelism=2, resources={"gpu": 1}).execute_and_collect()
    subtasks = _one_per_subtask(records)
    assert len({s["infos"][0] for s in subtasks}) == 2  # still two distinct GPUs assigned
    assert all(s["CUDA_VISIBLE_DEVICES"] is None and s["CUDA_DEVICE_ORDER"] is None for s in subtasks)


def test_static_driver_isolation_variable_and_fractions(fpga_conf: dict[str, Any]) -> None:
    env = Environment(fpga_conf)
    records = env.from_sequence(0, 7, parallelism=8).map(FpgaProbe, parallelism=8, resources={"fpga": 0.5}).execute_and_collect()
    subtasks = _one_per_subtask(records)
    per_device = Counter((s["taskexecutor"], s["infos"][0][0]) for s in subtasks)
    assert per_device == {(te, a): 2 for te in ("taskexecutor-1", "taskexecutor-2") for a in ("0", "1")}
    assert all(s["FPGA_VISIBLE_DEVICES"] == s["infos"][0][0] for s in subtasks)


@pytest.mark.slow
def test_devices_are_released_when_their_subtasks_end(gpu_conf: dict[str, Any], tmp_path: Path) -> None:
    """The GPU stage ends while a CPU stage still runs: its GPUs are free again at once."""
    flag = tmp_path / "flag"
    env = Environment(gpu_conf)
    (
        env.from_sequence(0, 99, parallelism=4)
        .map(Probe, name="classify", parallelism=4, resources={"gpu": 1})
        .rebalance()
        .add_sink(WaitForFlag(str(flag)), name="slow sink", parallelism=1)
    )
    client = env.execute_async("release")
    ledger = client.jobmanager.ledger
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline and client.status() != "FAILED":
        states = {st.name: st.state for st in list(client.jobmanager.subtasks.values())}
        gpu_states = [s for n, s in states.items() if n.startswith("classify (")]
        if gpu_states == ["FINISHED"] * 4:
            break
        time.sleep(0.02)
    try:
        assert gpu_states == ["FINISHED"] * 4, states
        assert client.status() == "RUNNING"
        assert states["slow sink (1/1)"] != "FINISHED"  # the job is still running
        rows = ledger.statistics()
        assert len(rows) == 4 and all(r["free"] == 1 and r["holders"] == {} for r in rows)
    finally:
        flag.touch()
    result = client.wait(30)
    assert result.operators["slow sink"]["records_in"] == 100


@pytest.mark.slow
def test_back_to_back_jobs_each_get_every_gpu(gpu_conf: dict[str, Any]) -> None:
    """A cluster gives its GPUs back to the host when it stops, so the next one finds them."""
    coordination = gpu_conf["external-resource.gpu.param.coordination-file"]
    for _ in range(2):
        env = Environment(gpu_conf)
        env.from_sequence(0, 3, parallelism=4).map(Probe, parallelism=4, resources={"gpu": 1}).add_sink(lambda r: None)
        client = env.execute_async()
        assert client.wait(30).devices.keys() == {f"map ({i}/4)" for i in range(1, 5)}
        assert all(r["free"] == 1 and not r["holders"] for r in client.jobmanager.ledger.statistics())
        assert _coordination(coordination) == []  # the host's record too
