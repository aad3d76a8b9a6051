"""How records, watermarks and statuses move through a subtask's chain of operators and out
of it, in order: a chunk goes through the operators after the one that made it; a
watermark goes through every operator (each releases what advancing to it fires, e.g.
windows) and then to every output edge; side outputs go to the edges that read them.

The runner (``_runner.py``) mixes this in; it sets :attr:`ops`, :attr:`routers` and
:attr:`status`.

Example of a chain ``timestamps -> window -> map`` with a late-data side output read by
another chain: a chunk into ``timestamps`` comes out stamped, the window keeps it; a
watermark from the input stops at ``timestamps`` (it makes its own); the periodic watermark
``timestamps`` makes goes into the window, whose fired results go through ``map`` to the main
edge, then the watermark to both edges; a late record goes out on the side edge at once.
"""

from __future__ import annotations

import time
from typing import Any

from accelflow.dataflow.eventtime import MAX_TIMESTAMP, MIN_TIMESTAMP
from accelflow.runtime import Collected, StreamStatus, SubtaskProgress, Watermark, send_pickled
from accelflow.runtime.subtask._operators import Operator
from accelflow.runtime.subtask._partition import Router
from accelflow.runtime.subtask._sink_operators import CollectSink

PROGRESS_EVERY_S = 0.25


class ChainIO:
    ops: list[Operator]
    status: Any
    desc: Any
    source: Any
    last_progress: float
    #: the routers of the chain's main output
    routers: list[Router]
    #: every router (side outputs too): watermarks, statuses and barriers go to all
    all_routers: list[Router]
    #: (node index, tag) -> the routers of that side output
    side_routers: dict[tuple[int, str], list[Router]]
    #: the watermark of the chain's input (MIN_TIMESTAMP until the first)
    input_watermark: int = MIN_TIMESTAMP

    def _route(self, routers: list[Router], offset: int) -> None:
        """Sort ``routers`` into the main output's and each side output's; ``offset``: the
        index in the chain of the first operator (1 after a source)."""
        self.all_routers = routers
        self.routers = [r for r in routers if r.edge.side is None]
        self.side_routers = {}
        for r in routers:
            if r.edge.side is not None:
                node = r.edge.node - offset if r.edge.node >= 0 else len(self.ops) - 1
                self.side_routers.setdefault((node, r.edge.side), []).append(r)

    def _push(self, chunk: Any, start: int, input_index: int = 0) -> None:
        """``chunk`` through the operators from ``start`` on (of input ``input_index`` of the
        first), then out."""
        ops = self.ops
        for i in range(start, len(ops)):
            op = ops[i]
            op.records_in += len(chunk)
            chunk = op.process_input(chunk, input_index) if input_index and i == start else op.process(chunk)
            n = len(chunk)
            op.records_out += n
            if op.side:
                self._side(i, op)
            if op.events:  # after the chunk: what it made (e.g. a status) follows it
                if n:
                    self._push(chunk, i + 1)
                self._events(i, op)
                return
            if not n:
                break
        else:
            self._emit(chunk)
        self._progress()

    def _after(self, i: int, op: Operator, out: Any) -> None:
        """What ``ops[i]`` released outside :meth:`_push` (timers, flushes, the end): side
        outputs, then the chunk, then the watermarks and statuses it made."""
        if op.side:
            self._side(i, op)
        if len(out):
            op.records_out += len(out)
            self._push(out, i + 1)
        if op.events:
            self._events(i, op)

    def _flush_ops(self, take: Any, only: Any = None) -> None:
        """Push what ``take(op)`` releases down the rest of the chain, in chain order."""
        for i, op in enumerate(self.ops):
            if only is None or op in only:
                self._after(i, op, take(op))

    def _side(self, i: int, op: Operator) -> None:
        side, op.side = op.side, []
        for tag, chunk in side:
            for router in self.side_routers.get((i, tag), ()):
                router.send(chunk)

    def _events(self, i: int, op: Operator) -> None:
        events, op.events = op.events, []
        for event in events:
            if isinstance(event, Watermark):
                self._watermark(event.timestamp, i + 1)
            else:
                self._status(event.idle, i + 1)

    def _watermark(self, timestamp: int, start: int = 0) -> None:
        """Watermark ``timestamp`` through the operators from ``start`` on, then out."""
        if start == 0:
            if timestamp <= self.input_watermark:
                return
            self.input_watermark = timestamp
        for i in range(start, len(self.ops)):
            op = self.ops[i]
            if op.generates_watermarks and timestamp < MAX_TIMESTAMP:
                return
            self._after(i, op, op.process_watermark(timestamp))
            if op.holds_watermarks:
                return  # it passes the watermark on (in its events) after its earlier outputs
        watermark = Watermark(timestamp)
        for router in self.all_routers:
            router.broadcast(watermark)

    def _status(self, idle: bool, start: int = 0) -> None:
        """The input (or the operator before ``start``) became idle or active again."""
        if any(op.generates_watermarks for op in self.ops[start:]):
            return
        status = StreamStatus(idle)
        for router in self.all_routers:
            router.broadcast(status)

    def _emit(self, chunk: Any) -> None:
        if self.ops and isinstance(self.ops[-1], CollectSink):
            send_pickled(self.status.send, chunk, lambda c: Collected(self.desc.key, c))
        for router in self.routers:
            router.send(chunk)

    def _idle(self) -> None:
        """The input has nothing more for now: send what is held back for latency only."""
        holding = [op for op in self.ops if op.flushes_when_idle and op.holds()]
        if holding:
            self._flush_ops(lambda op: op.flush(), holding)

    def _timers(self) -> None:
        now = time.monotonic()
        due = [op for op in self.ops if (d := op.deadline()) is not None and d <= now]
        if due:
            self._flush_ops(lambda op: op.on_deadline(), due)

    def _next_deadline(self) -> float | None:
        deadlines = [d for op in self.ops if (d := op.deadline()) is not None]
        return max(0.0, min(deadlines) - time.monotonic()) if deadlines else None

    def _progress(self) -> None:
        now = time.monotonic()
        if now - self.last_progress >= PROGRESS_EVERY_S:
            self.last_progress = now
            metrics = self.source.metrics() if self.source is not None else {}
            self.status.send(SubtaskProgress(self.desc.key, self._counts(), metrics))

    def _counts(self) -> list[tuple[int, int]]:
        raise NotImplementedError
