"""Functions of the broadcast state jobs in tests, ported from PyFlink's
flink-python/pyflink/datastream/tests/test_data_stream.py (importable by subtasks: the tests'
directory is on their import path)."""

from __future__ import annotations

from collections import defaultdict
from typing import Any

from accelflow import (
    BroadcastProcessFunction, KeyedBroadcastProcessFunction, MapStateDescriptor, OutputTag, RuntimeContext, Types,
    ValueStateDescriptor,
)

MAPPING = MapStateDescriptor("mapping", Types.INT(), Types.STRING())
SIDE = OutputTag("side", Types.INT())


def _create_string(s: Any, t: Any) -> str:
    return f"value: {s}, ts: {t}"


class MyBroadcastProcessFunction(BroadcastProcessFunction):
    """test_co_broadcast_process's function: records wait in a cache until their rule comes."""

    def __init__(self, map_state_desc: MapStateDescriptor) -> None:
        self._map_state_desc = map_state_desc
        self._cache: dict[Any, list[Any]] = defaultdict(list)

    def process_element(self, value: int, ctx: Any) -> Any:
        ro_broadcast_state = ctx.get_broadcast_state(self._map_state_desc)
        key = value % 2
        if ro_broadcast_state.contains(key):
            if self._cache.get(key) is not None:
                for v in self._cache[key]:
                    yield ro_broadcast_state.get(key) + str(v)
                self._cache[key].clear()
            yield ro_broadcast_state.get(key) + str(value)
        else:
            self._cache[key].append(value)

    def process_broadcast_element(self, value: tuple[int, str], ctx: Any) -> Any:
        key = value[0]
        yield str(key) + value[1]
        broadcast_state = ctx.get_broadcast_state(self._map_state_desc)
        broadcast_state.put(key, value[1])
        if self._cache.get(key) is not None:
            for v in self._cache[key]:
                yield value[1] + str(v)
            self._cache[key].clear()


class MyKeyedBroadcastProcessFunction(KeyedBroadcastProcessFunction):
    """test_keyed_co_broadcast_process's function: as above, and an event-time timer per record."""

    def __init__(self, map_state_desc: MapStateDescriptor) -> None:
        self._map_state_desc = map_state_desc
        self._cache: Any = None

    def open(self, runtime_context: RuntimeContext) -> None:
        self._cache = defaultdict(list)

    def process_element(self, value: tuple[int, str], ctx: Any) -> Any:
        ro_broadcast_state = ctx.get_broadcast_state(self._map_state_desc)
        key = value[0] % 2
        if ro_broadcast_state.contains(key):
            if self._cache.get(key) is not None:
                for v in self._cache[key]:
                    yield _create_string(ro_broadcast_state.get(key) + str(v[0]), v[1])
                self._cache[key].clear()
            yield _create_string(ro_broadcast_state.get(key) + str(value[0]), value[1])
        else:
            self._cache[key].append(value)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 10000)

    def process_broadcast_element(self, value: tuple[int, str, str], ctx: Any) -> Any:
        key = value[0]
        yield _create_string(str(key) + value[2], ctx.timestamp())
        broadcast_state = ctx.get_broadcast_state(self._map_state_desc)
        broadcast_state.put(key, value[2])
        if self._cache.get(key) is not None:
            for v in self._cache[key]:
                yield _create_string(value[2] + str(v[0]), v[1])
            self._cache[key].clear()

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield _create_string(ctx.get_current_key(), timestamp)


class SideOutputs(BroadcastProcessFunction):
    """test_co_broadcast_side_output's function (side outputs through ``ctx.output``)."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        yield value[0]
        ctx.output(SIDE, value[1])

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        yield value[1]
        ctx.output(SIDE, value[0])


class Writes(BroadcastProcessFunction):
    """Writes broadcast state from process_element: refused (every subtask must keep one copy)."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(MAPPING).put(value, "x")

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        return None


class Undeclared(BroadcastProcessFunction):
    """Reads a broadcast state that ``broadcast(...)`` did not declare."""

    def process_element(self, value: Any, ctx: Any) -> Any:
        return None

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(MapStateDescriptor("mapings")).put(value, value)


RULES = MapStateDescriptor("rules", Types.INT(), Types.INT())
COUNT = ValueStateDescriptor("count", Types.INT())


class CountAndRules(KeyedBroadcastProcessFunction):
    """Counts a key's records in keyed state; at the end (an event-time timer) emits the key,
    its count and the sum of the broadcast rules this subtask holds then."""

    def open(self, runtime_context: RuntimeContext) -> None:
        self.count = runtime_context.get_state(COUNT)

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.count.update((self.count.value() or 0) + 1)
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 1)

    def process_broadcast_element(self, value: Any, ctx: Any) -> Any:
        ctx.get_broadcast_state(RULES).put(value, value * 10)

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        yield [ctx.get_current_key(), self.count.value(), sum(ctx.get_broadcast_state(RULES).values())]
