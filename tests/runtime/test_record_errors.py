"""Clear errors for a record, key or result that cannot go on (review findings 5, 6, 7): each
names the operator, the culprit's type and the fix, without accelflow's or multiprocessing's
frames; a TypeError of the user's own code stays the user's."""

from __future__ import annotations

import dataclasses

import pytest

from accelflow import Environment, JobError
from calls_jobs import a_lock, by_tags, halves

TAGGED = [(["a"], 1), (["b"], 2), (["a"], 3)]


def _no_frames(error: BaseException) -> None:
    text = str(error)
    assert "Traceback" not in text and "multiprocessing" not in text and "accelflow/" not in text


def test_a_flat_map_result_that_is_not_iterable_names_the_operator_the_type_and_the_fix() -> None:
    env = Environment()
    env.from_sequence(1, 5).flat_map(lambda x: x, name="explode").print()
    with pytest.raises(TypeError) as caught:
        env.execute()
    assert isinstance(caught.value, JobError)
    message = str(caught.value)
    assert "operator 'explode' (flat_map): its function returned int for the record 1, which is not iterable" in message
    assert "return [value] for one record" in message
    _no_frames(caught.value)


def test_a_non_iterable_result_is_explained_with_ordered_collect_too() -> None:
    env = Environment()
    stream = env.from_collection([[1, 2], [3], 4]).flat_map(lambda x: x, name="spread")
    with pytest.raises(TypeError, match=r"operator 'spread' \(flat_map\): its function returned int for the record 4,"):
        stream.execute_and_collect(ordered=True)


def test_a_type_error_of_a_builtin_flat_map_function_stays_its_own() -> None:
    env = Environment()
    stream = env.from_collection(["ab", 5]).flat_map(list, name="letters")
    with pytest.raises(TypeError) as caught:
        stream.execute_and_collect()
    assert str(caught.value).endswith("TypeError: 'int' object is not iterable")  # list(5) raised it


def test_a_type_error_inside_a_flat_map_generator_stays_the_users() -> None:
    env = Environment()
    env.from_sequence(1, 5).flat_map(halves, name="halves").print()
    with pytest.raises(TypeError) as caught:
        env.execute()
    message = str(caught.value)
    assert "not iterable" not in message and "unsupported operand" in message
    assert "calls_jobs.py" in message and "in halves" in message  # the user's frame


@pytest.mark.parametrize("parallelism", [1, 2])  # 2: the key partitioner; 1: the keyed operator itself
def test_an_unhashable_key_names_the_key_selector_its_type_and_the_fix(parallelism: int) -> None:
    env = Environment({"parallelism.default": parallelism})
    env.from_collection(TAGGED).key_by(by_tags).sum(1, name="count").print()
    with pytest.raises(TypeError) as caught:
        env.execute()
    message = str(caught.value)
    assert "operator 'count': the key selector by_tags (calls_jobs.py:" in message
    assert "returned the list ['a'] for the record (['a'], 1)" in message and "return a tuple (tuple(key)) or a str" in message
    _no_frames(caught.value)


def test_a_type_error_of_the_reduce_function_itself_stays_the_users() -> None:
    env = Environment()
    env.from_collection([("a", "x"), ("a", 2)]).key_by(lambda r: r[0]).reduce(
        lambda a, b: (a[0], a[1] + b[1]), name="join").print()
    with pytest.raises(TypeError) as caught:
        env.execute()
    message = str(caught.value)
    assert "can only concatenate str" in message and "key" not in message.splitlines()[-1]


def test_an_unpicklable_record_on_an_edge_names_both_operators_the_type_and_the_fix() -> None:
    env = Environment({"parallelism.default": 2})
    env.from_sequence(1, 4).map(a_lock, name="locks").rebalance().map(lambda lock: 1, name="use").print()
    with pytest.raises(TypeError) as caught:
        env.execute()
    message = str(caught.value)
    assert "a record from operator 'locks' to operator 'use' (rebalance) cannot be sent" in message
    assert "it is a _thread.lock <unlocked" in message and "cannot pickle '_thread.lock' object" in message
    assert "in open() of the rich function" in message
    _no_frames(caught.value)


def test_records_of_a_local_class_cross_subtasks_and_come_back_as_that_class() -> None:
    """A class defined in a function (plain pickle: ``Can't pickle local object``) travels by
    value, as one of the job script's does (tests/cli/test_job_script_records.py)."""
    @dataclasses.dataclass
    class Reading:
        value: int

    env = Environment({"parallelism.default": 2})
    out = (env.from_sequence(1, 6).map(Reading, name="read").rebalance()
           .map(lambda r: Reading(r.value * 2), name="double").execute_and_collect())
    assert all(type(r) is Reading for r in out) and sorted(r.value for r in out) == [2, 4, 6, 8, 10, 12]
