"""Per-split watermarks (issue 30, item 1), as Flink's ``SourceOperator`` makes them with a
``WatermarkOutputMultiplexer`` (flink-core's WatermarkOutputMultiplexerTest and
flink-streaming-java's SourceOperatorSplitWatermarkAlignmentTest / the Kafka source's
"per-partition watermarks"): one generator per split, the minimum over the splits not idle,
never going back; a source that names no split keeps the one watermark per subtask."""

from __future__ import annotations

import pickle
from datetime import timedelta
from typing import Any

import numpy as np

from accelflow.dataflow import SplitTagged, split_tagged, stamped, untagged
from accelflow.dataflow.eventtime import MIN_TIMESTAMP, WatermarkStrategy
from accelflow.runtime.subtask._watermarks import SplitWatermarks, TimestampsAndWatermarks, Watermark, WatermarkStatus

IDLE, ACTIVE = WatermarkStatus.IDLE, WatermarkStatus.ACTIVE
PARTITIONS = (("t", 0), ("t", 1))


def generator(delay_ms: int = 10, idle_ms: int | None = None) -> SplitWatermarks:
    strategy = WatermarkStrategy.for_bounded_out_of_orderness(timedelta(milliseconds=delay_ms)) \
        .with_timestamp_assigner(lambda v, ts: v)
    if idle_ms is not None:
        strategy = strategy.with_idleness(timedelta(milliseconds=idle_ms))
    return SplitWatermarks(strategy, "assign")


def read(gen: SplitWatermarks, records: list[tuple[int, int]], splits: tuple[Any, ...] = PARTITIONS) -> list[Any]:
    """``records`` as ``(split index, timestamp)`` through ``gen`` as one source chunk."""
    stamps, events = gen.process_chunk([ts for _, ts in records], None, ([i for i, _ in records], splits))
    assert stamps.tolist() == [ts for _, ts in records]
    return events


def test_the_watermark_is_the_minimum_over_the_splits() -> None:
    """Partition 0 runs 30 s ahead of partition 1 in the same chunk: the watermark is
    partition 1's (one generator over both would say partition 0's, 30 s later)."""
    gen = generator()
    read(gen, [(0, 31_000), (1, 1_000), (0, 30_500), (1, 1_200)])
    assert gen.on_periodic_emit(0) == [Watermark(1_200 - 10 - 1)]
    read(gen, [(1, 5_000)])
    assert gen.on_periodic_emit(0) == [Watermark(5_000 - 11)]
    read(gen, [(1, 40_000)])  # partition 1 overtakes: partition 0 holds it now
    assert gen.on_periodic_emit(0) == [Watermark(31_000 - 11)]


def test_a_split_without_records_yet_holds_the_watermark() -> None:
    """Both partitions are named by the source although only partition 0 has records: as a
    split assigned to a Flink reader, partition 1 has no watermark yet, so none is sent."""
    gen = generator()
    read(gen, [(0, 31_000), (0, 32_000)])
    assert gen.on_periodic_emit(0) == [] and gen.current_watermark() == MIN_TIMESTAMP
    read(gen, [(1, 2_000)])
    assert gen.on_periodic_emit(0) == [Watermark(2_000 - 11)]


def test_an_idle_split_is_excluded_after_the_idle_timeout() -> None:
    """Partition 1 stops; after the 100 ms idle timeout it no longer counts and the watermark
    follows partition 0; when it sends again behind, it holds the watermark (never back)
    until it catches up. The subtask stays active: partition 0 still sends."""
    gen = generator(idle_ms=100)
    read(gen, [(0, 30_000), (1, 1_000)])
    assert gen.on_periodic_emit(0) == [Watermark(1_000 - 11)]
    for now in (50, 120):
        read(gen, [(0, 30_000 + now)])
        assert gen.on_periodic_emit(now) == []  # partition 1: inactive since 0, not yet idle
    read(gen, [(0, 30_200)])
    assert gen.on_periodic_emit(200) == [Watermark(30_200 - 11)]  # partition 1 is idle
    assert read(gen, [(1, 1_100)]) == []  # active again (the subtask never was idle)
    assert gen.on_periodic_emit(250) == [] and gen.current_watermark() == 1_100 - 11
    read(gen, [(1, 30_500), (0, 30_400)])
    assert gen.on_periodic_emit(300) == [Watermark(30_400 - 11)]  # partition 0's is the minimum again


