"""User code of the failover tests (issue 28), in a light module so subtasks import it fast:
functions that count their ``open()`` calls and journal what they processed in files, fail or
hang once (a marker file says it happened), and the readers of those files.

Subtasks import this module by reference (cloudpickle), so it must not import pytest or the
test modules.
"""

from __future__ import annotations

import os
import signal
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from accelflow import KeyedProcessFunction, MapStateDescriptor, RuntimeContext, Source, Types
from accelflow.dataflow import even_ranges, iter_records


def _append(path: Path, line: str) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(line + "\n")


def _once(marker: Path) -> bool:
    """True for the first caller only, in any process (the marker file is created once)."""
    try:
        fd = os.open(marker, os.O_CREAT | os.O_EXCL | os.O_WRONLY)
    except FileExistsError:
        return False
    os.close(fd)
    return True


class Model:
    """A ``map_batches`` function standing for a model on a device: ``open()`` costs
    ``load_s`` seconds and appends ``<pid> <index> <attempt>`` to ``<dir>/opens.log``; each
    batch costs ``batch_s`` seconds and appends ``<time> <pid> <index> <first record>...`` to
    ``<dir>/calls.log``. ``fail`` says how it fails once, when it meets record ``at`` (any
    subtask, the first to meet it): ``raise``, ``kill`` (SIGKILL itself) or ``hang``
    (``time.sleep(10**6)``); with ``at2`` it fails so again at that record. ``fail_open``:
    the first ``open()`` of that attempt number raises (a replacement that cannot start), or
    with ``"standby"`` the first ``open()`` of a standby subtask (``ctx.is_standby()``, index -1).
    ``opens_first``: the failure at ``at`` waits (up to 30 s) until that many ``open()`` calls
    happened (e.g. a standby's replacement is open); ``opens_after``: once it failed, each batch
    waits so (e.g. for the next standby): the order does not depend on timing. ``ended_first``:
    the failure waits so until that many source splits ended (``Counted(ended=directory)``)."""

    def __init__(self, directory: str | Path, *, load_s: float = 0.0, batch_s: float = 0.0,
                 fail: str | None = None, at: int = -1, at2: int = -1, fail_open: int | str | None = None,
                 opens_first: int = 0, opens_after: int = 0, ended_first: int = 0) -> None:
        self.dir = Path(directory)
        self.load_s, self.batch_s = load_s, batch_s
        self.fail, self.at, self.at2, self.fail_open = fail, at, at2, fail_open
        self.opens_first, self.opens_after, self.ended_first = opens_first, opens_after, ended_first

    def open(self, ctx: RuntimeContext) -> None:
        time.sleep(self.load_s)
        self.ctx = ctx
        _append(self.dir / "opens.log", f"{os.getpid()} {ctx.index_of_this_subtask} {ctx.attempt_number}")
        if (ctx.attempt_number == self.fail_open or (ctx.is_standby() and self.fail_open == "standby")) \
                and _once(self.dir / "failed-open"):
            raise OSError(f"no model file for attempt {ctx.attempt_number}")

    def __call__(self, batch: Any) -> Any:
        records = [int(r) for r in iter_records(batch)]
        if self.batch_s:
            time.sleep(self.batch_s)
        if self.opens_after and (self.dir / "failure.log").exists():
            _wait_for_opens(self.dir, self.opens_after)
        for target, name in ((self.at, "failed"), (self.at2, "failed-again")):
            if target in records and _once(self.dir / name):
                self._fail(target)
        _append(self.dir / "calls.log", f"{time.time():.6f} {os.getpid()} {self.ctx.index_of_this_subtask} "
                + " ".join(map(str, records)))
        return batch

    def _fail(self, record: int) -> None:
        _wait_for_opens(self.dir, self.opens_first)
        _wait_for_lines(self.dir / "ended.log", self.ended_first)
        _append(self.dir / "failure.log", f"{time.time():.6f} {os.getpid()} {self.fail} {record}")
        if self.fail == "kill":
            os.kill(os.getpid(), signal.SIGKILL)
        if self.fail == "hang":
            time.sleep(10**6)
        raise ValueError(f"bad record {record}")


