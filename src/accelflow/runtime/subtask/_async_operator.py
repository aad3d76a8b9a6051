"""Async I/O in a subtask (``AsyncDataStream.ordered_wait / unordered_wait``): each input's
``async_invoke`` runs on the subtask's own asyncio event loop (one thread), up to ``capacity``
at once; results leave in input order (ordered) or as they finish (unordered, but never past
a watermark: records between two watermarks may swap, as in Flink). A watermark waits in the
queue until the results before it are out; the final one waits for every input. A
checkpoint holds the inputs still queued, which a restore calls again (Flink's
``AsyncWaitOperator``).
"""

from __future__ import annotations

import asyncio
import concurrent.futures
import inspect
import os
import threading
from collections import deque
from typing import Any

from accelflow._errors import ConfigError, JobError
from accelflow.dataflow import AsyncFunction, AsyncSpec, RuntimeContext, Transformation, iter_records, stamped, \
    timestamps_of
from accelflow.dataflow.eventtime import MAX_TIMESTAMP, to_millis
from accelflow.runtime import ChainPlan, Watermark
from accelflow.runtime.subtask._calls import function_object
from accelflow.runtime.subtask._operators import Operator, runs


class _Entry:
    """One input in the queue (or a watermark, ``value`` then unused)."""

    __slots__ = ("future", "timestamp", "value", "watermark")

    def __init__(self, value: Any, timestamp: int | None, future: Any = None, watermark: int | None = None) -> None:
        self.value, self.timestamp, self.future, self.watermark = value, timestamp, future, watermark


class _Waker:
    """A pipe the event loop writes a byte to when a call finishes; the runner waits on it
    beside its inputs (never blocks the loop: a full pipe is awake already)."""

    def __init__(self) -> None:
        self.read_fd, self.write_fd = os.pipe()
        os.set_blocking(self.read_fd, False)
        os.set_blocking(self.write_fd, False)

    def fileno(self) -> int:
        return self.read_fd

    def wake(self, _: Any = None) -> None:
        try:
            os.write(self.write_fd, b".")
        except (BlockingIOError, OSError):
            pass

    def drain(self) -> None:
        try:
            while os.read(self.read_fd, 4096):
                pass
        except (BlockingIOError, OSError):
            pass

    def close(self) -> None:
        for fd in (self.read_fd, self.write_fd):
            os.close(fd)


