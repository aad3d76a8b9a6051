"""``execute_and_collect(ordered=True)`` (issue 25.18): the records come back in the input's
order, as Spark's ``collect()`` after a ``map``, however ``rebalance`` spread them over the
subtasks; where there is no input order to keep, a ConfigError says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import pytest
from runtime_jobs import Paced
from test_device_stage import _log_lines, fake_cupy  # noqa: F401  (a fixture)

from accelflow import ConfigError, Environment, JobError
from accelflow.connectors import ArraySource
from accelflow.dataflow import Columns


def _times_ten(x: Any) -> Any:
    return x * 10


def _env(parallelism: int) -> Environment:
    return Environment({"parallelism.default": parallelism})


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
def test_a_rebalanced_map_collects_in_input_order_with_the_option(parallelism: int) -> None:
    expected = [x * 10 for x in range(1, 2001)]
    plain = _env(parallelism).from_sequence(1, 2000, parallelism=1).rebalance().map(_times_ten)
    ordered = _env(parallelism).from_sequence(1, 2000, parallelism=1).rebalance().map(_times_ten)
    unordered = plain.execute_and_collect()
    assert sorted(unordered) == expected
    assert (unordered == expected) == (parallelism == 1)  # subtask order: what the option fixes
    assert ordered.execute_and_collect(ordered=True) == expected


@pytest.mark.parametrize("parallelism", [1, 2, 3, 4])
def test_array_rows_through_rebalanced_batches_come_back_as_the_input(parallelism: int) -> None:
    rows = np.arange(30_000, dtype=np.float32).reshape(10_000, 3)
    out = (_env(parallelism).from_collection(rows, parallelism=max(1, parallelism - 1)).rebalance()
           .map_batches(lambda b: b * 2, batch_size=333).execute_and_collect_batch(ordered=True))
    assert isinstance(out, np.ndarray) and np.array_equal(out, rows * 2)


def test_filter_and_flat_map_keep_the_order_of_what_they_keep_and_give() -> None:
    records = [f"r{i}" for i in range(3000)]
    out = (_env(3).from_collection(records, parallelism=2).rebalance()
           .filter(lambda r: int(r[1:]) % 3 != 0)
           .flat_map(lambda r: [r, r.upper()], parallelism=2).rebalance()
           .map(len, parallelism=4).execute_and_collect(ordered=True))
    kept = [r for r in records if int(r[1:]) % 3 != 0]
    assert out == [len(s) for r in kept for s in (r, r.upper())]
    words = (_env(3).from_collection(records, parallelism=1).rebalance()
             .flat_map(lambda r: [r, r.upper()]).execute_and_collect(ordered=True))
    assert words == [s for r in records for s in (r, r.upper())]


def test_tuple_records_keep_their_columns_and_their_order() -> None:
    images, labels = np.arange(8000).reshape(4000, 2), np.arange(4000) % 10
    env = _env(3)
    stream = env.from_source(ArraySource([images, labels]), parallelism=2).rebalance()

    def scale(batch: Any) -> Any:  # gets the columns as without ordered=True
        pixels, digits = batch
        return pixels * 2, digits

    pixels, digits = stream.map_batches(scale, batch_size=100).execute_and_collect_batch(ordered=True)
    assert np.array_equal(pixels, images * 2) and np.array_equal(digits, labels)


def test_device_auto_without_a_gpu_keeps_the_order() -> None:
    out = (_env(2).from_sequence(0, 2999, parallelism=1).rebalance()
           .map_batches(_times_ten, batch_size=64, device="auto").execute_and_collect(ordered=True))
    assert out == [x * 10 for x in range(3000)]


@pytest.mark.slow
def test_batches_in_flight_on_the_fake_gpu_keep_their_positions(fake_cupy: Path) -> None:  # noqa: F811
    out = (_env(2).from_sequence(0, 2999, parallelism=1).rebalance()
           .map_batches(_times_ten, batch_size=50, device="cuda", prefetch=3)
           .execute_and_collect(ordered=True))
    assert out == [x * 10 for x in range(3000)]
    assert sum(line.startswith("set ") for line in _log_lines(fake_cupy)) >= 3000 // 50


def test_forward_chains_are_in_input_order_already() -> None:
    expected = [x * 10 for x in range(1, 3001) if x % 2]
    for ordered in (False, True):  # each subtask collects a contiguous part of the input
        stream = _env(3).from_sequence(1, 3000).map(_times_ten).filter(lambda x: x % 20)
        assert stream.execute_and_collect(ordered=ordered) == expected


@pytest.mark.parametrize(("build", "says"), [
    (lambda env: env.from_sequence(1, 9).key_by(lambda x: x % 2).sum(),
     "operator 'sum' (reduce): the input's order is not defined after it (key_by groups records by key)"),
    (lambda env: env.from_sequence(1, 9).key_by(lambda x: x % 2).map(abs),
     "operator 'map' (map): the input's order is not defined after it (key_by groups records by key)"),
    (lambda env: env.from_source(Paced(10), name="paced").map(abs),
     "source 'paced' (Paced) does not know each record's position in its input: ordered=True "
     "needs from_collection, from_sequence or an IdxSource"),
])
def test_streams_with_no_input_order_are_refused_naming_the_operator(build: Any, says: str) -> None:
    with pytest.raises(ConfigError) as caught:
        build(_env(2)).execute_and_collect(ordered=True)
    assert caught.value.keys == ("execute_and_collect(ordered=True)",)
    assert says in str(caught.value)


def test_a_stream_that_also_feeds_another_operator_is_refused() -> None:
    env = _env(2)
    doubled = env.from_sequence(1, 9, parallelism=1).rebalance().map(_times_ten, name="double")
    doubled.print(name="show")
    with pytest.raises(ConfigError, match="operator 'show' also reads 'double': ordered=True needs a "
                                          "stream that feeds only the collect"):
        doubled.execute_and_collect(ordered=True)


def test_map_batches_that_changes_the_number_of_records_fails_naming_it() -> None:
    stream = _env(2).from_sequence(1, 100, parallelism=1).rebalance().map_batches(
        lambda b: b[:1], name="first only", batch_size=10)
    with pytest.raises(JobError, match=r"operator 'first only' \(map_batches\) returned 1 outputs for a "
                                       r"batch of 10 records: execute_and_collect\(ordered=True\)"):
        stream.execute_and_collect(ordered=True)


def test_ordered_must_be_a_bool() -> None:
    with pytest.raises(ConfigError, match=r"ordered must be True or False, got str \('yes'\)"):
        _env(1).from_sequence(1, 3).execute_and_collect(ordered="yes")  # type: ignore[arg-type]


def test_columns_of_positioned_records_are_sorted_as_columns() -> None:
    from accelflow.dataflow import Positioned, in_order

    chunks = [Positioned(np.array([[2], [0]]), Columns((np.array([20, 0]), np.array(["c", "a"])))),
              Positioned(np.array([[1]]), Columns((np.array([10]), np.array(["b"]))))]
    (out,) = in_order(chunks)
    assert isinstance(out, Columns) and [list(c) for c in out.columns()] == [[0, 10, 20], ["a", "b", "c"]]
    assert in_order([]) == []
