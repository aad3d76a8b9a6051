"""Resident operators (issue 27.2): ``map_batches(..., resident=True)`` and ``map(...,
resident=True)`` keep one instance per device in the device's host process, shared by every
subtask on it, opened once; fake GPUs, real processes. ``Model`` logs each ``open()`` and
each batch (with the process that ran it) to a file."""

from __future__ import annotations

import re
import threading
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from failover_jobs import Counted
from sink_file_jobs import FailOnceAfterACheckpoint
from warm_jobs import FailFirstAttempt, Leaky, Model, SmallChunks, use_fake_gpus_with_cupy, lines

from accelflow import AllocationError, ConfigError, Environment, JobError
from accelflow.testing import FakeGPU


@pytest.fixture
def gpus(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> dict[str, Any]:
    """One TaskExecutor with 2 fake GPUs of 64 MiB (and a fake CuPy with as much), 4 slots."""
    gpu = use_fake_gpus_with_cupy(monkeypatch, tmp_path, [FakeGPU(index=i, memory_total=64) for i in range(2)])
    (tmp_path / "device").mkdir()
    monkeypatch.setenv("FAKE_CUPY_DEVICE", str(tmp_path / "device"))
    monkeypatch.setenv("FAKE_CUPY_MEMORY", str(64 << 20))
    return {
        **gpu,
        "external-resource.gpu.warm.framework": "none",
        "taskmanager.numberOfTaskSlots": 4,
        "taskmanager.device-pool.size": 0,
    }


def test_resident_sharers_open_one_instance_per_device(gpus: dict[str, Any], tmp_path: Path) -> None:
    log = str(tmp_path / "model.log")
    env = Environment(gpus)
    out = env.from_sequence(0, 3999, parallelism=4).map_batches(
        Model(log), batch_size=64, resident=True, resources={"gpu": 0.5}, parallelism=4)
    assert sorted(int(x) for x in out.execute_and_collect()) == [10 * x for x in range(4000)]
    opens = lines(log, "open")
    # 4 subtasks at half a GPU each on 2 GPUs: one open() per GPU, with the whole device
    assert len(opens) == 2 and len({o[2] for o in opens}) == 2
    assert all(o[3] == "1" and o[4] == "0/1" for o in opens)
    batches = lines(log, "batch")
    assert {b[0] for b in batches} == {o[0] for o in opens}  # every batch ran in a device host
    assert sorted(int(x) for b in batches for x in b[2].split(",")) == list(range(4000))


def test_batches_of_several_subtasks_run_together(gpus: dict[str, Any], tmp_path: Path) -> None:
    """Two subtasks on one GPU send chunks of 8; the host fills batches of 32 from both."""
    log = str(tmp_path / "model.log")
    conf = dict(gpus, **{"external-resource.gpu.amount": 1})
    env = Environment(conf)
    out = env.from_source(SmallChunks(800, chunk=8, delay=0.01), parallelism=2).map_batches(
        Model(log), batch_size=32, max_wait=0.5, resident=True, resources={"gpu": 0.5}, parallelism=2)
    assert sorted(int(x) for x in out.execute_and_collect()) == [10 * x for x in range(800)]
    batches = [[int(x) for x in b[2].split(",")] for b in lines(log, "batch")]
    assert max(len(b) for b in batches) == 32 and sum(len(b) for b in batches) == 800
    mixed = [b for b in batches if {x % 2 for x in b} == {0, 1}]  # subtask 1 reads the odd ones
    assert len(mixed) >= len(batches) // 2, batches


def test_a_busy_device_gets_whole_batches_whatever_the_chunks(gpus: dict[str, Any], tmp_path: Path) -> None:
    """Chunks of 24 records to a batch size of 64 and a device busy 20 ms a batch: the subtask
    holds records back while its window of requests is full and sends whole batches, instead
    of pieces of 24 that the host joins into batches of 48 (a partial batch, and a flush that
    empties its device pipeline, every few requests)."""
    log = str(tmp_path / "model.log")
    env = Environment(gpus)
    out = env.from_source(SmallChunks(3000, chunk=24, delay=0), parallelism=1).map_batches(
        Model(log, batch_s=0.02), batch_size=64, resident=True, resources={"gpu": 0.5}, parallelism=1)
    assert sorted(int(x) for x in out.execute_and_collect()) == [10 * x for x in range(3000)]
    sizes = [len(b[2].split(",")) for b in lines(log, "batch")]
    assert sum(sizes) == 3000
    assert sum(1 for n in sizes if n != 64) <= 6, sizes  # the window's first requests and the last


def test_a_restarted_attempt_reuses_the_instance(gpus: dict[str, Any], tmp_path: Path) -> None:
    """One GPU: the restart gets its share once the failed subtask's processes left the device
    (health's reconciliation) and finds the instance open."""
    _restart_reuses(gpus, tmp_path, {"external-resource.gpu.amount": 1, "restart-strategy.fixed-delay.delay": "0.1 s"})


def test_a_restart_with_another_gpu_free_goes_back_to_its_instance(gpus: dict[str, Any], tmp_path: Path) -> None:
    """Two GPUs: the restart is placed on the failed subtask's GPU, where the instance is, once
    its share is back (a restart delay longer than the reconciliation, whose ``DevicesFree`` the
    embedded JobManager reads before it places), not on the other GPU, free all along. That
    the previous device wins over ``pack``'s own choice is
    ``tests/runtime/jobmanager/test_placement_wishes.py``'s."""
    _restart_reuses(gpus, tmp_path, {"restart-strategy.fixed-delay.delay": "2 s"})


def _restart_reuses(gpus: dict[str, Any], tmp_path: Path, extra: dict[str, Any]) -> None:
    log = str(tmp_path / "model.log")
    conf = dict(gpus, **{"restart-strategy": "fixed-delay", **extra})
    env = Environment(conf)
    out = env.from_sequence(0, 99).map(Model(log), resident=True, resources={"gpu": 1}, name="scale") \
        .map(FailFirstAttempt(log))
    assert sorted(out.execute_and_collect()) == [10 * x for x in range(100)]
    assert [a[2] for a in lines(log, "attempt")] == ["0", "1"]
    assert len(lines(log, "open")) == 1  # attempt 1 found it open


def test_a_sigkilled_device_host_fails_its_subtask_at_once_naming_the_host(
        gpus: dict[str, Any], tmp_path: Path) -> None:
    """The model SIGKILLs its own process, the device host, in a batch its subtask waits for:
    the subtask fails at once with an error naming the host, its pid, its device and the signal
    (it used to take the closed connection for a broken data channel and wait 60 s for a
    rollback), and the restarted subtask opens the model in a new host and goes on."""
    env = Environment({**gpus, "execution.checkpointing.interval": "100 ms",
                       "execution.checkpointing.dir": str(tmp_path / "checkpoints"),
                       "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"})
    (env.from_source(Counted(2000, chunk=16, delay=0.005), name="numbers")
        .map_batches(FailOnceAfterACheckpoint(tmp_path, at=600, how="kill"), batch_size=16, name="model",
                     resident=True, resources={"gpu": 0.5})
        .sink_to_file(tmp_path / "out.txt"))
    client = env.execute_async("host killed")
    result = client.wait(40)  # the failover waited 60 s before the fix
    host = int((tmp_path / "failed").read_text())
    [failover] = client.jobmanager.jobs[result.job_id].failovers
    assert result.attempts == 2 and failover.failed == ["model -> file sink (1/1)"], failover
    assert re.fullmatch(
        rf"subtask model -> file sink \(1/1\) on taskexecutor-1 failed: operator 'model': the device host of "
        rf"gpu \d \(pid {host}\) was killed by signal 9 \(SIGKILL\); its resident instances are gone \(the "
        r"restarted subtasks open them again in a new host\)", failover.cause), failover.cause
    assert sorted(int(x) for x in (tmp_path / "out.txt").read_text().split()) == list(range(2000))


def test_ordered_collect_keeps_positions_through_the_host(gpus: dict[str, Any], tmp_path: Path) -> None:
    env = Environment(gpus)
    out = env.from_collection(np.arange(1000), parallelism=1).rebalance().map_batches(
        Model(str(tmp_path / "log")), batch_size=50, resident=True, resources={"gpu": 0.5}, parallelism=2)
    assert [int(x) for x in out.execute_and_collect(ordered=True)] == [10 * x for x in range(1000)]


def test_a_model_too_big_for_its_share_is_refused(gpus: dict[str, Any]) -> None:
    """A 40 MiB model at half of a 64 MiB GPU: more than its share (32 MiB) allows."""
    conf = dict(gpus, **{"external-resource.gpu.warm.framework": "cupy"})
    env = Environment(conf)
    env.from_sequence(0, 9).map_batches(Leaky(leak_mib=0, keep_mib=40), resident=True, name="big",
                                        resources={"gpu": 0.5}).print()
    with pytest.raises(AllocationError, match=r"resident operator 'big' holds 40 MiB of device memory "
                                              r"after open\(\), more than its share 0\.5 of gpu \d allows "
                                              r"\(32 MiB of 64 MiB\): ask for a larger share, e\.g\. "
                                              r"resources=\{'gpu': 0\.75\}"):
        env.execute()


class _Changing:
    """Pickles to different bytes each time (a counter in its state)."""

    def __init__(self) -> None:
        self.n = 0

    def __getstate__(self) -> dict[str, int]:
        self.n += 1
        return {"n": self.n}

    def map(self, x: Any) -> Any:
        return x

    map_batch = map


@pytest.mark.parametrize("fn, options, culprit", [
    (_Changing(), {"resources": {"gpu": 0.5}}, "pickling it twice gave different bytes"),
    (lambda x, lock=threading.Lock(): x, {"resources": {"gpu": 0.5}},
     "needs an operator that can be pickled (its instance is opened in the device's host process), but "
     "pickling it failed: TypeError"),
    (Model("log"), {}, "must ask for (a share of) one device, e.g. resources={'gpu': 0.5}; it asks for nothing"),
    (Model("log"), {"resources": {"gpu": 2}}, "it asks for resources={'gpu': 2}"),  # as written, no Fraction
    (Model("log"), {"resources": {"gpu": 0.5, "fpga": 1}}, "must ask for (a share of) one device"),
    (Model("log"), {"resources": {"gpu": 0.5}, "resident": "yes"}, "resident must be True or False, got str ('yes')"),
])
def test_bad_resident_operators_are_refused_naming_the_operator(fn: Any, options: dict[str, Any], culprit: str) -> None:
    options = {"resident": True, **options}
    stream = Environment().from_sequence(0, 1)
    for method in ("map", "map_batches"):
        with pytest.raises(ConfigError, match=f"operator '{method}-op'") as caught:
            getattr(stream, method)(fn, name=f"{method}-op", **options)
        assert culprit in str(caught.value)


def test_resident_after_key_by_is_refused_as_it_has_no_keyed_state() -> None:
    """Before: accepted, then the host's ``get_state`` said "Keyed state can only be used on a
    'keyed stream', i.e., after a 'key_by()'" of an operator that was after key_by."""
    keyed = Environment().from_sequence(0, 1).key_by(lambda x: x % 3)
    for method in ("map", "map_batches"):
        with pytest.raises(ConfigError, match=f"operator '{method}-op': resident=True cannot follow key_by"):
            getattr(keyed, method)(Model("log"), name=f"{method}-op", resident=True, resources={"gpu": 0.5})


class _Even:
    """A filter: fewer outputs than records."""

    def map_batch(self, batch: Any) -> Any:
        return batch[batch % 2 == 0]


def test_a_resident_filter_of_one_subtask_keeps_what_it_returns(gpus: dict[str, Any]) -> None:
    """One subtask's chunks of 8 run together in batches of 32. Before: "returned 16 outputs
    for a batch of 32 records from 4 requests", a single subtask's batch refused."""
    env = Environment(dict(gpus, **{"external-resource.gpu.amount": 1}))
    out = env.from_source(SmallChunks(400, chunk=8, delay=0.01)).map_batches(
        _Even(), batch_size=32, max_wait=0.5, resident=True, resources={"gpu": 0.5})
    assert sorted(int(x) for x in out.execute_and_collect()) == list(range(0, 400, 2))


def test_sharers_batches_must_be_one_to_one_said_once(gpus: dict[str, Any]) -> None:
    """Two subtasks' chunks run together: a filter cannot say whose outputs are whose. The
    error names the operator once (before: twice) and says why."""
    env = Environment(dict(gpus, **{"external-resource.gpu.amount": 1}))
    env.from_source(SmallChunks(800, chunk=8, delay=0.01), parallelism=2).map_batches(
        _Even(), batch_size=32, max_wait=0.5, resident=True, resources={"gpu": 0.5}, parallelism=2,
        name="even").print()
    with pytest.raises(JobError, match="records of 2 subtasks sharing its instance: a batch of several "
                                       "subtasks' records needs one output per record") as caught:
        env.execute()
    assert str(caught.value).count("'even'") == 1, caught.value


def test_a_resident_operators_traceback_names_the_users_file_and_line(gpus: dict[str, Any]) -> None:
    """A class pickled by value (defined in a function, as a job script's): before, the
    traceback said ``File "<dynamic-code>", line 4``."""

    class Broken:
        def map_batch(self, batch: Any) -> Any:
            raise ValueError("negative input")

    line = Broken.map_batch.__code__.co_firstlineno + 1
    env = Environment(gpus)
    env.from_sequence(0, 9).map_batches(Broken(), resident=True, resources={"gpu": 0.5}).print()
    with pytest.raises(ValueError, match="negative input") as caught:
        env.execute()
    assert f'File "{__file__}", line {line}, in map_batch' in str(caught.value), caught.value


@dataclass(frozen=True)
class _Point:
    x: int


class _ToPoints:
    """Returns records of a class of this module, which the host runs by value."""

    def map(self, x: Any) -> Any:
        return _Point(int(x))


def test_records_of_the_users_classes_come_back_from_the_host(gpus: dict[str, Any]) -> None:
    """The host's copy of ``_Point`` (by value) is not the one its import finds: its outputs
    travel by value too, rather than failing to pickle."""
    out = Environment(gpus).from_sequence(0, 9).map(_ToPoints(), resident=True, resources={"gpu": 0.5})
    assert sorted(p.x for p in out.execute_and_collect()) == list(range(10))


def test_without_resident_nothing_changes() -> None:
    env = Environment()
    env.from_sequence(0, 1).map_batches(Model("log"), batch_size=4, resources={"gpu": 0.5}).map(Model("log"))
    kinds = [type(t.spec).__name__ for t in env._transformations[1:]]
    assert kinds == ["MapBatchesSpec", "MapSpec"] and isinstance(env._transformations[1].spec.fn, Model)
