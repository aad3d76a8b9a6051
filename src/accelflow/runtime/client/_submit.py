"""Where a job goes: a new embedded cluster, or the session cluster the context names."""

from __future__ import annotations

from typing import Any

from accelflow.config import Configuration
from accelflow.dataflow import JobGraph
from accelflow.runtime.client._client import JobClient
from accelflow.runtime.client._context import ExecutionContext


def submit(graph: JobGraph, config: Configuration, context: ExecutionContext) -> Any:
    """Start ``graph`` with ``config``: a :class:`JobClient` on a new embedded cluster, or a
    job on the session cluster that ``context`` names."""
    if context.cluster_url is not None:
        from accelflow.runtime.client._remote import RemoteJobClient  # the session's only when used

        return RemoteJobClient(graph, config, context)
    return JobClient(graph, config, context)
