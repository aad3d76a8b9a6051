"""The checkpointed state of a ``sink_to`` operator: written by its subtask (a checkpoint's
acknowledgement) and read again by a restored subtask, and by the JobManager for a sink's
job-level commit (the committables of the job's final checkpoint).

Example:
    >>> state = sink_state({3: ["part-a"], 4: ["part-b"]}, writer=None)
    >>> committables_at(state, 4), committables_at(state, 5)
    (['part-b'], [])
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any


def sink_state(pending: Mapping[int, Sequence[Any]], writer: Any) -> dict[str, Any]:
    """The state of a ``sink_to`` operator: the committables not yet published, per
    checkpoint id, and the sink's own (``Sink.snapshot_state``)."""
    return {"committables": {n: list(c) for n, c in pending.items()}, "writer": writer}


def committables_at(state: Mapping[str, Any], checkpoint_id: int) -> list[Any]:
    """What the sink prepared at checkpoint ``checkpoint_id`` (``[]``: nothing)."""
    return list(state["committables"].get(checkpoint_id, []))
