"""The dataflow model shared by the API (which builds it) and the runtime (which runs it):
the job graph, record chunks, function contracts, built-in sources and the runtime context.

It imports neither :mod:`accelflow.api` nor :mod:`accelflow.runtime`.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelflow.dataflow._chunks import (
        CHUNK_LATENCY_S,
        CHUNK_RECORDS,
        Columns,
        chunk_len,
        from_batch,
        group_records,
        iter_records,
        strided,
        to_batch,
    )
    from accelflow.dataflow._context import RuntimeContext
    from accelflow.dataflow._functions import (
        RichFilterFunction,
        RichFlatMapFunction,
        RichFunction,
        RichMapBatchesFunction,
        RichMapFunction,
        RichReduceFunction,
        SinkFunction,
        Source,
    )
    from accelflow.dataflow._graph import Chain, JobGraph, Kind, Partitioning, Transformation, build_job_graph
    from accelflow.dataflow._idx_source import IdxSource
    from accelflow.dataflow._sources import ArraySource, CollectionSource, SequenceSource, even_ranges

#: module (relative) -> the names it provides, imported on first use (PEP 562): a process that
#: needs only the graph's types (a TaskExecutor) does not import NumPy
_LAZY: dict[str, tuple[str, ...]] = {
    "._chunks": (
        "CHUNK_LATENCY_S", "CHUNK_RECORDS", "Columns", "chunk_len", "from_batch", "group_records",
        "iter_records", "strided", "to_batch",
    ),
    "._context": (
        "RuntimeContext",
    ),
    "._functions": (
        "RichFilterFunction", "RichFlatMapFunction", "RichFunction", "RichMapBatchesFunction",
        "RichMapFunction", "RichReduceFunction", "SinkFunction", "Source",
    ),
    "._graph": (
        "Chain", "JobGraph", "Kind", "Partitioning", "Transformation", "build_job_graph",
    ),
    "._idx_source": (
        "IdxSource",
    ),
    "._sources": (
        "ArraySource", "CollectionSource", "SequenceSource", "even_ranges",
    ),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "CHUNK_LATENCY_S",
    "CHUNK_RECORDS",
    "ArraySource",
    "Chain",
    "CollectionSource",
    "Columns",
    "IdxSource",
    "JobGraph",
    "Kind",
    "Partitioning",
    "RichFilterFunction",
    "RichFlatMapFunction",
    "RichFunction",
    "RichMapBatchesFunction",
    "RichMapFunction",
    "RichReduceFunction",
    "RuntimeContext",
    "SequenceSource",
    "SinkFunction",
    "Source",
    "Transformation",
    "build_job_graph",
    "chunk_len",
    "even_ranges",
    "from_batch",
    "group_records",
    "iter_records",
    "strided",
    "to_batch",
]


def __getattr__(name: str) -> Any:
    module = _MODULE_OF.get(name)
    if module is None:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(importlib.import_module(module, __name__), name)
    globals()[name] = value
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