def test_the_subtask_is_idle_when_every_split_is() -> None:
    gen = generator(idle_ms=100)
    read(gen, [(0, 5_000), (1, 6_000)])
    assert gen.on_periodic_emit(0) == [Watermark(5_000 - 11)]
    assert gen.on_periodic_emit(50) == []
    assert gen.on_periodic_emit(200) == [IDLE]
    assert read(gen, [(1, 7_000)]) == [ACTIVE]


def test_a_split_assigned_later_does_not_move_the_watermark_back() -> None:
    """A third partition comes later (a chunk naming it) with records far behind: the
    watermark sent stays, the new partition holds it until it catches up."""
    gen = generator()
    read(gen, [(0, 20_000), (1, 21_000)])
    assert gen.on_periodic_emit(0) == [Watermark(20_000 - 11)]
    three = (*PARTITIONS, ("t", 2))
    read(gen, [(2, 3_000), (0, 25_000)], three)
    assert gen.on_periodic_emit(0) == [] and gen.current_watermark() == 3_000 - 11
    read(gen, [(2, 19_000)], three)
    assert gen.on_periodic_emit(0) == []  # 18 989: still below the 19 989 sent
    read(gen, [(2, 40_000), (1, 24_000)], three)
    assert gen.on_periodic_emit(0) == [Watermark(24_000 - 11)]


def test_a_split_no_longer_read_stops_counting() -> None:
    """A chunk names every split being read: one no longer named is done (Flink releases a
    finished split's output), so the lagging partition 1 stops holding the watermark."""
    gen = generator()
    read(gen, [(0, 20_000), (1, 2_000)])
    assert gen.on_periodic_emit(0) == [Watermark(2_000 - 11)]
    read(gen, [(0, 21_000)], (("t", 0),))
    assert gen.on_periodic_emit(0) == [Watermark(21_000 - 11)]

def test_records_of_no_split_keep_one_watermark_per_subtask() -> None:
    """A source that names no split: the largest timestamp of all, as before."""
    gen, single = generator(), TimestampsAndWatermarks(generator().strategy, "assign")
    for g in (gen, single):
        g.process_chunk([31_000, 1_000], None)
    assert gen.on_periodic_emit(0) == single.on_periodic_emit(0) == [Watermark(31_000 - 11)]


def test_a_restored_generator_sends_nothing_past_the_lagging_split() -> None:
    """Splits are not checkpointed (Flink regenerates them too): the snapshot keeps the
    watermark sent, so until the restored subtask's first chunk names its splits again it
    sends nothing past it, and then the lagging split holds it as before."""
    gen = generator()
    read(gen, [(0, 31_000), (1, 1_000)])
    assert gen.on_periodic_emit(0) == [Watermark(1_000 - 11)]
    restored = generator()
    restored.restore([pickle.loads(pickle.dumps(gen.snapshot()))])
    assert restored.on_periodic_emit(0) == [] and restored.current_watermark() == 1_000 - 11
    read(restored, [(0, 32_000)])
    assert restored.on_periodic_emit(0) == []
    read(restored, [(1, 2_000)])
    assert restored.on_periodic_emit(0) == [Watermark(2_000 - 11)]


def test_split_tagged_chunks_keep_their_splits_when_cut_or_pickled() -> None:
    chunk = split_tagged(stamped(["x", "y", "z"], [5, 9, 7]), [0, 1, 0], PARTITIONS)
    for part in (chunk[1:], pickle.loads(pickle.dumps(chunk))[1:]):
        assert isinstance(part, SplitTagged)
        assert part.rows.tolist() == [1, 0] and part.splits == PARTITIONS
        assert part.data.timestamps.tolist() == [9, 7] and list(part) == ["y", "z"]
    assert untagged(chunk).timestamps.tolist() == [5, 9, 7] and untagged(["x"]) == ["x"]
    assert isinstance(chunk.rows, np.ndarray) and chunk.rows.dtype == np.int64
