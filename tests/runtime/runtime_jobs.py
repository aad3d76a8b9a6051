"""User code for the runtime tests, in a light module so subtasks import it fast.

Functions and classes defined at module level travel by reference (cloudpickle), so the
subtask processes import this module; it must not import pytest or the test modules.
"""

from __future__ import annotations

import itertools
import json
import os
import time
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import Any

from accelflow import RichFilterFunction, RichMapFunction, RuntimeContext, SinkFunction, Source
from accelflow.dataflow import Sink, even_ranges, iter_records


def describe(ctx: RuntimeContext, resource: str) -> dict[str, Any]:
    """What a subtask knows about itself and its devices, as plain data."""
    return {
        "taskexecutor": ctx.taskexecutor_id,
        "task_name": ctx.task_name,
        "operator_name": ctx.operator_name,
        "index": ctx.index_of_this_subtask,
        "parallelism": ctx.number_of_parallel_subtasks,
        "attempt": ctx.attempt_number,
        "infos": sorted(
            (i.address, i.get_property("uuid")) for i in ctx.get_external_resource_infos(resource)
        ),
        "shares": sorted((i.address, str(s)) for i, s in ctx.get_resource_shares(resource).items()),
        "CUDA_VISIBLE_DEVICES": os.environ.get("CUDA_VISIBLE_DEVICES"),
        "CUDA_DEVICE_ORDER": os.environ.get("CUDA_DEVICE_ORDER"),
        "FPGA_VISIBLE_DEVICES": os.environ.get("FPGA_VISIBLE_DEVICES"),
        "pid": os.getpid(),
    }


class Probe(RichMapFunction[Any, dict[str, Any]]):
    """Maps every record to what its subtask saw in ``open`` (see :func:`describe`)."""

    resource = "gpu"

    def open(self, ctx: RuntimeContext) -> None:
        self.seen = describe(ctx, self.resource)
        coordination = os.environ.get("TEST_COORDINATION_FILE")
        if coordination:
            state = json.loads(Path(coordination).read_text(encoding="utf-8"))
            self.seen["coordination"] = sorted(
                (a["index"], a["owner"]["pid"]) for a in state["allocations"]
            )

    def map(self, value: Any) -> dict[str, Any]:
        return dict(self.seen, record=value)


class FpgaProbe(Probe):
    resource = "fpga"


