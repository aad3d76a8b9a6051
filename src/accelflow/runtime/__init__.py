"""The runtime. Each subpackage runs in one kind of process:

- :mod:`.client`: the user's process: submits a job (embedded cluster or session cluster);
- :mod:`.jobmanager`: the JobManager (in the client, or in a session cluster's process);
- :mod:`.launchers`: how TaskExecutors come to life (OS processes or Ray actors);
- :mod:`.taskexecutor`: a TaskExecutor process (drivers, slots, forks subtasks);
- :mod:`.subtask`: one subtask process (operators, channels, partitioning, sinks);
- :mod:`.service`: the session cluster's process (submissions, REST API, metrics, web UI);
- :mod:`.devicehost`: a device host (one per device with resident operators on a
  TaskExecutor: their instances, shared by the subtasks on that device).

This module re-exports only what every process shares: the typed messages that cross process
boundaries (:mod:`._messages`), pickling user code (:func:`dumps`), process hygiene, the
checkpointed state of a ``sink_to`` operator, the data plane of NumPy sources (the handles
subtasks read shared arrays through, :mod:`._arrays`, also mapped by a Ray TaskExecutor, and
the JobManager's sharing of them, :mod:`._array_sharing`) and the injected clock
(:mod:`._clock`).
See ``docs/architecture.md``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from accelflow._exports import lazy_exports

if TYPE_CHECKING:
    from accelflow.runtime._messages import (
        Barrier,
        CancelJob,
        ChainPlan,
        CheckpointAck,
        CheckpointCommitted,
        ChannelDone,
        ChannelFailed,
        Collected,
        Command,
        Deploy,
        DeviceShare,
        InputChannel,
        NotifyCheckpointComplete,
        OpenChannel,
        OutputEdge,
        PROTOCOL,
        RegisteredDevice,
        RegisteredResource,
        Registration,
        RegistrationFailed,
        Rollback,
        IN_FLIGHT_KIND,
        in_flight_name,
        SUBTASK_MESSAGES,
        Shutdown,
        StreamStatus,
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
        ToSubtask,
        TriggerCheckpoint,
        Watermark,
    )
    from accelflow.runtime._session_messages import (
        ConfigReply, ConfigRequest, JobAccepted, JobFailed, JobProgress, JobSucceeded, SavepointDone,
        SavepointFailed, StatusReply, StatusRequest, StopRequest, Stopping, SubmitJob, TriggerSavepoint,
    )
    from accelflow.runtime._device_messages import (
        HOSTS_ENV_VAR, HOSTS_KEY_ENV_VAR, RESIDENT_KILLED_SUFFIX, RESIDENT_STACK_SUFFIX, Attach, Attached,
        DeviceChange, DeviceEvent, DevicePool, DeviceReport, DevicesFree, DeviceStatus, HostAddress, HostFailed,
        HostReady, HostReport, HostRequest, InjectFault, MemoryReport, ResidentInstance, ResidentOptions,
        ResidentReply, ResidentRequest, SharedArrays, StartSubtask, SubtaskMemory, WarmReady,
    )
    from accelflow.runtime._accept import close_listener, serve_forever, unix_listener
    from accelflow.runtime._oob import recv_chunk, send_chunk
    from accelflow.runtime._warmup import (
        device_memory, is_out_of_memory, memory_text, preload, resolve_framework,
        share_for, warm_device,
    )
    from accelflow.runtime._channel_addresses import (
        CONNECT_TIMEOUT_S, RELAY_DIR_ENV_VAR, RELAY_PREFIX, RELAY_SOCKET, channel_path, connect_unix,
    )
    from accelflow.runtime._array_sharing import object_handles, release_arrays, share_arrays, shared_view
    from accelflow.runtime._arrays import (
        ByFile, NpyFile, ObjectArray, ProcessArray, SharedArray, copy_to_memfd, register_arrays,
    )
    from accelflow.runtime._clock import SYSTEM_CLOCK, Clock, ManualClock
    from accelflow.runtime._pickle import ByValue, dumps, send_pickled
    from accelflow.runtime._process import (
        PARENT_PID_ENV_VAR, WORK_DIR_ENV_VAR, die_with_parent, expected_parent, keep_tempdir_in, parent_env,
        pid_namespace, python_command, whole_lines, work_dir_env,
    )
    from accelflow.runtime._sink_state import committables_at, sink_state
    from accelflow.runtime._statefile import (
        OWNER, SOCKET_PREFIX, SessionInfo, same_process, session_process, write_private,
    )
    from accelflow.runtime._workdirs import WORK_DIR_PREFIX, make_work_dir, socket_dir, sweep_work_dirs

#: module (relative) -> the names it provides, imported on first use (PEP 562): a TaskExecutor
#: starts its forkserver before it pays for the messages (and NumPy through ``dataflow``)
_LAZY: dict[str, tuple[str, ...]] = {
    "._messages": (
        "Barrier", "CancelJob", "ChainPlan", "CheckpointAck", "CheckpointCommitted",
        "NotifyCheckpointComplete", "ToSubtask", "TriggerCheckpoint", "ChannelDone", "ChannelFailed", "Collected",
        "Command", "Deploy", "OpenChannel", "OutputEdge", "PROTOCOL", "Registration",
        "RegistrationFailed", "Rollback", "IN_FLIGHT_KIND", "in_flight_name", "SUBTASK_MESSAGES", "Shutdown",
        "SubtaskDescriptor", "SubtaskEvent",
        "SubtaskExited", "SubtaskFailed", "SubtaskFinished", "SubtaskKey", "SubtaskProgress",
        "SubtaskRunning", "TaskExecutorEvent", "TaskExecutorExited", "TaskExecutorLost",
        "DeviceShare", "RegisteredDevice", "RegisteredResource", "InputChannel", "StreamStatus", "Watermark",
    ),
    "._session_messages": (
        "ConfigReply", "ConfigRequest", "JobAccepted", "JobFailed", "JobProgress", "JobSucceeded",
        "SavepointDone", "SavepointFailed", "StatusReply", "StatusRequest", "StopRequest", "Stopping",
        "SubmitJob", "TriggerSavepoint",
    ),
    "._device_messages": (
        "HOSTS_ENV_VAR", "HOSTS_KEY_ENV_VAR", "RESIDENT_KILLED_SUFFIX", "RESIDENT_STACK_SUFFIX", "Attach",
        "Attached", "DeviceChange", "DeviceEvent", "DevicePool", "DeviceReport", "DevicesFree", "DeviceStatus",
        "HostAddress", "HostFailed", "HostReady", "HostReport", "HostRequest", "InjectFault", "MemoryReport",
        "ResidentInstance", "ResidentOptions", "ResidentReply", "ResidentRequest", "SharedArrays",
        "StartSubtask", "SubtaskMemory", "WarmReady",
    ),
    "._accept": (
        "close_listener", "serve_forever", "unix_listener",
    ),
    "._oob": (
        "recv_chunk", "send_chunk",
    ),
    "._warmup": (
        "device_memory", "is_out_of_memory", "memory_text", "preload",
        "resolve_framework", "share_for", "warm_device",
    ),
    "._channel_addresses": (
        "CONNECT_TIMEOUT_S", "RELAY_DIR_ENV_VAR", "RELAY_PREFIX", "RELAY_SOCKET", "channel_path",
        "connect_unix",
    ),
    "._array_sharing": (
        "object_handles", "release_arrays", "share_arrays", "shared_view",
    ),
    "._arrays": (
        "ByFile", "NpyFile", "ObjectArray", "ProcessArray", "SharedArray", "copy_to_memfd", "register_arrays",
    ),
    "._clock": (
        "SYSTEM_CLOCK", "Clock", "ManualClock",
    ),
    "._pickle": (
        "ByValue", "dumps", "send_pickled",
    ),
    "._process": (
        "PARENT_PID_ENV_VAR", "WORK_DIR_ENV_VAR", "die_with_parent", "expected_parent", "keep_tempdir_in",
        "parent_env", "pid_namespace", "python_command", "whole_lines", "work_dir_env",
    ),
    "._sink_state": (
        "committables_at", "sink_state",
    ),
    "._statefile": (
        "OWNER", "SOCKET_PREFIX", "SessionInfo", "same_process", "session_process", "write_private",
    ),
    "._workdirs": ("WORK_DIR_PREFIX", "make_work_dir", "socket_dir", "sweep_work_dirs"),
}

__all__ = [
    "Attach",
    "Attached",
    "ByFile",
    "Barrier",
    "ByValue",
    "CONNECT_TIMEOUT_S",
    "CancelJob",
    "ChainPlan",
    "ChannelDone",
    "ChannelFailed",
    "CheckpointAck",
    "CheckpointCommitted",
    "Clock",
    "Collected",
    "Command",
    "ConfigReply",
    "ConfigRequest",
    "Deploy",
    "DeviceChange",
    "DeviceEvent",
    "DevicePool",
    "DeviceReport",
    "DevicesFree",
    "DeviceShare",
    "DeviceStatus",
    "HostAddress",
    "HostFailed",
    "HostReady",
    "HostReport",
    "HostRequest",
    "HOSTS_ENV_VAR",
    "HOSTS_KEY_ENV_VAR",
    "InjectFault",
    "JobAccepted",
    "JobFailed",
    "JobProgress",
    "JobSucceeded",
    "ManualClock",
    "MemoryReport",
    "NotifyCheckpointComplete",
    "NpyFile",
    "OWNER",
    "ObjectArray",
    "OpenChannel",
    "OutputEdge",
    "PARENT_PID_ENV_VAR",
    "PROTOCOL",
    "ProcessArray",
    "RELAY_DIR_ENV_VAR",
    "RELAY_PREFIX",
    "RELAY_SOCKET",
    "RegisteredDevice",
    "RegisteredResource",
    "Registration",
    "RegistrationFailed",
    "RESIDENT_KILLED_SUFFIX",
    "RESIDENT_STACK_SUFFIX",
    "ResidentInstance",
    "ResidentOptions",
    "ResidentReply",
    "ResidentRequest",
    "SharedArrays",
    "Rollback",
    "IN_FLIGHT_KIND",
    "in_flight_name",
    "SOCKET_PREFIX",
    "SUBTASK_MESSAGES",
    "SYSTEM_CLOCK",
    "SavepointDone",
    "SavepointFailed",
    "SessionInfo",
    "SharedArray",
    "Shutdown",
    "StartSubtask",
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
    "SubtaskMemory",
    "SubtaskProgress",
    "SubtaskRunning",
    "TaskExecutorEvent",
    "TaskExecutorExited",
    "TaskExecutorLost",
    "ToSubtask",
    "TriggerCheckpoint",
    "TriggerSavepoint",
    "WORK_DIR_ENV_VAR",
    "WORK_DIR_PREFIX",
    "WarmReady",
    "channel_path",
    "close_listener",
    "committables_at",
    "connect_unix",
    "copy_to_memfd",
    "device_memory",
    "die_with_parent",
    "dumps",
    "expected_parent",
    "is_out_of_memory",
    "keep_tempdir_in",
    "make_work_dir",
    "memory_text",
    "object_handles",
    "parent_env",
    "pid_namespace",
    "preload",
    "python_command",
    "recv_chunk",
    "register_arrays",
    "release_arrays",
    "resolve_framework",
    "same_process",
    "send_chunk",
    "send_pickled",
    "serve_forever",
    "session_process",
    "share_arrays",
    "share_for",
    "shared_view",
    "sink_state",
    "socket_dir",
    "sweep_work_dirs",
    "unix_listener",
    "warm_device",
    "whole_lines",
    "work_dir_env",
    "write_private",
    "InputChannel",
    "StreamStatus",
    "Watermark",
]


__getattr__, __dir__ = lazy_exports(globals(), _LAZY)
