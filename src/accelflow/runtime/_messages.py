"""What crosses process boundaries between JobManager, TaskExecutors and subtasks.

Messages are tuples whose first item names them (picklable, versioned by ``PROTOCOL``):

JobManager → TaskExecutor: ``("deploy", SubtaskDescriptor)``, ``("cancel", job_id)``,
``("shutdown",)``.

TaskExecutor → JobManager: ``("register", Registration)``, ``("register_failed", te_id,
message)``, ``("subtask_exit", SubtaskKey, exitcode)`` and every subtask message, relayed.

Subtask → TaskExecutor: ``("running", key)``, ``("progress", key, counts)``,
``("collect", key, chunk)``, ``("finished", key, counts, part_files)``,
``("failed", key, error_text)``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, NamedTuple

from accelflow.dataflow import Partitioning

PROTOCOL = 1


class SubtaskKey(NamedTuple):
    job_id: str
    attempt: int
    chain: int
    index: int  # type: ignore[assignment]  # shadows tuple.index on purpose: the subtask index


@dataclass(frozen=True, slots=True)
class OutputEdge:
    partitioning: Partitioning
    key_fn: Any
    addresses: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class ChainPlan:
    """Pickled once per chain and attempt with cloudpickle (user code inside)."""

    name: str
    nodes: list[Any]
    outputs: tuple[OutputEdge, ...]
    rolling: bool


@dataclass(frozen=True, slots=True)
class SubtaskDescriptor:
    key: SubtaskKey
    parallelism: int
    chain_blob: bytes
    listen_address: str | None
    expected_senders: int
    splits: list[Any] | None
    assigned: dict[str, list[tuple[dict[str, str], str]]]
    taskexecutor_infos: dict[str, list[dict[str, str]]]
    isolate: bool
    authkey: bytes
    taskexecutor_id: str


@dataclass(frozen=True, slots=True)
class Registration:
    taskexecutor_id: str
    pid: int
    slots: int
    resources: list[dict[str, Any]] = field(default_factory=list)
    protocol: int = PROTOCOL
