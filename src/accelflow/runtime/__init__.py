"""The runtime. Each subpackage runs in one kind of process:

- :mod:`.client`: the user's process: submits a job (embedded cluster or session cluster);
- :mod:`.jobmanager`: the JobManager (in the client, or in a session cluster's process);
- :mod:`.launchers`: how TaskExecutors come to life (OS processes or Ray actors);
- :mod:`.taskexecutor`: a TaskExecutor process (drivers, slots, forks subtasks);
- :mod:`.subtask`: one subtask process (operators, channels, partitioning, sinks);
- :mod:`.service`: the session cluster's process (submissions, REST API, metrics, web UI).

This module re-exports only what every process shares: the typed messages that cross process
boundaries (:mod:`._messages`), process hygiene and the sink-file protocol.
See ``docs/architecture.md``.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from accelflow.runtime._messages import (
        CancelJob,
        ChainPlan,
        ChannelDone,
        ChannelFailed,
        Collected,
        Command,
        ConfigReply,
        ConfigRequest,
        Deploy,
        JobAccepted,
        JobFailed,
        JobProgress,
        JobSucceeded,
        OpenChannel,
        OutputEdge,
        PROTOCOL,
        Registration,
        RegistrationFailed,
        SUBTASK_MESSAGES,
        Shutdown,
        StatusReply,
        StatusRequest,
        StopRequest,
        Stopping,
        SubmitJob,
        SubtaskDescriptor,
        SubtaskEvent,
        SubtaskExited,
        SubtaskFailed,
        SubtaskFinished,
        SubtaskKey,
        SubtaskProgress,
        SubtaskRunning,
        TaskExecutorEvent,
        TaskExecutorExited,
        TaskExecutorLost,
    )
    from accelflow.runtime._process import die_with_parent
    from accelflow.runtime._sinkfiles import commit_files, create_part, hold_sink_targets, remove_stale_parts

#: module (relative) -> the names it provides, imported on first use (PEP 562): a TaskExecutor
#: starts its forkserver before it pays for the messages (and NumPy through ``dataflow``)
_LAZY: dict[str, tuple[str, ...]] = {
    "._messages": (
        "CancelJob", "ChainPlan", "ChannelDone", "ChannelFailed", "Collected", "Command",
        "ConfigReply", "ConfigRequest", "Deploy", "JobAccepted", "JobFailed", "JobProgress",
        "JobSucceeded", "OpenChannel", "OutputEdge", "PROTOCOL", "Registration",
        "RegistrationFailed", "SUBTASK_MESSAGES", "Shutdown", "StatusReply", "StatusRequest",
        "StopRequest", "Stopping", "SubmitJob", "SubtaskDescriptor", "SubtaskEvent",
        "SubtaskExited", "SubtaskFailed", "SubtaskFinished", "SubtaskKey", "SubtaskProgress",
        "SubtaskRunning", "TaskExecutorEvent", "TaskExecutorExited", "TaskExecutorLost",
    ),
    "._process": (
        "die_with_parent",
    ),
    "._sinkfiles": (
        "commit_files", "create_part", "hold_sink_targets", "remove_stale_parts",
    ),
}
_MODULE_OF = {name: module for module, names in _LAZY.items() for name in names}

__all__ = [
    "CancelJob",
    "ChainPlan",
    "ChannelDone",
    "ChannelFailed",
    "Collected",
    "Command",
    "ConfigReply",
    "ConfigRequest",
    "Deploy",
    "JobAccepted",
    "JobFailed",
    "JobProgress",
    "JobSucceeded",
    "OpenChannel",
    "OutputEdge",
    "PROTOCOL",
    "Registration",
    "RegistrationFailed",
    "SUBTASK_MESSAGES",
    "Shutdown",
    "StatusReply",
    "StatusRequest",
    "StopRequest",
    "Stopping",
    "SubmitJob",
    "SubtaskDescriptor",
    "SubtaskEvent",
    "SubtaskExited",
    "SubtaskFailed",
    "SubtaskFinished",
    "SubtaskKey",
    "SubtaskProgress",
    "SubtaskRunning",
    "TaskExecutorEvent",
    "TaskExecutorExited",
    "TaskExecutorLost",
    "commit_files",
    "create_part",
    "die_with_parent",
    "hold_sink_targets",
    "remove_stale_parts",
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
