"""A subtask's input channels: which input of its head operator each feeds, checkpoint
barrier alignment, and event time over them (Flink's ``StatusWatermarkValve``: per input the
minimum watermark of its active channels, then the minimum over the inputs).

A channel starts with :class:`InputChannel` (its input), then carries chunks,
:class:`Barrier`, :class:`Watermark` and :class:`StreamStatus` messages in order, and ends
with ``None``; an ended channel counts as one whose watermark is ``MAX_TIMESTAMP`` (its
upstream sends no record any more).

Example of the events :meth:`InputGate.receive` gives the runner::

    ("records", chunk, input_index)   # a chunk of records of input ``input_index``
    ("watermark", timestamp)          # the subtask's input watermark advanced
    ("status", idle)                  # every input became idle, or one active again
    ("checkpoint", checkpoint_id)     # the barrier came on every live channel (aligned)
"""

from __future__ import annotations

from multiprocessing.connection import Connection
from typing import Any

from accelflow._errors import AccelflowInternalError, ChannelClosed
from accelflow.dataflow.eventtime import MAX_TIMESTAMP
from accelflow.runtime import Barrier, InputChannel, StreamStatus, Watermark
from accelflow.runtime.subtask._shm import ShmReceiver
from accelflow.runtime.subtask._watermarks import StatusWatermarkValve, WatermarkStatus


class InputGate:
    """The accepted channels ``conns`` of one subtask (their first message names their input)."""

    def __init__(self, conns: list[Connection]) -> None:
        self.receiver = ShmReceiver()
        self.input_of: dict[Connection, int] = {}
        self.channel_of: dict[Connection, int] = {}
        counts: dict[int, int] = {}
        for conn in conns:
            hello = self._recv(conn)
            if not isinstance(hello, InputChannel):
                raise AccelflowInternalError(f"a data channel started with {type(hello).__name__}, not InputChannel")
            self.input_of[conn] = hello.input_index
            self.channel_of[conn] = counts.get(hello.input_index, 0)
            counts[hello.input_index] = self.channel_of[conn] + 1
        inputs = max(counts) + 1 if counts else 1
        self.valves = [StatusWatermarkValve(counts.get(i, 0)) for i in range(inputs)]
        self.combined = StatusWatermarkValve(inputs)
        self.live: set[Connection] = set(conns)
        self.aligned: set[Connection] = set()  # channels whose barrier of ``aligning`` came: held back
        self.aligning: int | None = None

    def readable(self) -> list[Connection]:
        """The live channels not held back by a barrier."""
        return [c for c in self.live if c not in self.aligned]

    def _recv(self, conn: Connection) -> Any:
        try:
            return self.receiver.recv(conn)
        except (EOFError, OSError):
            raise ChannelClosed("an upstream subtask disconnected before ending its stream") from None

    def receive(self, conn: Connection) -> list[tuple[Any, ...]]:
        """Read one item of ``conn``; the events it makes (see the module)."""
        item = self._recv(conn)
        if isinstance(item, Watermark):
            return self._time(conn, item.timestamp)
        if isinstance(item, StreamStatus):
            return self._time(conn, WatermarkStatus.IDLE if item.idle else WatermarkStatus.ACTIVE)
        events: list[tuple[Any, ...]] = []
        if item is None:
            self.live.discard(conn)
            self.aligned.discard(conn)
            conn.close()
            events = self._time(conn, WatermarkStatus.ACTIVE) + self._time(conn, MAX_TIMESTAMP)
        elif isinstance(item, Barrier):
            if self.aligning is None or item.checkpoint_id > self.aligning:
                self.aligned.clear()  # a newer checkpoint replaces one never completed
                self.aligning = item.checkpoint_id
            if item.checkpoint_id == self.aligning:
                self.aligned.add(conn)
        else:
            return [("records", item, self.input_of[conn])]
        if self.aligning is not None and self.live <= self.aligned:
            events.append(("checkpoint", self.aligning))
            self.aligning = None
            self.aligned.clear()
        return events

    def _time(self, conn: Connection, what: int | WatermarkStatus) -> list[tuple[Any, ...]]:
        """A watermark or status of channel ``conn`` through its input's valve, then the one
        over the inputs."""
        index = self.input_of[conn]
        out: list[tuple[Any, ...]] = []
        for event in _through(self.valves[index], what, self.channel_of[conn]):
            for combined in _through(self.combined, event, index):
                if isinstance(combined, WatermarkStatus):
                    out.append(("status", combined is WatermarkStatus.IDLE))
                else:
                    out.append(("watermark", combined))
        return out

    def close(self) -> None:
        self.receiver.close_all()


def _through(valve: StatusWatermarkValve, what: Any, channel: int) -> list[int | WatermarkStatus]:
    if isinstance(what, WatermarkStatus):
        events = valve.input_watermark_status(what, channel)
    else:
        events = valve.input_watermark(what if isinstance(what, int) else what.timestamp, channel)
    return [e if isinstance(e, WatermarkStatus) else e.timestamp for e in events]
