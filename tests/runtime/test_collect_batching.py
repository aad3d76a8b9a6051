"""A subtask ships collected chunks to the client a few at a time (``CollectSink``): held
until a record count, a byte size or a delay is reached, released at once at the end of
the input and at a checkpoint barrier, never reordered."""

from __future__ import annotations

import time

import numpy as np
import pytest

from accelflow import Environment
from accelflow.dataflow import CollectSinkSpec, Columns, Transformation
from accelflow.runtime import ChainPlan
from accelflow.runtime.subtask import _sink_operators
from accelflow.runtime.subtask._sink_operators import COLLECT_MAX_RECORDS, CollectSink
from accelflow.scheduling import ResourceProfile


#: ``execution.buffer-timeout``'s default (100 ms), as the ChainPlan carries it
DELAY_S = 0.1


def _sink(buffer_timeout_ms: int = 100) -> CollectSink:
    node = Transformation(0, "collect", CollectSinkSpec(), 1, ResourceProfile.parse({}, operator="collect"))
    return CollectSink(node, ChainPlan("collect", [node], (), rolling=False, buffer_timeout_ms=buffer_timeout_ms))


def test_chunks_are_held_until_enough_records_then_released_in_order() -> None:
    sink = _sink()
    chunk = 1000
    held = COLLECT_MAX_RECORDS // chunk
    outs = [sink.process(np.arange(i * chunk, (i + 1) * chunk)) for i in range(held + 1)]
    assert all(len(o) == 0 for o in outs[:held])  # nothing leaves before the limit
    assert np.array_equal(outs[held], np.arange((held + 1) * chunk))  # then all, in order
    assert sink.deadline() is None and len(sink.finish()) == 0


def test_large_arrays_are_released_by_size(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_sink_operators, "COLLECT_MAX_BYTES", 1 << 20)
    sink = _sink()
    assert len(sink.process(np.zeros((100, 1024), np.float32))) == 0  # 400 KB
    assert len(sink.process(np.zeros((100, 1024), np.float32))) == 0
    assert len(sink.process(np.zeros((100, 1024), np.float32))) == 300  # 1.2 MB: released


def test_held_chunks_have_a_deadline_and_the_end_releases_them() -> None:
    sink = _sink()
    before = time.monotonic()
    assert sink.process([("a", 1), ("b", 2)]) == []
    assert sink.process([("c", 3)]) == []
    deadline = sink.deadline()
    assert deadline is not None and before + DELAY_S <= deadline <= time.monotonic() + DELAY_S
    assert sink.on_deadline() == [("a", 1), ("b", 2), ("c", 3)]
    assert sink.deadline() is None


def test_buffer_timeout_zero_sends_every_chunk_at_once_and_minus_one_only_full_ones() -> None:
    at_once = _sink(buffer_timeout_ms=0)
    assert at_once.process([("a", 1)]) == [("a", 1)] and at_once.deadline() is None
    only_full = _sink(buffer_timeout_ms=-1)
    assert only_full.process([("a", 1)]) == [] and only_full.deadline() is None and only_full.holds()
    assert only_full.finish() == [("a", 1)]


def test_columns_stay_columns_when_joined() -> None:
    sink = _sink()
    sink.process(Columns((np.arange(3), np.arange(3) * 2.0)))
    sink.process(Columns((np.arange(3, 5), np.arange(3, 5) * 2.0)))
    out = sink.finish()
    assert isinstance(out, Columns)
    assert list(out.rows()) == [(i, i * 2.0) for i in range(5)]


def test_a_job_collects_every_record_of_each_subtask_in_order() -> None:
    n = 3 * COLLECT_MAX_RECORDS + 123  # several releases by count, then the end's rest
    out = Environment().from_collection(np.arange(n), parallelism=1).map_batches(lambda b: b * 2).execute_and_collect()
    assert [int(x) for x in out] == list(range(0, 2 * n, 2))


def test_a_job_collects_one_batch_as_map_batches_would_receive_it() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 2})
    images = np.arange(3000 * 4, dtype=np.int32).reshape(3000, 4)
    batch = env.from_collection(images, parallelism=2).map_batches(lambda b: b + 1, parallelism=2) \
        .execute_and_collect_batch()
    assert isinstance(batch, np.ndarray) and batch.dtype == np.int32 and batch.shape == (3000, 4)
    assert np.array_equal(batch[np.argsort(batch[:, 0])], images + 1)  # every row, once
    result = env.last_result
    assert len(result.collected) == 3000 and np.array_equal(result.collected[0], batch[0])

    pairs = Environment().from_collection([(1, "a"), (2, "b")], parallelism=1).execute_and_collect_batch()
    assert isinstance(pairs, tuple) and pairs[0].tolist() == [1, 2] and pairs[1].tolist() == ["a", "b"]
    objects = Environment().from_collection([{"a": 1}], parallelism=1).execute_and_collect_batch()
    assert objects == [{"a": 1}]
    nothing = Environment().from_collection([1, 2], parallelism=1).filter(lambda x: x > 5).execute_and_collect_batch()
    assert nothing == []
