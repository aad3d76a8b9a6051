"""Records spread one by one (issue 12.2): rebalance, explicit or between operators of
different parallelism, is round-robin per record as in Flink, whatever the chunking."""

from __future__ import annotations

from collections import Counter

import numpy as np

from accelflow import Environment
from runtime_jobs import SubtaskIndex


def test_eight_records_into_four_subtasks_give_two_each() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 4})
    out = env.from_collection(list(range(8))).map(SubtaskIndex, parallelism=4).execute_and_collect()
    assert Counter(i for i, _ in out) == {0: 2, 1: 2, 2: 2, 3: 2}
    assert sorted(v for _, v in out) == list(range(8))


def test_explicit_rebalance_between_equal_parallelisms_spreads_per_record() -> None:
    env = Environment({"taskmanager.numberOfTaskSlots": 4})
    out = (env.from_collection(list(range(8))).map(lambda x: x, parallelism=4).rebalance()
           .map(SubtaskIndex, parallelism=4).execute_and_collect())
    assert Counter(i for i, _ in out) == {0: 2, 1: 2, 2: 2, 3: 2}


def test_array_rows_spread_per_row_and_keep_each_subtasks_order() -> None:
    rows = np.arange(10 * 3).reshape(10, 3)
    env = Environment({"taskmanager.numberOfTaskSlots": 2})
    out = env.from_collection(rows).map(SubtaskIndex, parallelism=2).execute_and_collect()
    by_subtask: dict[int, list[int]] = {}
    for i, row in out:
        by_subtask.setdefault(i, []).append(int(row[0]))
    assert {i: len(v) for i, v in by_subtask.items()} == {0: 5, 1: 5}
    assert all(v == sorted(v) for v in by_subtask.values())
    assert sorted(x for v in by_subtask.values() for x in v) == list(range(0, 30, 3))


def test_a_local_environment_sizes_its_slots_to_the_job() -> None:
    """Flink's local environment: no ``taskmanager.numberOfTaskSlots`` set, parallelism 4 runs."""
    out = Environment().from_sequence(1, 8).map(SubtaskIndex, parallelism=4).execute_and_collect()
    assert Counter(i for i, _ in out) == {0: 2, 1: 2, 2: 2, 3: 2}
