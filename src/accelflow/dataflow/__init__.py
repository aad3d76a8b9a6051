"""The dataflow model shared by the API (which builds it) and the runtime (which runs it):
the job graph and its operator specs, record chunks, the contracts of functions, sources and
sinks, and the runtime context. It describes jobs; it holds no shared memory, file or process
(the built-in sources are in :mod:`accelflow.connectors`, sharing arrays with subtasks is the
runtime's).

It imports neither :mod:`accelflow.api` nor :mod:`accelflow.runtime`.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports

if TYPE_CHECKING:
    from accelflow.dataflow._chunks import (
        CHUNK_LATENCY_S,
        CHUNK_RECORDS,
        Columns,
        Positioned,
        chunk_len,
        from_batch,
        group_records,
        iter_records,
        strided,
        to_batch,
    )
    from accelflow.dataflow._positions import Positions, in_order, with_positions
    from accelflow.dataflow._context import RuntimeContext
    from accelflow.dataflow._functions import (
        RichFilterFunction,
        RichFlatMapFunction,
        RichFunction,
        RichMapBatchesFunction,
        RichMapFunction,
        ResumeSplit,
        RichReduceFunction,
        SinkFunction,
        Source,
    )
    from accelflow.dataflow._sinks import Sink
    from accelflow.dataflow._graph import Chain, JobGraph, Partitioning, Transformation, build_job_graph
    from accelflow.dataflow._specs import (
        CollectSinkSpec, FileSinkSpec, FilterSpec, FlatMapSpec, FunctionSpec, MapBatchesSpec, MapSpec,
        OperatorSpec, PrintSinkSpec, ReduceSpec, ResidentMapBatchesSpec, ResidentMapSpec, SinkToSpec,
        SourceSpec, UserSinkSpec,
    )
    from accelflow.dataflow._resident import ResidentFunction
    from accelflow.dataflow._sources import SharedRows, even_ranges

#: module (relative) -> the names it provides, imported on first use (PEP 562): a process that
#: needs only the graph's types (a TaskExecutor) does not import NumPy
_LAZY: dict[str, tuple[str, ...]] = {
    "._chunks": (
        "CHUNK_LATENCY_S", "CHUNK_RECORDS", "Columns", "Positioned", "chunk_len", "from_batch",
        "group_records", "iter_records", "strided", "to_batch",
    ),
    "._positions": (
        "Positions", "in_order", "with_positions",
    ),
    "._context": (
        "RuntimeContext",
    ),
    "._functions": (
        "RichFilterFunction", "RichFlatMapFunction", "RichFunction", "RichMapBatchesFunction",
        "RichMapFunction", "RichReduceFunction", "SinkFunction", "Source", "ResumeSplit",
    ),
    "._sinks": (
        "Sink",
    ),
    "._graph": (
        "Chain", "JobGraph", "Partitioning", "Transformation", "build_job_graph",
    ),
    "._specs": (
        "CollectSinkSpec", "FileSinkSpec", "FilterSpec", "FlatMapSpec", "FunctionSpec", "MapBatchesSpec",
        "MapSpec", "OperatorSpec", "PrintSinkSpec", "ReduceSpec", "ResidentMapBatchesSpec", "ResidentMapSpec",
        "SinkToSpec", "SourceSpec", "UserSinkSpec",
    ),
    "._resident": (
        "ResidentFunction",
    ),
    "._sources": (
        "SharedRows", "even_ranges",
    ),
}

__all__ = [
    "CHUNK_LATENCY_S",
    "CHUNK_RECORDS",
    "Chain",
    "CollectSinkSpec",
    "Columns",
    "FileSinkSpec",
    "FilterSpec",
    "FlatMapSpec",
    "FunctionSpec",
    "JobGraph",
    "MapBatchesSpec",
    "MapSpec",
    "OperatorSpec",
    "Partitioning",
    "Positioned",
    "Positions",
    "PrintSinkSpec",
    "ReduceSpec",
    "ResidentFunction",
    "ResidentMapBatchesSpec",
    "ResidentMapSpec",
    "ResumeSplit",
    "RichFilterFunction",
    "RichFlatMapFunction",
    "RichFunction",
    "RichMapBatchesFunction",
    "RichMapFunction",
    "RichReduceFunction",
    "RuntimeContext",
    "SharedRows",
    "Sink",
    "SinkFunction",
    "SinkToSpec",
    "Source",
    "SourceSpec",
    "Transformation",
    "UserSinkSpec",
    "build_job_graph",
    "chunk_len",
    "even_ranges",
    "from_batch",
    "group_records",
    "in_order",
    "iter_records",
    "strided",
    "to_batch",
    "with_positions",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
