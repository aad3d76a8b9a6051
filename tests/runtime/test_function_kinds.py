"""What a user function may be (review finding 2): Python's types and other classes that are
no function class are called per record, as Python's ``map``/``filter`` and PyFlink call them;
function classes are still built once per subtask."""

from __future__ import annotations

from typing import Any

import pytest

from accelflow import Environment
from calls_jobs import Reading, TagPlain, TagRich

NUMBERS = [3, -2, 0, 41, 7]
WORDS = ["12", "-3", "0", "ab"]


@pytest.mark.parametrize(("kind", "function", "records"), [
    ("map", str, NUMBERS),
    ("map", float, NUMBERS),
    ("map", int, WORDS[:3]),
    ("map", tuple, WORDS),
    ("map", list, WORDS),
    ("map", Reading, NUMBERS),
    ("filter", bool, NUMBERS),
    ("flat_map", list, WORDS),
])
def test_types_as_functions_give_what_pythons_builtins_give(kind: str, function: Any, records: list[Any]) -> None:
    env = Environment()
    stream = getattr(env.from_collection(records), kind)(function)
    out = stream.execute_and_collect()
    expected = {"map": lambda: list(map(function, records)), "filter": lambda: list(filter(function, records)),
                "flat_map": lambda: [y for x in records for y in function(x)]}[kind]()
    assert out == expected


@pytest.mark.parametrize("function", [TagRich, TagPlain])
def test_function_classes_are_built_once_per_subtask(function: type) -> None:
    env = Environment({"parallelism.default": 2})
    out = env.from_sequence(1, 40).rebalance().map(function).execute_and_collect()
    assert sorted(value for value, _, _ in out) == list(range(1, 41))
    instances = {(pid, instance) for _, pid, instance in out}
    assert len(instances) == 2 and len({pid for pid, _ in instances}) == 2  # one per subtask process
