"""The logical graph a job script builds, and its translation into chains of operators.

An operator reads any number of inputs (:class:`Edge`: an upstream operator, how its records
are partitioned, which of its outputs: the main one or a side output, and which input of this
operator they feed: 0, or 1 for the second stream of ``connect`` and ``interval_join``).
``union`` is an operator with several edges into input 0.

Operators are chained into one task (one process per subtask) when data can flow between
them without leaving the process: one input, forward partitioning of the upstream's main
output, which nothing else reads, equal parallelism, and either the same resource request
or none (an operator that requests nothing, e.g. a sink after a GPU operator, joins the
chain and sees the TaskExecutor's whole device set, as in Flink; only operators that
requested a resource get the assigned devices). An operator with two inputs (or a union)
starts a chain, as in Flink.

Example:
    >>> from accelflow.dataflow import MapSpec, SourceSpec
    >>> from accelflow.connectors import SequenceSource
    >>> from accelflow.scheduling import ResourceProfile
    >>> none = ResourceProfile.parse({}, operator="x")
    >>> ts = [Transformation(0, "src", SourceSpec(SequenceSource(1, 3)), 1, none),
    ...       Transformation(1, "double", MapSpec(abs), 1, none, [Edge(0)])]
    >>> [[n.name for n in c.nodes] for c in build_job_graph("job", ts).chains]
    [['src', 'double']]
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Literal

from accelflow.scheduling import ResourceProfile

if TYPE_CHECKING:
    from accelflow.dataflow._functions import Source
    from accelflow.dataflow._sinks import Sink
    from accelflow.dataflow._specs import OperatorSpec

#: how an edge spreads its records over the next operator's subtasks (Flink's partitioners)
Partitioning = Literal["forward", "rebalance", "hash", "shuffle", "rescale", "broadcast", "custom"]

#: Flink's default max parallelism for small jobs, and its upper bound
DEFAULT_MAX_PARALLELISM = 128
UPPER_BOUND_MAX_PARALLELISM = 1 << 15


def default_max_parallelism(parallelism: int) -> int:
    """Flink's ``computeDefaultMaxParallelism``: 1.5 x the parallelism rounded up to a power
    of two, at least 128 and at most 32768 (the number of key groups).

    Example:
        >>> default_max_parallelism(4), default_max_parallelism(100)
        (128, 256)
    """
    target = parallelism + parallelism // 2
    power = 1 << max(0, (target - 1).bit_length())
    return min(max(power, DEFAULT_MAX_PARALLELISM), UPPER_BOUND_MAX_PARALLELISM)


@dataclass(frozen=True, slots=True)
class Edge:
    """One input of an operator: records of operator ``source`` (its main output, or its side
    output ``side``), spread by ``partitioning`` (``key_fn`` for ``hash`` and ``custom``,
    ``partitioner(key, n)`` for ``custom``), into input ``input_index`` of the operator."""

    source: int
    partitioning: Partitioning = "forward"
    key_fn: Any = None
    partitioner: Any = None
    side: str | None = None
    input_index: int = 0


@dataclass(slots=True)
class Transformation:
    """One operator as the user declared it: its name, its :class:`~._specs.OperatorSpec`
    (what kind of operator, with its arguments: checked here, once), how it is placed
    (``parallelism``, ``resources``, ``max_parallelism``: the number of key groups of its
    keyed state) and fed (``inputs``); ``uid`` names its state in checkpoints when given.

    Raises:
        ConfigError: a bad argument of the spec, naming the operator.
    """

    id: int
    name: str
    spec: OperatorSpec
    parallelism: int
    resources: ResourceProfile
    inputs: list[Edge] = field(default_factory=list)
    uid: str | None = None
    max_parallelism: int | None = None

    def __post_init__(self) -> None:
        self.spec.check(f"operator {self.name!r}")
        self.spec.check_resources(self.resources, f"operator {self.name!r}")

    @property
    def kind(self) -> str:
        """The spec's label, e.g. ``"map"`` (for people: REST, checkpoints, messages)."""
        return self.spec.kind

    @property
    def state_name(self) -> str:
        """What its state is stored under in a checkpoint: its ``uid``, else its name."""
        return self.uid or self.name

    @property
    def input(self) -> int | None:
        """The operator its first input reads (None for a source)."""
        return self.inputs[0].source if self.inputs else None

    @property
    def partitioning(self) -> Partitioning:
        return self.inputs[0].partitioning if self.inputs else "forward"

    @property
    def key_fn(self) -> Any:
        """The key selector of its first input (of a keyed stream), else None."""
        return self.inputs[0].key_fn if self.inputs else None

    def key_fn_of(self, input_index: int) -> Any:
        """The key selector of input ``input_index`` (``key_by`` before it), else None."""
        return next((e.key_fn for e in self.inputs if e.input_index == input_index
                     and e.partitioning == "hash"), None)

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


