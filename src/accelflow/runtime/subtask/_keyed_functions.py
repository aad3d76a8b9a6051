"""Keyed state in a checkpoint, per key group, and keyed state for the rich functions of
``map``, ``flat_map`` and ``filter`` on a keyed stream (``key_by(...).map(MyRichFunction)``:
``ctx.get_state(ValueStateDescriptor(...))`` in ``open``, the current record's key's value in
``map``), as in Flink.

Example (what a keyed map's function sees)::

    from accelflow import RichMapFunction, Types, ValueStateDescriptor

    class Count(RichMapFunction):
        def open(self, ctx):
            self.seen = ctx.get_state(ValueStateDescriptor("seen", Types.INT()))
        def map(self, value):
            n = (self.seen.value() or 0) + 1
            self.seen.update(n)
            return value, n
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelflow._errors import ConfigError
from accelflow.dataflow import RuntimeContext, Transformation
from accelflow.runtime.subtask._calls import unhashable_key
from accelflow.runtime.subtask._engine_base import KeyedEngine
from accelflow.runtime.subtask._keygroups import key_group_range


class KeyedState:
    """Snapshots of an engine's keyed state and timers per key group, and their restore on
    any parallelism (the max parallelism must stay: it is the number of key groups)."""

    def __init__(self, node: Transformation, max_parallelism: int) -> None:
        self.node = node
        self.max_parallelism = max_parallelism

    def snapshot(self, engine: KeyedEngine) -> dict[str, Any]:
        return {"key_groups": engine.snapshot(), "max_parallelism": self.max_parallelism,
                "watermark": engine.timers.current_watermark()}

    def restore(self, engine: KeyedEngine, states: list[Any], index: int, parallelism: int) -> None:
        """Take back the key groups subtask ``index`` of ``parallelism`` owns from ``states``
        (every subtask's snapshot), and the smallest watermark they had seen.

        Raises:
            ConfigError: the checkpoint has another number of key groups, naming the
                operator and the setting that fixes it.
        """
        states = [s for s in states if s]
        for state in states:
            if state["max_parallelism"] != self.max_parallelism:
                raise ConfigError(
                    f"operator {self.node.name!r}: the checkpoint's state is in {state['max_parallelism']} key "
                    f"groups and this run has {self.max_parallelism}: set pipeline.max-parallelism (or the "
                    f"operator's set_max_parallelism) to {state['max_parallelism']}, as when it was taken",
                    key="pipeline.max-parallelism")
        engine.restore([s["key_groups"] for s in states], key_group_range(self.max_parallelism, parallelism, index))
        if states:  # what every subtask had seen: timers before it fired before the checkpoint
            engine.timers.watermark = max(engine.timers.watermark, min(s["watermark"] for s in states))


class KeyedFunctionState:
    """The keyed state of one rich function on a keyed stream: ``ctx.get_state`` gives it
    (the context's ``keyed_state``), :meth:`wrap` sets the record's key before each call."""

    def __init__(self, node: Transformation, max_parallelism: int, ctx: RuntimeContext) -> None:
        self.engine = KeyedEngine(node.name, max_parallelism=max_parallelism, runtime_context=ctx)
        self.state = KeyedState(node, max_parallelism)
        ctx.keyed_state = self.engine.context

    def wrap(self, fn: Callable[[Any], Any], key_fn: Callable[[Any], Any]) -> Callable[[Any], Any]:
        engine = self.engine
        backend = engine.backend
        assert backend is not None

        def keyed(record: Any) -> Any:
            try:
                engine.set_current_key(key_fn(record))
                result = fn(record)
                backend.on_record()
                return result
            except TypeError:  # its state hashed a key that is no key (a list)? else fn's own error
                if (error := unhashable_key(engine.name, key_fn, [record])) is None:
                    raise
            raise error  # out of the except: not chained to the call's error

        return keyed

    def snapshot(self) -> dict[str, Any]:
        return self.state.snapshot(self.engine)

    def restore(self, states: list[Any], index: int, parallelism: int) -> None:
        self.state.restore(self.engine, states, index, parallelism)