@runs(AsyncSpec)
class AsyncOp(Operator):
    """Runs an ``AsyncFunction`` (or a function returning an awaitable)."""

    holds_watermarks = True

    def __init__(self, node: Transformation, plan: ChainPlan) -> None:
        super().__init__(node, plan)
        spec = node.spec
        assert isinstance(spec, AsyncSpec)
        self.obj = function_object(spec.fn, spec.method)
        self.call = getattr(self.obj, "async_invoke", self.obj)
        self.timeout_s = to_millis(spec.timeout, what=f"operator {node.name!r}") / 1000
        self.capacity, self.ordered = spec.capacity, spec.ordered
        self.queue: deque[_Entry] = deque()
        self.in_flight = 0
        self.wakeup = _Waker()
        self.loop: asyncio.AbstractEventLoop | None = None
        self.thread: threading.Thread | None = None

    def open(self, ctx: RuntimeContext) -> None:
        super().open(ctx)
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, name=f"async {self.node.name}", daemon=True)
        self.thread.start()

    def waker(self) -> Any:
        return self.wakeup

    # -- inputs -----------------------------------------------------------------------------------
    def process(self, chunk: Any) -> Any:
        stamps = timestamps_of(chunk) or [None] * len(chunk)
        out: list[tuple[Any, int | None]] = []
        for value, timestamp in zip(iter_records(chunk), stamps):
            while self.in_flight >= self.capacity:
                self._wait(first=True)
                out += self._ready()
            self._submit(value, timestamp)
        return self._chunk(out + self._ready())

    def _submit(self, value: Any, timestamp: int | None) -> None:
        assert self.loop is not None
        future = asyncio.run_coroutine_threadsafe(self._invoke(value), self.loop)
        future.add_done_callback(self.wakeup.wake)
        self.queue.append(_Entry(value, timestamp, future))
        self.in_flight += 1

    async def _invoke(self, value: Any) -> Any:
        result = self.call(value)
        if not inspect.isawaitable(result):
            return _NotAwaitable(result)  # not the user's exception: :meth:`_results` says what to change
        try:
            return await asyncio.wait_for(result, self.timeout_s)
        except TimeoutError:
            return _TIMED_OUT

    def process_watermark(self, timestamp: int) -> Any:
        self.queue.append(_Entry(None, None, watermark=timestamp))
        if timestamp == MAX_TIMESTAMP:  # the end: every input first
            return self.finish()
        return self._chunk(self._ready())

    # -- results ----------------------------------------------------------------------------------
    def _wait(self, first: bool) -> None:
        pending = [e.future for e in self.queue if e.future is not None and not e.future.done()]
        if not pending:
            return
        if first and not self.ordered:
            concurrent.futures.wait(pending, return_when=concurrent.futures.FIRST_COMPLETED)
        else:
            concurrent.futures.wait(pending[:1] if first else pending)

    def _ready(self) -> list[tuple[Any, int | None]]:
        """The outputs that may leave now, in order; the watermarks they free go to ``events``."""
        out: list[tuple[Any, int | None]] = []
        while self.queue:
            head = self.queue[0]
            if head.watermark is not None:
                self.queue.popleft()
                self.events.append(Watermark(head.watermark))
                continue
            if head.future.done():
                self.queue.popleft()
                out += self._results(head)
                continue
            if self.ordered:
                break
            segment = []  # unordered: what is done before the next watermark
            for entry in self.queue:
                if entry.watermark is not None:
                    break
                if entry.future.done():
                    segment.append(entry)
            for entry in segment:
                self.queue.remove(entry)
                out += self._results(entry)
            break
        return out

    def _results(self, entry: _Entry) -> list[tuple[Any, int | None]]:
        self.in_flight -= 1
        try:
            result = entry.future.result()
        except Exception as exc:
            raise JobError(f"operator {self.node.name!r}: async_invoke({entry.value!r:.80}) raised "
                           f"{type(exc).__name__}: {exc}") from exc
        if isinstance(result, _NotAwaitable):
            raise self._not_awaitable(result.value)
        called = "async_invoke"
        if result is _TIMED_OUT:
            called, result = "timeout", self._timed_out(entry.value)
        if result is None:
            return []
        if not isinstance(result, list | tuple):
            raise JobError(f"operator {self.node.name!r}: {called} must return the input's outputs as a list "
                           f"(PyFlink's AsyncFunction), got {type(result).__name__} {result!r:.80}")
        return [(value, entry.timestamp) for value in result]

    def _not_awaitable(self, returned: Any) -> ConfigError:
        """The error for a function that returned ``returned`` instead of an awaitable: it
        raised nothing, its definition is what to change."""
        method = self.call is not self.obj
        what = "async_invoke" if method else "the async function"
        how = "'async def async_invoke(self, value)'" if method else "'async def'"
        return ConfigError(
            f"{what} returned {type(returned).__name__} {returned!r:.80}, not an awaitable: define it with "
            f"{how}, or return an awaitable (e.g. loop.run_in_executor(...)); a function that returns its "
            "outputs at once belongs in map or flat_map, not AsyncDataStream", key=f"operator {self.node.name!r}")

    def _timed_out(self, value: Any) -> Any:
        timeout = getattr(self.obj, "timeout", None)
        if isinstance(self.obj, AsyncFunction) and type(self.obj).timeout is not AsyncFunction.timeout:
            return timeout(value)  # type: ignore[misc]
        raise JobError(f"operator {self.node.name!r}: async I/O of {value!r:.80} did not finish within "
                       f"{self.timeout_s * 1000:g} ms; raise the timeout, or override AsyncFunction.timeout(value) "
                       "to emit something instead")

    def _chunk(self, out: list[tuple[Any, int | None]]) -> Any:
        if not out:
            return []
        return stamped([v for v, _ in out], [t for _, t in out])

    def deadline(self) -> float | None:
        head = self.queue[0] if self.queue else None
        ready = head is not None and (head.watermark is not None or head.future.done() or (
            not self.ordered and any(e.future is not None and e.future.done() for e in self.queue)))
        return 0.0 if ready else None

    def on_deadline(self) -> Any:
        return self._chunk(self._ready())

    def finish(self) -> Any:
        self._wait(first=False)
        return self._chunk(self._ready())

    # -- checkpoints ------------------------------------------------------------------------------
    def snapshot_state(self, checkpoint_id: int) -> Any:
        return [(e.value, e.timestamp) for e in self.queue if e.watermark is None]

    def restore_state(self, states: list[Any], index: int, parallelism: int) -> None:
        inputs = [entry for state in states if state for entry in state]
        for value, timestamp in inputs[index::parallelism]:
            self._submit(value, timestamp)

    def reset(self) -> None:
        """Drop the queue: its calls are cancelled, their results never leave."""
        self._cancel()
        self.queue.clear()
        self.in_flight = 0
        self.wakeup.drain()

    def _cancel(self) -> None:
        for entry in self.queue:
            if entry.future is not None:
                entry.future.cancel()

    def close(self) -> None:
        if self.loop is not None:
            self._cancel()
            self.loop.call_soon_threadsafe(self.loop.stop)
            if self.thread is not None:
                self.thread.join(5)
            self.loop.close()
            self.loop = None
        self.wakeup.close()
        super().close()


#: what a call that ran past the timeout gives
_TIMED_OUT = object()


class _NotAwaitable:
    """What a call gives whose ``async_invoke`` returned ``value``, not an awaitable."""

    __slots__ = ("value",)

    def __init__(self, value: Any) -> None:
        self.value = value
