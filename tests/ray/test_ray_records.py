"""Records of a class only the job's functions carry (one a job script or a function defines,
which cloudpickle rebuilds in a subtask and plain pickle cannot find by name) on the Ray target:
they cross actors through the relay and come back to ``execute_and_collect`` as the client's
own class, though Ray pickles them with its own copy of cloudpickle."""

from __future__ import annotations

import dataclasses
from typing import Any

from accelflow import Environment


def test_records_of_a_local_class_cross_actors_and_come_back_as_that_class(ray_conf: dict[str, Any]) -> None:
    @dataclasses.dataclass
    class Reading:  # defined in a function: no subtask can import it by name
        value: int

    env = Environment({**ray_conf, "parallelism.default": 2, "scheduler.placement-policy": "spread"})
    out = (env.from_sequence(1, 6).map(Reading, name="read").rebalance()
           .map(lambda r: Reading(r.value * 2), name="double").execute_and_collect())
    assert all(type(r) is Reading for r in out), [type(r) for r in out]
    assert sorted(r.value for r in out) == [2, 4, 6, 8, 10, 12]
