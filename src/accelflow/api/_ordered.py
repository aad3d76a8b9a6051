"""``execute_and_collect(ordered=True)``: which streams have an input order to keep, and
making their source read positioned chunks (see :mod:`accelflow.dataflow._positions`)."""

from __future__ import annotations

from dataclasses import replace

from accelflow._errors import ConfigError
from accelflow.dataflow import Partitioning, Positions, SourceSpec, Transformation


def keep_order(transformations: list[Transformation], last: int, partitioning: Partitioning) -> bool:
    """Make the stream that ends at operator ``last`` keep its input order for a collect
    sink partitioned by ``partitioning``: whether positions must travel with the records
    (some edge moves them between subtasks; without one each subtask collects a
    contiguous part of the input, in order, and subtask order is input order already). The
    source then reads positioned chunks (a copy of it replaces it).

    Raises:
        ConfigError: an operator, partitioning or source with no input order to keep, or an
            operator of the stream that also feeds another one; names it.
    """
    where = "execute_and_collect(ordered=True)"
    lineage = [transformations[last]]
    while (up := lineage[-1].input) is not None:
        lineage.append(transformations[up])
    *operators, source = lineage
    for t in operators:
        if not t.spec.keeps_order or t.partitioning == "hash":
            after = "key_by groups records by key" if t.partitioning == "hash" else f"{t.kind} has no such order"
            raise ConfigError(f"operator {t.name!r} ({t.kind}): the input's order is not defined "
                              f"after it ({after}); collect without ordered=True and sort the "
                              "records yourself", key=where)
    if not isinstance(source.source, Positions):
        raise ConfigError(f"source {source.name!r} ({type(source.source).__name__}) does not know each "
                          "record's position in its input: ordered=True needs from_collection, "
                          "from_sequence or an IdxSource", key=where)
    moved = partitioning == "rebalance" or any(
        t.partitioning == "rebalance" or t.parallelism != up.parallelism
        for t, up in zip(operators, lineage[1:]))
    if not moved:
        return False
    ids = {t.id for t in lineage}
    for t in transformations:
        if t.input in ids and t.id not in ids:
            raise ConfigError(f"operator {t.name!r} also reads {transformations[t.input].name!r}: "
                              "ordered=True needs a stream that feeds only the collect", key=where)
    transformations[source.id] = replace(source, spec=SourceSpec(source.source.keeping_positions()))
    return True
