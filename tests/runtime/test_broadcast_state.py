"""The broadcast state pattern as real jobs on the local cluster: PyFlink's own tests
(flink-python/pyflink/datastream/tests/test_data_stream.py, at its parallelism 2) with their
expected output, errors that name the operator, and broadcast state through a checkpoint and
a restore at another parallelism (every new subtask gets a copy, as in Flink)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
from broadcast_jobs import (
    MAPPING, SIDE, CountAndRules, MyBroadcastProcessFunction, MyKeyedBroadcastProcessFunction, SideOutputs,
    Undeclared, Writes, RULES,
)
from event_jobs import SecondColumnTimestampAssigner
from runtime_jobs import CommitLog, Paced, published
from test_checkpointing import _rescaled, _conf

from accelflow import Environment, JobError, MapStateDescriptor, Types, WatermarkStrategy


def env2() -> Environment:
    return Environment({"parallelism.default": 2})


def test_co_broadcast_process() -> None:
    """test_data_stream.py::DataStreamTests::test_co_broadcast_process."""
    env = env2()
    ds = env.from_collection([1, 2, 3, 4, 5], type_info=Types.INT())
    ds_broadcast = env.from_collection([(0, "a"), (1, "b")], type_info=Types.TUPLE([Types.INT(), Types.STRING()]))
    result = ds.connect(ds_broadcast.broadcast(MAPPING)).process(
        MyBroadcastProcessFunction(MAPPING), output_type=Types.STRING()).execute_and_collect()
    assert sorted(result) == ["0a", "0a", "1b", "1b", "a2", "a4", "b1", "b3", "b5"]


def test_keyed_co_broadcast_process() -> None:
    """test_data_stream.py::DataStreamTests::test_keyed_co_broadcast_process: keyed state's
    timers fire (``on_timer`` with the key), broadcast elements carry their timestamps."""
    env = env2()
    ds = env.from_collection([(1, "1603708211000"), (2, "1603708212000"), (3, "1603708213000"),
                              (4, "1603708214000")], type_info=Types.ROW([Types.INT(), Types.STRING()]))
    ds_broadcast = env.from_collection([(0, "1603708215000", "a"), (1, "1603708215000", "b")],
                                       type_info=Types.ROW([Types.INT(), Types.STRING(), Types.STRING()]))
    watermark_strategy = WatermarkStrategy.for_monotonous_timestamps() \
        .with_timestamp_assigner(SecondColumnTimestampAssigner())
    ds = ds.assign_timestamps_and_watermarks(watermark_strategy)
    ds_broadcast = ds_broadcast.assign_timestamps_and_watermarks(watermark_strategy)
    result = ds.key_by(lambda t: t[0]).connect(ds_broadcast.broadcast(MAPPING)).process(
        MyKeyedBroadcastProcessFunction(MAPPING), output_type=Types.STRING()).execute_and_collect()
    assert sorted(result) == [
        "value: 0a, ts: 1603708215000", "value: 0a, ts: 1603708215000", "value: 1, ts: 1603708221000",
        "value: 1b, ts: 1603708215000", "value: 1b, ts: 1603708215000", "value: 2, ts: 1603708222000",
        "value: 3, ts: 1603708223000", "value: 4, ts: 1603708224000", "value: a2, ts: 1603708212000",
        "value: a4, ts: 1603708214000", "value: b1, ts: 1603708211000", "value: b3, ts: 1603708213000"]


def test_co_broadcast_side_output() -> None:
    """test_data_stream.py::DataStreamTests::test_co_broadcast_side_output (side outputs
    through ``ctx.output(tag, value)``, accelflow's way, rather than yielded ``(tag, value)``)."""
    env = env2()
    ds = env.from_collection([("a", 0), ("b", 1), ("c", 2)])
    ds_broadcast = env.from_collection([(3, "d"), (4, "f")])
    descriptor = MapStateDescriptor("dummy", key_type_info=Types.INT(), value_type_info=Types.STRING())
    out = ds.connect(ds_broadcast.broadcast(descriptor)).process(SideOutputs(), output_type=Types.STRING())
    both = out.get_side_output(SIDE).map(lambda v: ("side", v)).union(out.map(lambda v: ("main", v)))
    result = both.execute_and_collect()
    assert sorted(v for k, v in result if k == "main") == ["a", "b", "c", "d", "d", "f", "f"]
    assert sorted(v for k, v in result if k == "side") == [0, 1, 2, 3, 3, 4, 4]


@pytest.mark.parametrize(("function", "says"), [
    (Writes(), "operator 'rules': broadcast state 'mapping' is read-only here (put): only "
               "process_broadcast_element may change it"),
    (Undeclared(), "operator 'rules': the broadcast state 'mapings' does not exist: check for typos in the state "
                   "descriptor, or pass it to the broadcast(...) call (declared: ['mapping'])"),
])
def test_misuse_of_broadcast_state_fails_the_job_naming_the_operator(function: object, says: str) -> None:
    env = env2()
    ds = env.from_collection([1, 2])
    rules = env.from_collection([1]).broadcast(MAPPING)
    with pytest.raises(JobError, match=re.escape(says)):
        ds.connect(rules).process(function, name="rules").execute_and_collect()


def test_broadcast_state_is_restored_into_every_subtask_at_another_parallelism(tmp_path: Path) -> None:
    """As from a Flink savepoint: a job cancelled at p=2 after its rules were broadcast
    resumes at p=3 without reading them again (the rules source is past them); every subtask,
    the new one too, holds them from the checkpoint, and each key's timer sees their sum."""
    out = tmp_path / "out"
    out.mkdir()
    n, keys = 600, 30
    conf = _conf(tmp_path, **{"execution.checkpointing.externalized-checkpoint-retention": "RETAIN_ON_CANCELLATION"})

    def job(env: Environment, bounded: bool, delay: float) -> None:
        strategy = WatermarkStrategy.for_monotonous_timestamps().with_timestamp_assigner(lambda x, ts: 0)
        rules = env.from_source(Paced(3, chunk=20, delay=0.0, bounded=bounded), name="rules").broadcast(RULES)
        (env.from_source(Paced(n, chunk=20, delay=delay, bounded=bounded), name="numbers")
            .assign_timestamps_and_watermarks(strategy)
            .key_by(lambda x: x % keys).connect(rules).process(CountAndRules(), name="counts").uid("counts")
            .sink_to(CommitLog(str(out)), name="log"))

    _rescaled(conf, job)
    fired = sorted(tuple(r) for r in published(out))
    assert fired == [(key, n // keys, 0 + 10 + 20) for key in range(keys)]
