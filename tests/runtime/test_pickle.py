"""``accelflow.runtime.dumps``: user code pickled by value keeps the file it came from, so a
subtask's traceback names the user's file (cloudpickle 3.1.3 and later name it
``<dynamic-code>``)."""

from __future__ import annotations

import pickle
import traceback
from typing import Any

import cloudpickle

from accelflow.runtime import dumps


def _make_failing() -> Any:
    def check(x: int) -> int:
        helper = lambda y: 1 // y  # noqa: E731  (nested code, in co_consts)
        return helper(x)

    return check


def test_by_value_code_keeps_its_file_and_still_runs() -> None:
    fn = pickle.loads(dumps(_make_failing()))
    assert fn(1) == 1
    assert fn.__code__.co_filename == __file__
    nested = [c for c in fn.__code__.co_consts if hasattr(c, "co_filename")]
    assert nested and all(c.co_filename == __file__ for c in nested)


def test_a_traceback_names_the_users_file_and_line() -> None:
    fn = cloudpickle.loads(dumps(_make_failing()))
    try:
        fn(0)
    except ZeroDivisionError as exc:
        frames = traceback.extract_tb(exc.__traceback__)
    assert [(f.filename, f.name) for f in frames[-2:]] == [(__file__, "check"), (__file__, "<lambda>")]


def test_what_is_not_code_pickles_as_cloudpickle_does() -> None:
    value = {"a": [1, 2.5, "x"], "f": len}
    assert pickle.loads(dumps(value)) == value
    assert dumps(value) == cloudpickle.dumps(value)
