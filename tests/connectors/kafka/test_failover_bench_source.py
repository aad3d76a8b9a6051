"""``benchmarks/failover.py --source kafka``: the topic it produces and the paced KafkaSource
that reads it (chunks as small as ``Numbers``' and exact positions, so a rollback replays from
the checkpoint's record)."""

from __future__ import annotations

import importlib.util
import threading
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from accelflow.connectors.kafka import EmbeddedKafkaBroker, _reader
from kafka_helpers import context

BENCHMARK = Path(__file__).parents[3] / "benchmarks" / "failover.py"


@pytest.fixture(scope="module")
def failover() -> ModuleType:
    spec = importlib.util.spec_from_file_location("failover_benchmark", BENCHMARK)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def feed(failover: ModuleType, broker: EmbeddedKafkaBroker) -> Any:
    """The benchmark's one feed of the module's broker (its topics are numbered per feed)."""
    return failover.KafkaFeed(broker)


def test_each_run_gets_a_fresh_topic_whose_partitions_hold_the_numbers_splits(
        failover: ModuleType, feed: Any, tmp_path: Path) -> None:
    first, second = feed.source(tmp_path), feed.source(tmp_path)
    assert first.topics != second.topics and first.group_id != second.group_id
    splits = second.create_splits(failover.PARALLELISM)
    assert [[(p.partition, p.next_offset, p.stop_offset) for p in s.positions] for s in splits] == [
        [(i, 0, failover.N // failover.PARALLELISM)] for i in range(failover.PARALLELISM)]


def test_the_paced_source_hands_on_small_chunks_and_resumes_at_the_exact_record(
        failover: ModuleType, feed: Any, tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_reader, "POLL_RECORDS", _reader.POLL_RECORDS)  # restored after the test
    (tmp_path / "killed").touch()  # no model subtask to wait for
    source = feed.source(tmp_path)
    split = source.create_splits(failover.PARALLELISM)[1]
    ctx = context(1, failover.PARALLELISM, threading.Event())
    read, snapshot, at = [], None, 0
    for i, chunk in enumerate(source.read_chunks(split, ctx)):
        assert len(chunk) <= failover.CHUNK
        read += list(chunk)
        if i == 4:  # (a poll that found nothing in time gives an empty chunk: count what was read)
            snapshot, at = source.snapshot_split(split, len(read), checkpoint_id=1), len(read)
    share = failover.N // failover.PARALLELISM
    assert read == list(range(share, 2 * share))  # partition 1 holds Numbers' split 1
    assert snapshot is not None and snapshot.positions[0].next_offset == at
    resumed = [r for chunk in source.read_chunks(snapshot, ctx) for r in chunk]
    assert resumed == list(range(share + at, 2 * share))
    source.close()
