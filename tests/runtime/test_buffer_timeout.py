"""``execution.buffer-timeout`` (Flink's key): how long a record may wait in a partly filled
chunk. 0 sends every record at once, -1 only full chunks, and a source that pauses sends
what it has at once whatever the timeout."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from event_jobs import ChunkSizes, PacedSource

from accelflow import ConfigError, Environment
from accelflow.config import config_from
from accelflow.dataflow import group_records


def _paused(records: list[Any], pause_s: float) -> Iterator[Any]:
    for record in records:
        time.sleep(pause_s)
        yield record


def test_group_records_follows_the_buffer_timeout() -> None:
    assert [len(c) for c in group_records(range(5), size=1024, latency_s=0)] == [1] * 5
    assert [len(c) for c in group_records(range(5), size=1024, latency_s=-1)] == [5]
    assert [len(c) for c in group_records(range(2500), size=1024, latency_s=-1)] == [1024, 1024, 452]


def test_records_that_come_with_pauses_between_them_leave_at_once() -> None:
    """Waiting for the next record of a source that pauses adds latency and batches nothing."""
    assert [len(c) for c in group_records(_paused([1, 2, 3], 0.005), size=1024, latency_s=60)] == [1, 1, 1]


@pytest.mark.parametrize(("value", "seconds"), [(0, 0.0), ("0", 0.0), (-1, -1.0), ("-1 ms", -1.0),
                                                 ("5 ms", 0.005), ("100 ms", 0.1), ("1 s", 1.0)])
def test_the_key_takes_flinks_values(value: Any, seconds: float) -> None:
    assert config_from(values={"execution.buffer-timeout": value}).values["execution.buffer-timeout"] == seconds


def test_a_number_without_its_unit_is_refused_naming_the_key() -> None:
    with pytest.raises(ConfigError) as caught:
        config_from(values={"execution.buffer-timeout": 100})
    assert caught.value.keys == ("execution.buffer-timeout",)
    assert "expected a duration with its unit such as '100 ms', or 0 (flush every record) or -1" in str(caught.value)


@pytest.mark.parametrize(("timeout", "sizes"), [("0", [1] * 6), ("-1", [6])])
def test_the_timeout_reaches_the_sources_of_a_job(tmp_path: Path, timeout: str, sizes: list[int]) -> None:
    """A user source giving six records at once: 0 sends six chunks, -1 one (the end closes it)."""
    out = tmp_path / "sizes"
    env = Environment({"execution.buffer-timeout": timeout})
    env.from_source(PacedSource(list(range(6)), 0.0)).rebalance().sink_to(ChunkSizes(str(out)))
    env.execute()
    assert [int(n) for n in out.read_text().split()] == sizes


def test_set_buffer_timeout_is_flinks_method() -> None:
    env = Environment().set_buffer_timeout(0)
    assert env.config.get_optional("execution.buffer-timeout") == 0.0
    with pytest.raises(ConfigError, match="expected milliseconds >= 0, or -1, got int"):
        env.set_buffer_timeout(-7)
