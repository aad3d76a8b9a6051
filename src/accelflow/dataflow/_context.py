"""The ``RuntimeContext`` an operator's ``open(ctx)`` receives."""

from __future__ import annotations

import threading
from collections.abc import Mapping
from fractions import Fraction
from types import MappingProxyType
from typing import Any

from accelflow._errors import JobError
from accelflow.resources import ExternalResourceInfo


class RuntimeContext:
    """What a running subtask knows about itself and its devices.

    ``get_external_resource_infos(name)`` returns exactly the devices assigned to this subtask
    when its operator requested ``name`` (e.g. ``resources={"gpu": 1}``), and the
    TaskExecutor's whole set otherwise (Flink's behaviour).

    Example:
        >>> from accelflow import RichMapFunction
        >>> class Classify(RichMapFunction):
        ...     def open(self, ctx):
        ...         gpu = min(ctx.get_external_resource_infos("gpu"))
        ...         self.device = int(gpu.get_property("index"))
    """

    def __init__(
        self,
        *,
        task_name: str,
        operator_name: str | None = None,
        index_of_this_subtask: int,
        number_of_parallel_subtasks: int,
        attempt_number: int,
        assigned: Mapping[str, Mapping[ExternalResourceInfo, Fraction]],
        taskexecutor_infos: Mapping[str, frozenset[ExternalResourceInfo]],
        taskexecutor_id: str,
        cancelled: threading.Event | None = None,
        buffer_timeout_s: float = 0.1,
        max_number_of_parallel_subtasks: int = 128,
        standby: bool = False,
    ) -> None:
        self.task_name = task_name
        #: the operator's own name (``task_name`` is the whole chain, e.g. "map -> sink")
        self.operator_name = operator_name or task_name
        #: -1 in a standby subtask (``execution.failover.standby-subtasks``) until it takes
        #: over a failed subtask's index (see :meth:`is_standby`)
        self.index_of_this_subtask = index_of_this_subtask
        self.number_of_parallel_subtasks = number_of_parallel_subtasks
        self.attempt_number = attempt_number
        self.taskexecutor_id = taskexecutor_id
        self._assigned = {name: MappingProxyType(dict(shares)) for name, shares in assigned.items()}
        self._all = dict(taskexecutor_infos)
        self._cancelled = cancelled or threading.Event()
        #: ``execution.buffer-timeout`` in seconds (-1: only full chunks): how long a source's
        #: records may wait to fill a chunk (see ``Source.read_chunks``)
        self.buffer_timeout_s = buffer_timeout_s
        self.max_number_of_parallel_subtasks = max_number_of_parallel_subtasks
        #: the keyed state of the operator on a keyed stream (set by the runtime), else None
        self.keyed_state: Any = None
        self.standby = standby

    # -- PyFlink's getters ------------------------------------------------------------------------
    def get_task_name(self) -> str:
        return self.task_name

    def get_index_of_this_subtask(self) -> int:
        return self.index_of_this_subtask

    def get_number_of_parallel_subtasks(self) -> int:
        return self.number_of_parallel_subtasks

    def get_max_number_of_parallel_subtasks(self) -> int:
        return self.max_number_of_parallel_subtasks

    def get_attempt_number(self) -> int:
        return self.attempt_number

    def is_standby(self) -> bool:
        """True while this subtask is a standby (``execution.failover.standby-subtasks``):
        opened ahead, idle, with no index yet. Its index is then -1; when it takes over a
        failed subtask, the same context (``open()`` is not called again) reports the index
        it took and this turns False. A function that picks its shard by index loads it in
        ``open()`` only when this is False, else on its first record.

        Example:
            >>> class Shard:
            ...     def open(self, ctx):
            ...         self.ctx, self.shard = ctx, None
            ...         if not ctx.is_standby():  # a standby does not know its index yet
            ...             self.shard = ctx.index_of_this_subtask
            ...     def map_batch(self, batch):
            ...         if self.shard is None:  # a standby that took over
            ...             self.shard = self.ctx.index_of_this_subtask
            ...         return batch
        """
        return self.standby

    # -- keyed state (on a keyed stream: after key_by) ---------------------------------------------
    def _keyed(self) -> Any:
        if self.keyed_state is None:
            raise JobError(f"operator {self.operator_name!r}: Keyed state can only be used on a 'keyed stream', "
                           "i.e., after a 'key_by()' operation.")
        return self.keyed_state

    def get_state(self, state_descriptor: Any) -> Any:
        """The ``ValueState`` of ``state_descriptor`` for the current key (PyFlink's)."""
        return self._keyed().get_state(state_descriptor)

    def get_list_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_list_state(state_descriptor)

    def get_map_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_map_state(state_descriptor)

    def get_reducing_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_reducing_state(state_descriptor)

    def get_aggregating_state(self, state_descriptor: Any) -> Any:
        return self._keyed().get_aggregating_state(state_descriptor)

    def get_external_resource_infos(self, name: str) -> frozenset[ExternalResourceInfo]:
        """The devices of resource ``name`` this subtask may use (see the class docs)."""
        if name in self._assigned:
            return frozenset(self._assigned[name])
        return self._all.get(name, frozenset())

    def get_resource_shares(self, name: str) -> Mapping[ExternalResourceInfo, Fraction]:
        """This subtask's share of each assigned device of ``name`` (e.g. ``{gpu 0: 1/4}``).

        Empty when the operator did not request ``name``.
        """
        return self._assigned.get(name, MappingProxyType({}))

    def is_cancelled(self) -> bool:
        """True once the job is being cancelled; unbounded sources should stop then."""
        return self._cancelled.is_set()

    def __repr__(self) -> str:
        return (
            f"RuntimeContext(task_name={self.task_name!r}, "
            f"subtask={'standby' if self.standby else self.index_of_this_subtask}/{self.number_of_parallel_subtasks}, "
            f"attempt={self.attempt_number})"
        )
