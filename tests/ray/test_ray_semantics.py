"""The same semantics on Ray as on the local cluster: per-record round-robin (issue 12.2)
and typed errors that keep their class across the actor boundary (issue 12.4)."""

from __future__ import annotations

from collections import Counter
from typing import Any

import pytest
from runtime_jobs import RaiseTyped, SubtaskIndex

from accelflow import DataFormatError, DriverLoadError, Environment


def test_records_spread_one_by_one_across_actors(ray_conf: dict[str, Any]) -> None:
    env = Environment(ray_conf)
    out = env.from_collection(list(range(8))).map(SubtaskIndex, parallelism=4).execute_and_collect()
    assert Counter(i for i, _ in out) == {0: 2, 1: 2, 2: 2, 3: 2}


def test_a_subtasks_typed_error_keeps_its_class_on_ray(ray_conf: dict[str, Any]) -> None:
    env = Environment(ray_conf)
    env.from_sequence(1, 4).map(RaiseTyped(2), name="decode").print()
    with pytest.raises(DataFormatError) as caught:
        env.execute()
    assert caught.value.path == "/data/part-2.idx"


def test_an_actors_driver_load_error_keeps_its_class(ray_conf: dict[str, Any]) -> None:
    env = Environment(dict(ray_conf, **{
        "external-resources": "fpga", "external-resource.fpga.amount": 1,
        "external-resource.fpga.driver-factory.class": "no_such_module_for_accelflow:Factory",
    }))
    env.from_sequence(1, 2).print()
    with pytest.raises(DriverLoadError):
        env.execute()
