"""Pins the public surface (style guide habit 4, as httpx ``tests/test_exported_members.py``).

Adding or removing a public name is a decision: update the list here in the same change.
"""

from __future__ import annotations

import importlib

import pytest

import accelflow
import accelflow.resources
import accelflow.resources.coordination

ACCELFLOW = [
    "AccelflowError",
    "AccelflowInternalError",
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AllWindowFunction",
    "AllocationError",
    "AsyncDataStream",
    "AsyncFunction",
    "BroadcastConnectedStream",
    "BroadcastProcessFunction",
    "BroadcastStream",
    "ChannelClosed",
    "CheckpointConfig",
    "CheckpointError",
    "CheckpointingMode",
    "CoFlatMapFunction",
    "CoGroupFunction",
    "CoGroupedStreams",
    "CoMapFunction",
    "CoProcessFunction",
    "ConfigError",
    "Configuration",
    "ConnectedStreams",
    "ContinuousEventTimeTrigger",
    "CoordinationError",
    "CountSlidingWindowAssigner",
    "CountTrigger",
    "CountTumblingWindowAssigner",
    "CountWindow",
    "DataFormatError",
    "DataStream",
    "DeploymentError",
    "DeviceFault",
    "DeviceMemoryExceeded",
    "DiscoveryError",
    "DriverLoadError",
    "Duration",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "Encoder",
    "Environment",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "ExecutionConfig",
    "ExternalResourceInfo",
    "ExternalizedCheckpointRetention",
    "FileSink",
    "FileSource",
    "FilterFunction",
    "FlatMapFunction",
    "GlobalWindow",
    "GlobalWindows",
    "HardwareFailure",
    "IdxSource",
    "IntervalJoin",
    "IntervalJoined",
    "JobCancelledError",
    "JobClient",
    "JobError",
    "JobResult",
    "JoinFunction",
    "JoinedStreams",
    "KeySelector",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStream",
    "ListState",
    "ListStateDescriptor",
    "MapFunction",
    "MapState",
    "MapStateDescriptor",
    "MergingWindowAssigner",
    "MissingDependencyError",
    "NeverTrigger",
    "NotSupportedError",
    "NumberSequenceSource",
    "OutputFileConfig",
    "OutputTag",
    "Partitioner",
    "ProcessAllWindowFunction",
    "ProcessFunction",
    "ProcessJoinFunction",
    "ProcessWindowFunction",
    "ProcessingTimeSessionWindows",
    "ProcessingTimeTrigger",
    "PurgingTrigger",
    "ReduceFunction",
    "ReducingState",
    "ReducingStateDescriptor",
    "RichFilterFunction",
    "RichFlatMapFunction",
    "RichFunction",
    "RichMapBatchesFunction",
    "RichMapFunction",
    "RichReduceFunction",
    "RingError",
    "RollingPolicy",
    "Row",
    "RowKind",
    "RuntimeContext",
    "RuntimeExecutionMode",
    "SessionWindowTimeGapExtractor",
    "Sink",
    "SinkFunction",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "Source",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "StreamExecutionEnvironment",
    "StreamFormat",
    "SubtaskHung",
    "Time",
    "TimeDomain",
    "TimeWindow",
    "TimerService",
    "TimestampAssigner",
    "TransportError",
    "Trigger",
    "TriggerResult",
    "TumblingEventTimeWindows",
    "TumblingProcessingTimeWindows",
    "TypeInformation",
    "Types",
    "ValueState",
    "ValueStateDescriptor",
    "WatermarkStrategy",
    "Window",
    "WindowAssigner",
    "WindowFunction",
    "WindowedStream",
]

RESOURCES = [
    "ApplicationFault",
    "ComputeProcess",
    "ConfigError",
    "DeviceHealth",
    "DeviceQuarantined",
    "DeviceRef",
    "DeviceRejoined",
    "DeviceWatch",
    "DiscoveryError",
    "DriverEntryPoint",
    "ExternalResourceDriver",
    "ExternalResourceDriverFactory",
    "ExternalResourceInfo",
    "ExternalResourceInfoProvider",
    "Fault",
    "HEALTH_PARAMS",
    "HealthConfig",
    "HealthEvent",
    "KubernetesResourceDecorator",
    "KubernetesResources",
    "LeftoverCheck",
    "ProbeResult",
    "RayResourceDecorator",
    "RayResources",
    "ResourceStatus",
    "SUBTASK_ENV_VAR",
    "Verdict",
    "YarnResourceDecorator",
    "info_properties",
    "list_driver_entry_points",
    "load_driver_factory",
    "ray_accelerator_env",
    "ray_resources_of",
    "split_health_params",
]

#: host coordination, for drivers of any resource (issue 26.6)
COORDINATION = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "Allocation",
    "Coordinated",
    "CoordinationFile",
    "Device",
    "Liveness",
    "Owner",
    "default_coordination_path",
    "kill_script_tree",
    "owner_env_var",
    "owner_from_env",
]


def test_accelflow_exports_exactly_the_pinned_names_sorted() -> None:
    assert accelflow.__all__ == ACCELFLOW
    assert ACCELFLOW == sorted(ACCELFLOW)


def test_accelflow_resources_exports_exactly_the_pinned_names_sorted() -> None:
    assert accelflow.resources.__all__ == RESOURCES
    assert RESOURCES == sorted(RESOURCES)


def test_host_coordination_exports_exactly_the_pinned_names() -> None:
    assert accelflow.resources.coordination.__all__ == COORDINATION
    for name in COORDINATION:
        obj = getattr(accelflow.resources.coordination, name)
        if isinstance(obj, type) or callable(obj):
            assert obj.__module__ == "accelflow.resources.coordination", name


@pytest.mark.parametrize(("module", "names"), [("accelflow", ACCELFLOW), ("accelflow.resources", RESOURCES),
                                               ("accelflow.resources.coordination", COORDINATION)])
def test_every_exported_name_is_importable(module: str, names: list[str]) -> None:
    namespace: dict[str, object] = {}
    exec(f"from {module} import {', '.join(names)}", namespace)  # noqa: S102
    mod = importlib.import_module(module)
    for name in names:
        assert namespace[name] is getattr(mod, name)


@pytest.mark.parametrize("name", ACCELFLOW)
def test_public_classes_show_the_public_module(name: str) -> None:
    obj = getattr(accelflow, name)
    if isinstance(obj, type):
        assert obj.__module__ == "accelflow", f"{name}.__module__ is {obj.__module__}"


def test_the_error_tree_has_one_root() -> None:
    errors = [getattr(accelflow, n) for n in ACCELFLOW if n.endswith("Error")]
    assert all(issubclass(e, accelflow.AccelflowError) for e in errors)
    assert issubclass(accelflow.JobCancelledError, accelflow.JobError)


def test_the_driver_sdk_shares_the_top_level_classes() -> None:
    assert accelflow.resources.ExternalResourceInfo is accelflow.ExternalResourceInfo
    assert accelflow.resources.ConfigError is accelflow.ConfigError
    assert accelflow.resources.DiscoveryError is accelflow.DiscoveryError


def test_the_version_is_a_string() -> None:
    assert isinstance(accelflow.__version__, str) and accelflow.__version__.count(".") == 2
