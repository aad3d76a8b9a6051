"""Job graph building: operator names, parallelism checks and chaining rules (no cluster)."""

from __future__ import annotations

import pytest

from accelflow import ConfigError, Environment
from accelflow.config import config_from
from accelflow.dataflow._graph import build_job_graph


def chains(env: Environment) -> list[list[str]]:
    graph = build_job_graph("t", list(env._transformations))
    return [[n.name for n in c.nodes] for c in graph.chains]


def test_default_names_are_unique_so_counts_do_not_merge() -> None:
    env = Environment()
    env.from_sequence(1, 3).map(abs).map(abs).map(abs, name="map").print()
    assert chains(env) == [["sequence", "map", "map-2", "map-3", "print"]]


def test_parallelism_zero_is_refused_on_every_source() -> None:
    env = Environment()
    with pytest.raises(ConfigError, match="parallelism must be a positive integer, got 0"):
        env.from_collection([1, 2], parallelism=0)
    with pytest.raises(ConfigError, match="got 0"):
        env.from_sequence(1, 2, parallelism=0)


def test_operators_that_request_nothing_chain_after_a_device_operator() -> None:
    env = Environment({"external-resources": "gpu", "external-resource.gpu.amount": 1})
    (env.from_sequence(1, 4).map(abs, name="gpu-op", resources={"gpu": 1})
     .map(str, name="format").print())
    assert chains(env) == [["sequence"], ["gpu-op", "format", "print"]]


def test_a_different_request_starts_a_new_chain() -> None:
    env = Environment({"external-resources": "gpu", "external-resource.gpu.amount": 1})
    (env.from_sequence(1, 4).map(abs, name="a", resources={"gpu": 1})
     .map(abs, name="b", resources={"gpu": 0.5}).print())
    assert chains(env) == [["sequence"], ["a"], ["b", "print"]]


def test_restart_delay_may_be_zero_but_not_negative() -> None:
    assert config_from(values={"restart-strategy.fixed-delay.delay": 0}).values[
        "restart-strategy.fixed-delay.delay"] == 0.0
    with pytest.raises(ConfigError, match="restart-strategy.fixed-delay.delay"):
        config_from(values={"restart-strategy.fixed-delay.delay": "-1 s"})