@dataclass(frozen=True, slots=True)
class ChainInput:
    """An edge into a chain's head: from node ``node`` (its index) of chain ``chain``."""

    chain: int
    node: int
    edge: Edge


@dataclass(slots=True)
class Chain:
    """Operators that run together in one subtask process, ``parallelism`` times."""

    id: int
    nodes: list[Transformation]
    inputs: list[ChainInput] = field(default_factory=list)

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

    @property
    def input(self) -> int | None:
        """The first upstream chain (None for a source chain)."""
        return self.inputs[0].chain if self.inputs else None


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

    def outputs_of(self, chain: Chain) -> list[tuple[Chain, ChainInput]]:
        """The edges leaving ``chain``: each consumer chain with its input."""
        return [(c, i) for c in self.chains for i in c.inputs if i.chain == chain.id]

    def upstream_senders(self, chain: Chain, index: int) -> int:
        """How many upstream subtasks send to subtask ``index`` of ``chain``."""
        total = 0
        for i in chain.inputs:
            up = self.chains[i.chain].parallelism
            if i.edge.partitioning == "forward":
                total += 1 if index < up else 0
            elif i.edge.partitioning == "rescale":
                total += sum(1 for u in range(up) if index in rescale_targets(u, up, chain.parallelism))
            else:
                total += up
        return total


def rescale_targets(index: int, parallelism: int, downstream: int) -> range:
    """The downstream subtasks subtask ``index`` of ``parallelism`` sends to on a ``rescale``
    edge (Flink's ``RescalePartitioner``: each upstream subtask feeds its own contiguous
    share of the downstream ones, round-robin; several share one when there are fewer).

    Example:
        >>> list(rescale_targets(1, 2, 4)), list(rescale_targets(3, 4, 2))
        ([2, 3], [1])
    """
    if downstream >= parallelism:
        return range(index * downstream // parallelism, (index + 1) * downstream // parallelism)
    first = index * downstream // parallelism
    return range(first, first + 1)


def build_job_graph(name: str, transformations: list[Transformation]) -> JobGraph:
    """Chain the transformations. Forward edges between different parallelisms become
    rebalance edges (as in Flink)."""
    main_consumers: dict[int, int] = {t.id: 0 for t in transformations}
    for t in transformations:
        for n, e in enumerate(t.inputs):
            if e.side is None:
                main_consumers[e.source] += 1
            if e.partitioning == "forward" and transformations[e.source].parallelism != t.parallelism:
                t.inputs[n] = Edge(e.source, "rebalance", e.key_fn, e.partitioner, e.side, e.input_index)
    chain_of: dict[int, int] = {}
    place: dict[int, int] = {}  # transformation id -> its index in its chain
    chains: list[Chain] = []
    for t in transformations:
        if _chains_to_upstream(t, main_consumers, chains, chain_of):
            chain = chains[chain_of[t.inputs[0].source]]
            chain.nodes.append(t)
        else:
            chain = Chain(len(chains), [t], [ChainInput(chain_of[e.source], place[e.source], e) for e in t.inputs])
            chains.append(chain)
        chain_of[t.id] = chain.id
        place[t.id] = len(chain.nodes) - 1
    return JobGraph(name, transformations, chains)


def _chains_to_upstream(t: Transformation, main_consumers: dict[int, int], chains: list[Chain],
                        chain_of: dict[int, int]) -> bool:
    if len(t.inputs) != 1 or t.spec.inputs != 1:
        return False
    e = t.inputs[0]
    return (e.partitioning == "forward" and e.side is None and e.input_index == 0
            and main_consumers[e.source] == 1
            and (not t.resources or chains[chain_of[e.source]].resources == t.resources))