class SlowNumbers(Source[int]):
    """``0..n-1`` split round-robin, one record every ``delay`` seconds per split."""

    def __init__(self, n: int, delay: float) -> None:
        self.n, self.delay = n, delay

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [list(range(i, self.n, parallelism)) for i in range(parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        for x in split:
            time.sleep(self.delay)
            yield x

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for x in self.read(split, ctx):
            yield [x]

    def size_hint(self) -> int:
        return self.n


class Forever(Source[int]):
    """Counts up until the job is cancelled."""

    bounded = False

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        for i in itertools.count():
            if ctx.is_cancelled():
                return
            if i % 100 == 0:
                time.sleep(0.01)
            yield i


class Journal:
    """Appends events to one file per subtask: ``<dir>/<name>-<index>.log``."""

    def __init__(self, directory: str, name: str) -> None:
        self.directory, self.name = directory, name
        self.path = ""

    def start(self, ctx: RuntimeContext) -> None:
        self.path = os.path.join(self.directory, f"{self.name}-{ctx.index_of_this_subtask}.log")
        self.write(f"open {self.name} pid={os.getpid()} obj={id(self)}")

    def write(self, event: str) -> None:
        with open(self.path, "a", encoding="utf-8") as f:
            f.write(event + "\n")


class JournaledMap(RichMapFunction[int, int]):
    def __init__(self, directory: str) -> None:
        self.journal = Journal(directory, "map")

    def open(self, ctx: RuntimeContext) -> None:
        self.journal.start(ctx)

    def map(self, value: int) -> int:
        self.journal.write(f"map {value}")
        return value * 10

    def close(self) -> None:
        self.journal.write("close map")


class JournaledFilter(RichFilterFunction[int]):
    def __init__(self, directory: str) -> None:
        self.journal = Journal(directory, "filter")

    def open(self, ctx: RuntimeContext) -> None:
        self.journal.start(ctx)

    def filter(self, value: int) -> bool:
        self.journal.write(f"filter {value}")
        return value % 20 == 0

    def close(self) -> None:
        self.journal.write("close filter")


class JournaledSink(SinkFunction[int]):
    def __init__(self, directory: str) -> None:
        self.journal = Journal(directory, "sink")

    def open(self, ctx: RuntimeContext) -> None:
        self.journal.start(ctx)

    def invoke(self, value: int) -> None:
        self.journal.write(f"invoke {value}")

    def close(self) -> None:
        self.journal.write("close sink")


class WaitForFlag(SinkFunction[Any]):
    """A sink whose ``close`` waits (up to 30 s) until ``flag`` exists, keeping its subtask
    (and so the job) running after its inputs ended."""

    def __init__(self, flag: str) -> None:
        self.flag = flag

    def invoke(self, value: Any) -> None:
        pass

    def close(self) -> None:
        deadline = time.monotonic() + 30
        while not os.path.exists(self.flag) and time.monotonic() < deadline:
            time.sleep(0.01)


class Tenfold:
    """A plain class with ``__call__``: passed as a class, built once per subtask."""

    def __init__(self) -> None:
        self.pid = os.getpid()

    def __call__(self, value: int) -> tuple[int, int]:
        return value * 10, self.pid


class Instances(RichMapFunction[int, tuple[int, int, int]]):
    """Passed as a class: maps to (value, subtask index, id of this instance)."""

    def __init__(self) -> None:
        self.index = -1

    def open(self, ctx: RuntimeContext) -> None:
        self.index = ctx.index_of_this_subtask

    def map(self, value: int) -> tuple[int, int, int]:
        return value, self.index, id(self)


def fail_on(bad: int) -> Any:
    def check(value: int) -> int:
        if value == bad:
            raise ValueError(f"bad record {value}")
        return value

    return check


class JsonLinesSink(SinkFunction[Any]):
    """Writes records as JSON lines, one file per subtask under ``directory``; :meth:`read`
    (in the test) returns them all, subtask by subtask."""

    def __init__(self, directory: str) -> None:
        self.directory = directory
        self.file: Any = None

    def open(self, ctx: RuntimeContext) -> None:
        path = os.path.join(self.directory, f"part-{ctx.index_of_this_subtask:04d}.jsonl")
        self.file = open(path, "w", encoding="utf-8")

    def invoke(self, value: Any) -> None:
        self.file.write(json.dumps(value) + "\n")

    def close(self) -> None:
        if self.file is not None:
            self.file.close()

    def read(self) -> list[Any]:
        records = []
        for name in sorted(os.listdir(self.directory)):
            with open(os.path.join(self.directory, name), encoding="utf-8") as f:
                records += [json.loads(line) for line in f]
        return records


class GatedNumbers(Source[int]):
    """``0..n-1`` split round-robin; each split yields its first half at once, then waits
    (up to 30 s) until the file ``gate`` exists before yielding the rest."""

    def __init__(self, n: int, gate: str) -> None:
        self.n, self.gate = n, gate

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [list(range(i, self.n, parallelism)) for i in range(parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        half = len(split) // 2
        yield from split[:half]
        deadline = time.monotonic() + 30
        while not os.path.exists(self.gate) and time.monotonic() < deadline:
            time.sleep(0.01)
        yield from split[half:]

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        for x in self.read(split, ctx):
            yield [x]

    def size_hint(self) -> int:
        return self.n


class ProbeJson(Probe):
    """:class:`Probe` whose records are JSON text (for file sinks)."""

    def map(self, value: Any) -> Any:
        return json.dumps(super().map(value))


class FailFirstAttempt(RichMapFunction[int, tuple[int, int]]):
    """Raises on record ``bad`` in attempt 0; maps to (value, attempt) afterwards (the
    attempt of the context now: a subtask rolled back in place keeps its instance)."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def open(self, ctx: RuntimeContext) -> None:
        self.ctx = ctx

    def map(self, value: int) -> tuple[int, int]:
        attempt = self.ctx.attempt_number
        if attempt == 0 and value == self.bad:
            raise RuntimeError(f"flaky on {value}")
        return value, attempt


class FailInOpen(RichMapFunction[int, int]):
    def open(self, ctx: RuntimeContext) -> None:
        raise OSError(f"no model file for subtask {ctx.index_of_this_subtask}")

    def map(self, value: int) -> int:
        return value


class WhereAmI(RichMapFunction[Any, tuple[int, Any]]):
    """Maps ``x`` to ``(index of this subtask, x)``."""

    def open(self, ctx: RuntimeContext) -> None:
        self.index = ctx.index_of_this_subtask

    def map(self, value: Any) -> tuple[int, Any]:
        return self.index, value


class Context(RichMapFunction[Any, dict[str, Any]]):
    """Maps every record to its subtask's RuntimeContext fields."""

    def open(self, ctx: RuntimeContext) -> None:
        self.seen = {
            "task_name": ctx.task_name, "operator_name": ctx.operator_name,
            "index": ctx.index_of_this_subtask, "parallelism": ctx.number_of_parallel_subtasks,
            "attempt": ctx.attempt_number, "taskexecutor": ctx.taskexecutor_id,
            "cancelled": ctx.is_cancelled(), "repr": repr(ctx),
        }

    def map(self, value: Any) -> dict[str, Any]:
        return self.seen


class Splits(Source[tuple[int, str]]):
    """Five named splits; records are (split number, letter)."""

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [(i, "abcde"[i]) for i in range(5)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[tuple[int, str]]:
        yield split[0], f"{split[1]}@{ctx.index_of_this_subtask}"


def append_line(path: str, value: Any) -> None:
    with open(path, "a", encoding="utf-8") as f:
        f.write(f"{value}\n")


class BrokenSplits(Source[int]):
    def create_splits(self, parallelism: int) -> Sequence[Any]:
        raise FileNotFoundError("/data/shards: no such directory")

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        yield from ()


class RaiseTyped(RichMapFunction[int, int]):
    """Raises ``DataFormatError`` (with its ``path``) on record ``bad``."""

    def __init__(self, bad: int) -> None:
        self.bad = bad

    def map(self, value: int) -> int:
        if value == self.bad:
            from accelflow import DataFormatError

            raise DataFormatError("record header is truncated", path=f"/data/part-{value}.idx")
        return value


class Exit(RichMapFunction[int, int]):
    """Ends its subtask process silently with ``os._exit(code)`` (no Python error at all)."""

    def __init__(self, code: int) -> None:
        self.code = code

    def map(self, value: int) -> int:
        import os

        os._exit(self.code)


class SubtaskIndex(RichMapFunction[Any, tuple[int, Any]]):
    """``(index of this subtask, record)``."""

    def open(self, ctx: RuntimeContext) -> None:
        self.index = ctx.index_of_this_subtask

    def map(self, value: Any) -> tuple[int, Any]:
        return (self.index, value)


class CommitLog(Sink[Any]):
    """An honest two-phase-commit sink for tests: ``prepare_commit`` writes the records since
    the last one to a hidden file; ``commit`` publishes it by an atomic rename (a no-op when
    already published). Reading the published files gives what a reader of the output sees."""

    def __init__(self, directory: str) -> None:
        self.directory = directory

    def open(self, ctx: RuntimeContext) -> None:
        self.index, self.attempt = ctx.index_of_this_subtask, ctx.attempt_number
        self.buffer: list[Any] = []

    def write(self, chunk: Any) -> None:
        self.buffer.extend(iter_records(chunk))

    def prepare_commit(self, checkpoint_id: int) -> list[Any]:
        if not self.buffer:
            return []
        name = f"{checkpoint_id:06d}-{self.index}-{self.attempt}"
        hidden = os.path.join(self.directory, f".{name}")
        with open(hidden, "w", encoding="utf-8") as f:
            f.writelines(f"{json.dumps(r)}\n" for r in self.buffer)
        self.buffer = []
        return [name]

    def commit(self, committables: Sequence[Any]) -> None:
        for name in committables:
            hidden, final = os.path.join(self.directory, f".{name}"), os.path.join(self.directory, name)
            if os.path.exists(hidden):
                os.replace(hidden, final)
            elif not os.path.exists(final):
                raise AssertionError(f"committable {name} vanished")


def published(directory: str | Path) -> list[Any]:
    """Every record :class:`CommitLog` published in ``directory``."""
    out: list[Any] = []
    for path in sorted(Path(directory).iterdir()):
        if not path.name.startswith("."):
            out.extend(json.loads(line) for line in path.read_text(encoding="utf-8").splitlines())
    return out


class Paced(Source[int]):
    """``0..n-1`` in chunks of ``chunk`` records, ``delay`` seconds apart (per split),
    with checkpointable positions; ``bounded=False`` keeps it running after ``n`` (idle)."""

    def __init__(self, n: int, chunk: int = 50, delay: float = 0.01, bounded: bool = True) -> None:
        self.n, self.chunk, self.delay, self.bounded = n, chunk, delay, bounded

    def create_splits(self, parallelism: int) -> Sequence[Any]:
        return [(a, b) for a, b in even_ranges(self.n, parallelism)]

    def read(self, split: Any, ctx: RuntimeContext) -> Iterator[int]:
        raise NotImplementedError

    def read_chunks(self, split: Any, ctx: RuntimeContext) -> Iterator[Any]:
        first, stop = split
        for start in range(first, stop, self.chunk):
            time.sleep(self.delay)
            yield list(range(start, min(start + self.chunk, stop)))
        while not self.bounded and not ctx.is_cancelled():
            time.sleep(0.05)
            yield []

    def snapshot_split(self, split: Any, records_read: int, checkpoint_id: int) -> Any:
        return (split[0] + records_read, split[1])

    def size_hint(self) -> int:
        return self.n


class GenericPaced(Paced):
    """:class:`Paced` with the default snapshot (a :class:`ResumeSplit` that skips)."""

    snapshot_split = Source.snapshot_split  # type: ignore[assignment]


class OnItsGpu(RichMapFunction[Any, Any]):
    """Passes records through on the one GPU it was assigned (fails if it got another number),
    slowly enough (``delay`` s per chunk of records) for a test to kill a TaskExecutor."""

    def __init__(self, delay: float = 0.0) -> None:
        self.delay = delay

    def open(self, ctx: RuntimeContext) -> None:
        gpus = ctx.get_external_resource_infos("gpu")
        if len(gpus) != 1 or os.environ.get("CUDA_VISIBLE_DEVICES", "") == "":
            raise AssertionError(f"expected one visible GPU, got {gpus}")

    def map(self, value: Any) -> Any:
        if self.delay:
            time.sleep(self.delay)
        return value


class BadRecord(ValueError):
    """A user's own exception: an attribute, and a keyword-only constructor pickle cannot call."""

    def __init__(self, message: str, *, record: int) -> None:
        super().__init__(message)
        self.record = record


def fail_with_bad_record(bad: int) -> Any:
    def check(value: int) -> int:
        if value == bad:
            raise BadRecord(f"no label in record {value}", record=value)
        return value

    return check


def fail_with_a_local_class(bad: int) -> Any:
    """Raises an exception whose class no other process can import (it is local to ``check``)."""
    def check(value: int) -> int:
        class Unreachable(Exception):
            pass

        if value == bad:
            raise Unreachable(f"record {value}")
        return value

    return check


class KeyErrorThenValueError(RichMapFunction[int, int]):
    """Raises ``KeyError`` on its first attempt, ``ValueError`` on the others."""

    def open(self, ctx: RuntimeContext) -> None:
        self.attempt = ctx.attempt_number

    def map(self, value: int) -> int:
        if self.attempt == 0:
            raise KeyError(f"record {value}")
        raise ValueError(f"record {value} on attempt {self.attempt}")
