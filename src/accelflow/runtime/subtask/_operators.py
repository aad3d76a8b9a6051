"""Operators as they run inside a subtask: each turns a chunk into a chunk.

An operator has ``open(ctx)``, ``process(chunk) -> chunk``, ``finish() -> chunk`` (what it
held back, e.g. a partial batch or final reduce values) and ``close()``.
"""

from __future__ import annotations

import inspect
import os
import sys
from collections.abc import Callable
from typing import Any, TextIO

import numpy as np

from accelflow.dataflow import RuntimeContext
from accelflow.dataflow import from_batch, iter_records, to_batch
from accelflow.dataflow import Transformation
from accelflow.runtime import create_part

_METHODS = {"map": "map", "flat_map": "flat_map", "filter": "filter", "reduce": "reduce",
            "map_batches": "map_batch", "sink_user": "invoke"}


def _bind(fn: Any, kind: str) -> tuple[Any, Callable[..., Any]]:
    """Instantiate a class if given one; return (object, the callable to use)."""
    obj = fn() if inspect.isclass(fn) else fn
    method = _METHODS.get(kind)
    if method and hasattr(obj, method):
        return obj, getattr(obj, method)  # type: ignore[no-any-return]
    return obj, obj  # type: ignore[return-value]


class Operator:
    def __init__(self, node: Transformation) -> None:
        self.node = node
        self.records_in = 0
        self.records_out = 0
        self.obj: Any = None

    def open(self, ctx: RuntimeContext) -> None:
        if hasattr(self.obj, "open") and callable(self.obj.open):
            self.obj.open(ctx)

    def process(self, chunk: Any) -> Any:
        raise NotImplementedError

    def finish(self) -> Any:
        return []

    def close(self) -> None:
        if hasattr(self.obj, "close") and callable(self.obj.close):
            self.obj.close()


class MapOp(Operator):
    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.obj, self.fn = _bind(node.fn, node.kind)

    def process(self, chunk: Any) -> Any:
        fn = self.fn
        return [fn(r) for r in iter_records(chunk)]


class FlatMapOp(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        return [out for r in iter_records(chunk) for out in fn(r)]


class FilterOp(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        if isinstance(chunk, list):
            return [r for r in chunk if fn(r)]
        return [r for r in iter_records(chunk) if fn(r)]


class MapBatchesOp(MapOp):
    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.batch_size: int = node.options["batch_size"]
        self.pending: list[Any] = []
        self.pending_len = 0

    def process(self, chunk: Any) -> Any:
        if not self.pending and len(chunk) == self.batch_size:
            return self._call([chunk])
        self.pending.append(chunk)
        self.pending_len += len(chunk)
        outputs = []
        while self.pending_len >= self.batch_size:
            outputs.append(self._call(self._take(self.batch_size)))
        return _join(outputs)

    def finish(self) -> Any:
        if not self.pending_len:
            return []
        return self._call(self._take(self.pending_len))

    def _take(self, size: int) -> list[Any]:
        taken, need = [], size
        while need:
            head = self.pending[0]
            if len(head) <= need:
                taken.append(self.pending.pop(0))
                need -= len(head)
            else:
                taken.append(_slice(head, 0, need))
                self.pending[0] = _slice(head, need, len(head))
                need = 0
        self.pending_len -= size
        return taken

    def _call(self, chunks: list[Any]) -> Any:
        return from_batch(self.fn(to_batch(chunks)), self.node.name)


class ReduceOp(MapOp):
    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.key_fn = node.key_fn
        self.rolling: bool = node.options.get("rolling", False)
        self.state: dict[Any, Any] = {}

    def process(self, chunk: Any) -> Any:
        state, key_fn, fn = self.state, self.key_fn, self.fn
        out = []
        for r in iter_records(chunk):
            key = key_fn(r)
            value = fn(state[key], r) if key in state else r
            state[key] = value
            if self.rolling:
                out.append(value)
        return out

    def finish(self) -> Any:
        return [] if self.rolling else list(self.state.values())


class PrintSink(Operator):
    def open(self, ctx: RuntimeContext) -> None:
        n = ctx.number_of_parallel_subtasks
        self.prefix = f"{ctx.index_of_this_subtask + 1}> " if n > 1 else ""

    def process(self, chunk: Any) -> Any:
        text = "".join(f"{self.prefix}{r}\n" for r in iter_records(chunk))
        sys.stdout.write(text)
        sys.stdout.flush()
        return []


class FileSink(Operator):
    """Writes a part file; the JobManager joins the parts atomically when the job succeeds."""

    def __init__(self, node: Transformation) -> None:
        super().__init__(node)
        self.file: TextIO | None = None
        self.part_path = ""

    def open(self, ctx: RuntimeContext) -> None:
        # a new file with a random name, 0600, never through a symlink (see _sinkfiles)
        fd, self.part_path = create_part(str(self.node.fn), ctx.index_of_this_subtask, ctx.attempt_number)
        self.file = os.fdopen(fd, "w", encoding="utf-8")

    def process(self, chunk: Any) -> Any:
        assert self.file is not None
        self.file.write("".join(f"{r}\n" for r in iter_records(chunk)))
        return []

    def close(self) -> None:
        if self.file is not None and not self.file.closed:
            self.file.flush()
            os.fsync(self.file.fileno())
            self.file.close()


class CollectSink(Operator):
    """Hands chunks to the subtask runner, which ships them to the client."""

    def process(self, chunk: Any) -> Any:
        return chunk


class UserSink(MapOp):
    def process(self, chunk: Any) -> Any:
        fn = self.fn
        for r in iter_records(chunk):
            fn(r)
        return []


OPERATORS: dict[str, type[Operator]] = {
    "map": MapOp, "flat_map": FlatMapOp, "filter": FilterOp, "map_batches": MapBatchesOp,
    "reduce": ReduceOp, "sink_print": PrintSink, "sink_file": FileSink,
    "sink_collect": CollectSink, "sink_user": UserSink,
}


def _slice(chunk: Any, start: int, stop: int) -> Any:
    from accelflow.dataflow import Columns

    if isinstance(chunk, Columns):
        return chunk.slice(start, stop)
    return chunk[start:stop]


def _join(outputs: list[Any]) -> Any:
    if len(outputs) == 1:
        return outputs[0]
    if outputs and all(isinstance(o, np.ndarray) for o in outputs):
        return np.concatenate(outputs)
    records: list[Any] = []
    for out in outputs:
        records.extend(iter_records(out))
    return records
