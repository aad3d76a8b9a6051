"""Event time's user-facing contracts in one place (issue 30, phase 1): PyFlink's names for
durations, watermark strategies, windows, triggers, window functions, keyed state and process
functions. The runtime's engines (``accelflow.runtime.subtask``) import them from here; phase 2
re-exports them from ``accelflow.dataflow`` and ``accelflow``.

Example:
    >>> from accelflow.dataflow.eventtime import TumblingEventTimeWindows, Time
    >>> TumblingEventTimeWindows.of(Time.seconds(5))
    TumblingEventTimeWindows(5000, 0)
"""

from __future__ import annotations

from accelflow.dataflow._time import (
    MAX_TIMESTAMP, MIN_TIMESTAMP, Duration, Time, at_least, to_millis,
)
from accelflow.dataflow._types import (
    TypeInformation, Types,
)
from accelflow.dataflow._watermark_strategy import (
    TimestampAssigner, WatermarkStrategy,
)
from accelflow.dataflow._triggers import (
    ContinuousEventTimeTrigger, CountTrigger, EventTimeTrigger, NeverTrigger, ProcessingTimeTrigger, PurgingTrigger, Trigger, TriggerResult,
)
from accelflow.dataflow._windows import (
    CountSlidingWindowAssigner, CountTumblingWindowAssigner, CountWindow, DynamicEventTimeSessionWindows, DynamicProcessingTimeSessionWindows, EventTimeSessionWindows, GlobalWindow, GlobalWindows, MergingWindowAssigner, ProcessingTimeSessionWindows, SessionWindowTimeGapExtractor, SlidingEventTimeWindows, SlidingProcessingTimeWindows, TimeWindow, TumblingEventTimeWindows, TumblingProcessingTimeWindows, Window, WindowAssigner,
)
from accelflow.dataflow._state import (
    AggregatingState, AggregatingStateDescriptor, KeyedStateStore, ListState, ListStateDescriptor, MapState, MapStateDescriptor, ReducingState, ReducingStateDescriptor, State, StateDescriptor, StateTtlConfig, ValueState, ValueStateDescriptor,
)
from accelflow.dataflow._process import (
    CoFlatMapFunction, CoMapFunction, CoProcessFunction, KeyedCoProcessFunction, KeyedProcessFunction, OutputTag, ProcessFunction, ProcessJoinFunction, TimeDomain, TimerService,
)
from accelflow.dataflow._broadcast import (
    BroadcastProcessFunction, KeyedBroadcastProcessFunction,
)
from accelflow.dataflow._join import (
    CoGroupFunction, JoinFunction,
)
from accelflow.dataflow._window_functions import (
    AggregateFunction, AllWindowFunction, ProcessAllWindowFunction, ProcessWindowFunction, ReduceFunction, WindowFunction,
)

__all__ = [
    "AggregateFunction",
    "AggregatingState",
    "AggregatingStateDescriptor",
    "AllWindowFunction",
    "BroadcastProcessFunction",
    "CoFlatMapFunction",
    "CoGroupFunction",
    "CoMapFunction",
    "CoProcessFunction",
    "ContinuousEventTimeTrigger",
    "CountSlidingWindowAssigner",
    "CountTrigger",
    "CountTumblingWindowAssigner",
    "CountWindow",
    "Duration",
    "DynamicEventTimeSessionWindows",
    "DynamicProcessingTimeSessionWindows",
    "EventTimeSessionWindows",
    "EventTimeTrigger",
    "GlobalWindow",
    "GlobalWindows",
    "JoinFunction",
    "KeyedBroadcastProcessFunction",
    "KeyedCoProcessFunction",
    "KeyedProcessFunction",
    "KeyedStateStore",
    "ListState",
    "ListStateDescriptor",
    "MAX_TIMESTAMP",
    "MIN_TIMESTAMP",
    "MapState",
    "MapStateDescriptor",
    "MergingWindowAssigner",
    "NeverTrigger",
    "OutputTag",
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
    "SessionWindowTimeGapExtractor",
    "SlidingEventTimeWindows",
    "SlidingProcessingTimeWindows",
    "State",
    "StateDescriptor",
    "StateTtlConfig",
    "Time",
    "TimeDomain",
    "TimeWindow",
    "TimerService",
    "TimestampAssigner",
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
    "at_least",
    "to_millis",
]