def _wait_for_opens(directory: Path, n: int) -> None:
    """Until ``n`` ``open()`` calls happened (at most 30 s)."""
    _wait_for_lines(directory / "opens.log", n)


def _wait_for_lines(path: Path, n: int) -> None:
    """Until ``path`` has ``n`` lines (at most 30 s)."""
    deadline = time.monotonic() + 30
    while n and (not path.exists() or len(path.read_text().splitlines()) < n) and time.monotonic() < deadline:
        time.sleep(0.01)


def opens(directory: str | Path) -> list[tuple[int, int, int]]:
    """``(pid, index, attempt)`` of every ``Model.open()`` so far."""
    path = Path(directory) / "opens.log"
    if not path.exists():
        return []
    return [tuple(map(int, line.split())) for line in path.read_text().splitlines()]  # type: ignore[misc]


def calls(directory: str | Path) -> list[tuple[float, int, int, list[int]]]:
    """``(time, pid, index, records)`` of every batch a ``Model`` processed so far."""
    path = Path(directory) / "calls.log"
    if not path.exists():
        return []
    out = []
    for line in path.read_text().splitlines():
        t, pid, index, *records = line.split()
        out.append((float(t), int(pid), int(index), [int(r) for r in records]))
    return out


class Counted(Source[int]):
    """``0..n-1`` in chunks of ``chunk``, ``delay`` seconds apart per split, with exact
    positions; ``bounded=False`` goes on idle after ``n`` (yielding ``[]``). With ``idle``,
    the source waits that long before each chunk, yielding ``[]`` every 50 ms (an idle
    source, not a hung one). With ``ended``, each split that ends appends ``<pid>`` to
    ``<ended>/ended.log``."""

    def __init__(self, n: int, chunk: int = 20, delay: float = 0.0, bounded: bool = True,
                 idle: float = 0.0, ended: str | Path | None = None) -> None:
        self.n, self.chunk, self.delay, self.bounded, self.idle = n, chunk, delay, bounded, idle
        self.ended = ended

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return list(even_ranges(self.n, parallelism))

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        raise NotImplementedError

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        first, stop = split
        for start in range(first, stop, self.chunk):
            if self.delay:
                time.sleep(self.delay)
            idle_until = time.monotonic() + self.idle
            while time.monotonic() < idle_until:
                time.sleep(0.05)
                yield []
            yield np.arange(start, min(start + self.chunk, stop), dtype=np.int64)
        if self.ended is not None:
            _append(Path(self.ended) / "ended.log", str(os.getpid()))
        while not self.bounded and not ctx.is_cancelled():
            time.sleep(0.05)
            yield []

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])

    def size_hint(self) -> int:
        return self.n


def published(directory: str | Path) -> list[int]:
    """The records a ``FileSink`` published in ``directory``, sorted."""
    return sorted(int(line) for p in Path(directory).glob("part-*") for line in p.read_text().splitlines())



class Delayed(KeyedProcessFunction):
    """Holds each record's value (``MapState`` by timestamp) and emits ``(key, timer time,
    value)`` at an event-time timer 100 ms after it; appends ``<pid> <index> <attempt>`` to
    ``<dir>/delayed-opens.log`` at each ``open()``. Its output depends on the records only
    (not on how channels interleave): a rollback that restored its state or timers wrongly
    shows."""

    def __init__(self, directory: str | Path) -> None:
        self.dir = Path(directory)

    def open(self, runtime_context: Any) -> None:
        _append(self.dir / "delayed-opens.log", f"{os.getpid()} {runtime_context.index_of_this_subtask} "
                f"{runtime_context.attempt_number}")
        self.held = runtime_context.get_map_state(MapStateDescriptor("held", Types.LONG(), Types.LONG()))

    def process_element(self, value: Any, ctx: Any) -> Any:
        self.held.put(ctx.timestamp(), value[1])
        ctx.timer_service().register_event_time_timer(ctx.timestamp() + 100)
        return None

    def on_timer(self, timestamp: int, ctx: Any) -> Any:
        value = self.held.get(timestamp - 100)
        self.held.remove(timestamp - 100)
        yield ctx.get_current_key(), timestamp, value
