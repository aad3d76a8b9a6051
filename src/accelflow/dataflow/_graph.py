"""The logical graph a job script builds, and its translation into chains of operators.

Operators are chained into one task (one process per subtask) when data can flow between
them without leaving the process: single producer and consumer, forward partitioning, equal
parallelism, and either the same resource request or none (an operator that requests nothing,
e.g. a sink after a GPU operator, joins the chain and sees the TaskExecutor's whole device set,
as in Flink; only operators that requested a resource get the assigned devices).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from accelflow.scheduling import ResourceProfile

if TYPE_CHECKING:
    from accelflow.dataflow._functions import Source
    from accelflow.dataflow._sinks import Sink
    from accelflow.dataflow._specs import OperatorSpec

Partitioning = Literal["forward", "rebalance", "hash"]


@dataclass(slots=True)
class Transformation:
    """One operator as the user declared it: its name, its :class:`~._specs.OperatorSpec`
    (what kind of operator, with its arguments: checked here, once) and how it is placed
    and fed.

    Raises:
        ConfigError: a bad argument of the spec, naming the operator.
    """

    id: int
    name: str
    spec: OperatorSpec
    parallelism: int
    resources: ResourceProfile
    input: int | None = None
    partitioning: Partitioning = "forward"
    key_fn: Any = None

    def __post_init__(self) -> None:
        self.spec.check(f"operator {self.name!r}")
        self.spec.check_resources(self.resources, f"operator {self.name!r}")

    @property
    def kind(self) -> str:
        """The spec's label, e.g. ``"map"`` (for people: REST, checkpoints, messages)."""
        return self.spec.kind

    @property
    def is_sink(self) -> bool:
        return self.spec.is_sink

    @property
    def source(self) -> Source[Any] | None:
        """The :class:`Source` of a source operator, else None."""
        return self.spec.reads()

    @property
    def sink(self) -> Sink[Any] | None:
        """The two-phase-commit :class:`Sink` of a ``sink_to`` operator, else None."""
        return self.spec.writes()


@dataclass(slots=True)
class Chain:
    """Operators that run together in one subtask process, ``parallelism`` times."""

    id: int
    nodes: list[Transformation]
    input: int | None = None  # upstream chain id
    partitioning: Partitioning = "forward"
    key_fn: Any = None
    outputs: list[int] = field(default_factory=list)

    @property
    def name(self) -> str:
        return " -> ".join(n.name for n in self.nodes)

    @property
    def head(self) -> Transformation:
        return self.nodes[0]

    @property
    def parallelism(self) -> int:
        return self.nodes[0].parallelism

    @property
    def resources(self) -> ResourceProfile:
        return self.nodes[0].resources


@dataclass(slots=True)
class JobGraph:
    name: str
    transformations: list[Transformation]
    chains: list[Chain]

    @property
    def sources(self) -> list[Transformation]:
        """The source operators."""
        return [t for t in self.transformations if t.source is not None]

    @property
    def max_parallelism(self) -> int:
        return max(c.parallelism for c in self.chains)

    def upstream_senders(self, chain: Chain, index: int) -> int:
        """How many upstream subtasks send to subtask ``index`` of ``chain``."""
        if chain.input is None:
            return 0
        upstream = self.chains[chain.input]
        if chain.partitioning == "forward":
            return 1 if index < upstream.parallelism else 0
        return upstream.parallelism


def build_job_graph(name: str, transformations: list[Transformation]) -> JobGraph:
    """Chain the transformations. Forward edges between different parallelisms become
    rebalance edges (as in Flink)."""
    consumers: dict[int, list[int]] = {t.id: [] for t in transformations}
    for t in transformations:
        if t.input is not None:
            consumers[t.input].append(t.id)
            if t.partitioning == "forward" and transformations[t.input].parallelism != t.parallelism:
                t.partitioning = "rebalance"
    chain_of: dict[int, int] = {}
    chains: list[Chain] = []
    for t in transformations:
        up = t.input
        if (
            up is not None
            and len(consumers[up]) == 1
            and t.partitioning == "forward"
            and (not t.resources or chains[chain_of[up]].resources == t.resources)
        ):
            chain = chains[chain_of[up]]
            chain.nodes.append(t)
        else:
            chain = Chain(len(chains), [t])
            if up is not None:
                chain.input = chain_of[up]
                chain.partitioning = t.partitioning
                chain.key_fn = t.key_fn
                chains[chain.input].outputs.append(chain.id)
            chains.append(chain)
        chain_of[t.id] = chain.id
    return JobGraph(name, transformations, chains)
