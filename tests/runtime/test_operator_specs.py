"""Typed operator specs (issue 26.3): one frozen spec per kind of operator, checked once when
its operator joins the graph, run by the operator registered for its class; the facts of a
run travel in the ``ChainPlan`` and never go into the user's graph."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

import pytest

import accelflow.dataflow._specs as specs
from accelflow import AccelflowInternalError, ConfigError, Environment
from accelflow.dataflow import MapSpec, OperatorSpec, ReduceSpec, Sink, Transformation
from accelflow.runtime import ChainPlan
from accelflow.runtime.subtask._operators import ReduceOp, operator_for
from accelflow.scheduling import ResourceProfile


def _spec_classes() -> list[type[OperatorSpec]]:
    """Every kind of operator (the bases have no label), sorted by label."""
    found = [v for v in vars(specs).values() if isinstance(v, type) and issubclass(v, OperatorSpec) and v.kind]
    return sorted(found, key=lambda c: c.kind)


class _Discard(Sink[Any]):
    def write(self, chunk: Any) -> None:
        pass


def _node(spec: OperatorSpec, name: str = "op") -> Transformation:
    asks = {"gpu": 0.5} if isinstance(spec, specs._Resident) else {}  # a resident one asks for a device
    return Transformation(0, name, spec, 1, ResourceProfile.parse(asks, operator=name))


def _fields(node: Transformation) -> dict[str, Any]:
    """Each field of ``node``, copied (a dict written into later would differ)."""
    return {f.name: copy.copy(getattr(node, f.name)) for f in dataclasses.fields(node)}


def _example(cls: type[OperatorSpec]) -> OperatorSpec:
    values: dict[str, Any] = {"fn": abs, "path": "/tmp/out.txt", "sink": _Discard()}
    fields = {f.name: values[f.name] for f in dataclasses.fields(cls) if f.name in values}
    return cls(**fields)


def test_running_a_job_leaves_the_users_graph_as_it_was() -> None:
    """The JobManager wrote a streaming job's rolling reduce into the user's node; now the
    fact travels in the subtasks' plan, and the graph compares equal after the run."""
    env = Environment({"execution.runtime-mode": "streaming"})
    env.from_collection([("a", 1), ("b", 2), ("a", 3)]).key_by(lambda r: r[0]).sum(1).add_sink(print)
    nodes = list(env._transformations)  # the objects the graph is built of
    before = [_fields(t) for t in nodes]
    result = env.execute("rolling")
    assert [_fields(t) for t in nodes] == before
    assert result.operators["sum"]["records_out"] == 3  # rolling: a value per record


def test_the_facts_of_a_run_come_from_the_plan_not_the_spec() -> None:
    node = _node(ReduceSpec(lambda a, b: a + b), "sum")
    rolling = operator_for(node, ChainPlan("sum", [node], (), rolling=True))
    final = operator_for(node, ChainPlan("sum", [node], (), rolling=False))
    assert isinstance(rolling, ReduceOp) and rolling.rolling and not final.rolling  # type: ignore[attr-defined]


@pytest.mark.parametrize("cls", [c for c in _spec_classes() if c.inputs], ids=lambda c: c.__name__)
def test_every_kind_of_operator_has_its_runtime_operator(cls: type[OperatorSpec]) -> None:
    node = _node(_example(cls))
    op = operator_for(node, ChainPlan("chain", [node], (), rolling=False))
    assert op.node is node


def test_a_spec_without_a_runtime_operator_is_named() -> None:
    @dataclasses.dataclass(frozen=True, slots=True)
    class WindowSpec(OperatorSpec):
        kind = "window"

    node = _node(WindowSpec(), "windows")
    with pytest.raises(AccelflowInternalError, match=r"no runtime operator runs WindowSpec \(operator 'windows'\)"):
        operator_for(node, ChainPlan("chain", [node], (), rolling=False))


def test_specs_are_frozen_and_compare_by_value() -> None:
    spec = MapSpec(abs)
    with pytest.raises(dataclasses.FrozenInstanceError):
        spec.fn = str  # type: ignore[misc]
    assert spec == MapSpec(abs) and spec != MapSpec(str)
    assert {c.kind for c in _spec_classes()} == {
        "source", "map", "flat_map", "filter", "map_batches", "reduce",
        "sink_print", "sink_file", "sink_collect", "sink_user", "sink_to"}


def test_a_spec_is_checked_when_its_operator_joins_the_graph_naming_it() -> None:
    with pytest.raises(ConfigError, match=r"operator 'parse': expected a function or an object with a "
                                          r"map\(\) method, got int"):
        _node(MapSpec(42), "parse")
    with pytest.raises(ConfigError, match=r"operator 'batches': batch_size must be a positive integer, got 0"):
        Environment().from_sequence(1, 3).map_batches(len, batch_size=0, name="batches")


def test_what_varies_per_kind_is_read_from_the_spec() -> None:
    kinds = lambda facts: sorted({c.kind for c in _spec_classes() if facts(c)})  # noqa: E731 (resident ones share a kind)
    assert kinds(lambda c: c.one_to_one) == ["map", "map_batches"]
    assert kinds(lambda c: c.keeps_order) == ["filter", "flat_map", "map", "map_batches"]
    assert kinds(lambda c: c.keyed) == ["reduce"]
    assert kinds(lambda c: not c.inputs) == ["source"]
    assert all(c.kind.startswith("sink") == c.is_sink for c in _spec_classes())
    assert specs.MapBatchesSpec.method == "map_batch" and specs.UserSinkSpec.method == "invoke"
