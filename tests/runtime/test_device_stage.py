"""``map_batches(device=...)``: the device stage (pinned buffers, a copy stream, prefetch),
with a fake CuPy written to a directory on ``PYTHONPATH``: NumPy underneath, copies that
happen only when an event recorded after them is waited for (so a computation that does not
wait, or a pinned buffer reused too early, gives an error or wrong numbers), every call logged.
It serves this process (the operator on its own) and the subtasks of a real local cluster."""

from __future__ import annotations

import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
from runtime_jobs import CommitLog, Paced, published

from accelflow import ConfigError, Environment, RuntimeContext
from accelflow.runtime.subtask._device import DeviceStage, PlainStage, open_stage
from accelflow.dataflow import MapBatchesSpec
from accelflow.runtime import ChainPlan
from accelflow.runtime.subtask._operators import MapBatchesOp

FAKE_CUPY = r'''"""A fake CuPy (NumPy underneath) that models asynchronous copies honestly: a copy made by
``ndarray.set(host, stream=s)`` or ``ndarray.get(stream=s, out=host, blocking=False)``
happens only when an event recorded on ``s`` after it is waited for or synchronized, so a
computation that does not wait, a pinned buffer reused too early, or outputs read before
their copy gives wrong numbers or an error. Every call is appended to $FAKE_CUPY_LOG."""
import os

import numpy

_pinned_ids = set()


def _log(line):
    path = os.environ.get("FAKE_CUPY_LOG")
    if path:
        with open(path, "a") as f:
            f.write(f"{os.getpid()} {line}\n")


class _Pinned(bytearray):
    pass


class OutOfMemoryError(MemoryError):
    """cupy.cuda.memory.OutOfMemoryError, with CuPy's message."""

    def __init__(self, size, total, limit):
        super().__init__(f"Out of memory allocating {size:,} bytes (allocated so far: {total:,} bytes, "
                         f"limit set to: {limit:,} bytes).")


class MemoryPool:
    """CuPy's default pool as far as limits go: CUPY_GPU_MEMORY_LIMIT (bytes) read when it is
    made, set_limit(size=...), and every device array's bytes held until it is freed."""

    def __init__(self):
        limit = os.environ.get("CUPY_GPU_MEMORY_LIMIT", "")
        self._limit = int(limit) if limit.isdigit() else 0
        self._used = 0

    def set_limit(self, size=None, fraction=None):
        self._limit = int(size or 0)

    def get_limit(self):
        return self._limit

    def used_bytes(self):
        return self._used

    def malloc(self, nbytes):
        if self._limit and self._used + nbytes > self._limit:
            raise OutOfMemoryError(nbytes, self._used, self._limit)
        self._used += nbytes

    def free(self, nbytes):
        self._used -= nbytes


_pool = None


def get_default_memory_pool():
    global _pool
    if _pool is None:
        _pool = MemoryPool()
    return _pool


class ndarray:
    def __init__(self, shape, dtype, data=None):
        self.shape, self.dtype = tuple(shape), numpy.dtype(dtype)
        self._held = 0
        get_default_memory_pool().malloc(self.nbytes)
        self._held = self.nbytes
        self._data = data
        self._host = None

    def __del__(self):
        if _pool is not None:
            _pool.free(self._held)

    def set(self, host, stream=None):
        base = host
        while getattr(base, "base", None) is not None:
            base = base.base
        base = getattr(base, "obj", base)  # a memoryview of the buffer
        _log(f"set {self.shape} pinned={isinstance(base, _Pinned)} buffer={id(base)}")
        self._host = host  # copied when an event recorded after this completes
        stream._pending.append(self._arrive)

    def _arrive(self):
        if self._data is None:
            self._data = numpy.array(self._host)  # the copy, from the pinned buffer as it is now

    @property
    def nbytes(self):
        return int(numpy.prod(self.shape)) * self.dtype.itemsize

    def _ready(self):
        if self._data is None:
            raise RuntimeError("a device array used before its copy was waited for")
        return self._data

    def __len__(self):
        return self.shape[0]

    def _op(self, other, fn):
        _log("use")
        other = other._ready() if isinstance(other, ndarray) else other
        out = fn(self._ready(), other)
        return ndarray(out.shape, out.dtype, out)

    def __mul__(self, other):
        return self._op(other, numpy.multiply)

    def __matmul__(self, other):
        return self._op(other, numpy.matmul)

    def __add__(self, other):
        return self._op(other, numpy.add)

    def get(self, stream=None, order="C", out=None, blocking=True):
        _log(f"get blocking={blocking}")
        if blocking:
            data = numpy.array(self._ready())
            if out is None:
                return data
            out[...] = data
            return out
        def arrive():
            out[...] = self._ready()
        stream._pending.append(arrive)  # out is written when an event recorded after this completes
        return out


def empty(shape, dtype):
    return ndarray(shape, dtype)


def ascontiguousarray(x):
    return x


def asarray(x):
    if isinstance(x, ndarray):
        return x
    x = numpy.asarray(x)
    return ndarray(x.shape, x.dtype, x.copy())


def argmax(x, axis):
    _log("use")
    out = numpy.argmax(x._ready(), axis=axis)
    return ndarray(out.shape, out.dtype, out)


class Event:
    def __init__(self, copies):
        self._copies = copies

    def _complete(self):
        for copy in self._copies:
            copy()
        self._copies = []

    def synchronize(self):
        _log("synchronize")
        self._complete()


class Stream:
    def __init__(self, non_blocking=False):
        _log(f"stream non_blocking={non_blocking}")
        self._pending = []

    def record(self):
        _log("record")
        event, self._pending = Event(self._pending), []
        return event

    def wait_event(self, event):
        _log("wait_event")
        event._complete()

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        return False


class cuda:
    Stream = Stream
    Event = Event

    class memory:
        OutOfMemoryError = OutOfMemoryError

    class runtime:
        @staticmethod
        def getDeviceCount():
            return int(os.environ.get("FAKE_CUPY_DEVICES", "1"))

    class Device:
        def __init__(self, i):
            self.id = i

        def use(self):
            pass

    @staticmethod
    def alloc_pinned_memory(nbytes):
        _log(f"pinned {nbytes}")
        return _Pinned(nbytes)
'''


@pytest.fixture
def fake_cupy(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """The fake CuPy importable here and in subtasks; its call log."""
    site = tmp_path / "site"
    (site / "cupy").mkdir(parents=True)
    (site / "cupy" / "__init__.py").write_text(FAKE_CUPY, encoding="utf-8")
    log = tmp_path / "cupy.log"
    monkeypatch.setenv("FAKE_CUPY_LOG", str(log))
    monkeypatch.setenv("PYTHONPATH", str(site))
    monkeypatch.syspath_prepend(str(site))  # also for subtasks forked from this process
    monkeypatch.delitem(sys.modules, "cupy", raising=False)
    yield log
    sys.modules.pop("cupy", None)


def _times_ten(batch: Any) -> Any:
    return batch * 10


def _log_lines(log: Path) -> list[str]:
    return [line.split(" ", 1)[1] for line in log.read_text().splitlines()] if log.exists() else []


def _most_in_flight(lines: list[str]) -> int:
    """The most batches copied (``set``) but not yet computed (``use``) at any moment."""
    in_flight = most = 0
    for line in lines:
        in_flight += line.startswith("set ") - (line == "use")
        most = max(most, in_flight)
    return most


def _operator(fn: Any, **options: Any) -> MapBatchesOp:
    env = Environment()
    env.from_sequence(0, 1).map_batches(fn, name="on device", **options)
    node = env._transformations[-1]
    op = MapBatchesOp(node, ChainPlan("on device", [node], (), rolling=False))
    op.open(RuntimeContext(task_name="t", index_of_this_subtask=0, number_of_parallel_subtasks=1,
                           attempt_number=0, assigned={}, taskexecutor_infos={}, taskexecutor_id="te"))
    return op


def test_batches_go_through_pinned_buffers_with_at_most_prefetch_in_flight(fake_cupy: Path) -> None:
    op = _operator(_times_ten, batch_size=4, device="cuda", prefetch=3)
    assert isinstance(op.stage, DeviceStage) and op.stage.backend.name == "cupy"
    out: list[int] = []
    for start in range(0, 40, 5):  # chunks of 5 into batches of 4: partial batches carried over
        out.extend(int(x) for x in op.process(np.arange(start, start + 5)))
        assert len(op.stage.in_flight) <= 2  # the third is computed as it arrives
        assert len(op.stage.computing) <= 1  # and its outputs are waited for after the next one's
    # 2 batches copied ahead and 1 computed whose outputs are on their way back
    assert out == [x * 10 for x in range(len(out))] and len(out) == 40 - 3 * 4
    assert list(op.finish()) == [x * 10 for x in range(len(out), 40)]
    lines = _log_lines(fake_cupy)
    assert _most_in_flight(lines) == 3
    sets = [line for line in lines if line.startswith("set ")]
    assert len(sets) == 10 and all("pinned=True" in line for line in sets)
    assert len({line.rsplit("buffer=", 1)[1] for line in sets}) == 3  # one per ring slot, reused
    assert lines.count("wait_event") == 10  # the compute stream waits for each batch's copy
    assert lines.count("get blocking=False") == 10  # outputs come back without a host wait
    assert lines.count("stream non_blocking=True") == 2  # a copy and a compute stream


def test_flush_at_a_barrier_and_finish_drain_everything_in_order(fake_cupy: Path) -> None:
    op = _operator(_times_ten, batch_size=3, device="cuda", prefetch=4)
    first = list(op.process(np.arange(0, 7)))  # batches [0..2], [3..5] in flight, 6 pending
    assert first == [] and len(op.stage.in_flight) == 2
    assert list(op.flush()) == [x * 10 for x in range(7)]  # the barrier sees every record
    assert not op.stage.in_flight and op.pending_len == 0 and op.deadline() is None
    assert list(op.process(np.arange(7, 12))) == []
    assert op.deadline() is not None  # a paused input: the in-flight batches are drained soon
    assert list(op.finish()) == [x * 10 for x in range(7, 12)]
    assert not op.stage.in_flight


def test_columns_move_only_numeric_arrays_and_come_back_as_columns(fake_cupy: Path) -> None:
    def scale(batch: Any) -> Any:
        pixels, names = batch
        assert type(pixels).__module__ == "cupy" and isinstance(names, np.ndarray)
        return pixels * 2, names

    op = _operator(scale, batch_size=2, device="cuda", prefetch=1)
    from accelflow.dataflow import Columns, iter_records

    out = op.process(Columns([np.arange(4), np.array(["a", "b", "c", "d"])]))
    assert list(iter_records(out)) == [(0, "a"), (2, "b")]  # the second batch's are on their way
    out = op.process(Columns([np.arange(4, 6), np.array(["e", "f"])]))
    assert isinstance(out, Columns)
    assert list(iter_records(out)) + list(iter_records(op.finish())) == [
        (4, "c"), (6, "d"), (8, "e"), (10, "f")]


def test_chunks_are_gathered_straight_into_the_pinned_buffer(fake_cupy: Path,
                                                            monkeypatch: pytest.MonkeyPatch) -> None:
    """No batch is assembled on the host first: the chunks are concatenated into the ring
    slot's pinned buffer (``np.concatenate(out=...)``), which is what goes to the device."""
    seen: list[Any] = []
    op = _operator(lambda b: seen.append(b._host) or b * 1, batch_size=6, device="cuda", prefetch=1)
    chunks = [np.arange(0, 2), np.arange(2, 5), np.arange(5, 6)]
    concatenate, outs = np.concatenate, []
    monkeypatch.setattr(np, "concatenate", lambda *a, **kw: outs.append(kw.get("out")) or concatenate(*a, **kw))
    for chunk in chunks:
        op.process(chunk)
    assert [int(x) for x in op.finish()] == list(range(6))
    assert len(outs) == 1 and outs[0] is not None  # one concatenation, into the buffer
    (host,) = seen
    assert host.base is not None and all(not np.shares_memory(host, c) for c in chunks)
    pinned = op.stage.ring[0].buffers[0]
    assert np.shares_memory(host, pinned)  # the pinned buffer itself, filled from the chunks


def test_outputs_are_read_only_after_their_copy_back(fake_cupy: Path) -> None:
    """The fake writes an asynchronous ``get`` into its pinned output only when an event after
    it has happened: a stage that read outputs without waiting would see zeros."""
    op = _operator(lambda b: b * 1 + 7, batch_size=3, device="cuda", prefetch=1)
    got = [int(x) for start in range(0, 30, 3) for x in op.process(np.arange(start, start + 3))]
    got += [int(x) for x in op.finish()]
    assert got == [x + 7 for x in range(30)]


def test_a_stage_that_skipped_the_copy_event_would_fail(fake_cupy: Path) -> None:
    """The fake is strict: computing before waiting for the copy raises."""
    import cupy

    stage = open_stage(_times_ten, MapBatchesSpec(_times_ten, device="cuda", prefetch=2), "op")
    assert isinstance(stage, DeviceStage)
    moved = stage._upload([np.arange(3)], stage.ring[0])
    with pytest.raises(RuntimeError, match="before its copy was waited for"):
        moved * 10
    assert isinstance(moved, cupy.ndarray)


def test_auto_without_a_gpu_calls_fn_on_numpy(fake_cupy: Path, monkeypatch: pytest.MonkeyPatch,
                                              caplog: pytest.LogCaptureFixture) -> None:
    monkeypatch.setenv("FAKE_CUPY_DEVICES", "0")
    monkeypatch.setitem(sys.modules, "torch", None)  # type: ignore[arg-type]
    seen: list[type] = []
    op = _operator(lambda b: seen.append(type(b)) or b + 1, batch_size=2, device="auto")
    assert isinstance(op.stage, PlainStage)
    assert "NumPy batches on the CPU (cupy: no visible CUDA device; torch: not installed)" in caplog.text
    assert list(op.process(np.arange(2))) == [1, 2] and seen == [np.ndarray]


def test_cuda_without_a_backend_says_what_to_install(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "cupy", None)  # type: ignore[arg-type]
    monkeypatch.setitem(sys.modules, "torch", None)  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match=r"operator 'on device'.*pip install 'accelflow\[cuda\]'.*"
                                          r"'accelflow\[torch\]'") as caught:
        _operator(_times_ten, device="cuda", device_backend=None)
    assert "(cupy: not installed; torch: not installed)" in str(caught.value)


@pytest.mark.parametrize("options, culprit", [
    ({"prefetch": 0}, "prefetch must be an integer from 1 to 64"),
    ({"prefetch": True}, "prefetch must be an integer"),
    ({"prefetch": 65}, "got 65"),
    ({"device": "gpu"}, "device must be None, 'auto' or 'cuda', got 'gpu'"),
    ({"device": "cuda", "device_backend": "jax"}, "device_backend must be None, 'cupy' or 'torch'"),
])
def test_bad_device_options_name_the_operator(options: dict[str, Any], culprit: str) -> None:
    stream = Environment().from_sequence(0, 1)
    with pytest.raises(ConfigError, match="operator 'scale'") as caught:
        stream.map_batches(_times_ten, name="scale", **options)
    assert culprit in str(caught.value)


def test_without_device_the_spec_holds_no_device() -> None:
    env = Environment()
    env.from_sequence(0, 1).map_batches(_times_ten, batch_size=4, prefetch=3)
    assert env._transformations[-1].spec == MapBatchesSpec(_times_ten, batch_size=4, prefetch=3)
    assert env._transformations[-1].spec.device is None


@pytest.mark.slow
def test_a_job_on_the_fake_gpu_is_exact_and_in_order_with_checkpoints(fake_cupy: Path, tmp_path: Path) -> None:
    """Subtasks import the fake CuPy; barriers every 20 ms flush what is in flight, and the
    end of the input drains the rest: every record once, in order."""
    out = tmp_path / "out"
    out.mkdir()
    env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "20 ms"})
    env.from_source(Paced(600, chunk=25, delay=0.002)) \
        .map_batches(_times_ten, batch_size=16, device="cuda", prefetch=2).map(lambda x: int(x)) \
        .sink_to(CommitLog(str(out)))
    env.execute("device stage")
    assert published(out) == [x * 10 for x in range(600)]
    lines = _log_lines(fake_cupy)
    assert _most_in_flight(lines) == 2
    assert sum(line.startswith("set ") for line in lines) == lines.count("use") >= 600 // 16


@pytest.mark.slow
def test_a_job_with_auto_and_no_gpu_gives_what_plain_calls_give(tmp_path: Path,
                                                                 monkeypatch: pytest.MonkeyPatch) -> None:
    results = []
    for device in (None, "auto"):
        env = Environment({"parallelism.default": 2})
        stream = env.from_sequence(0, 999).map_batches(_times_ten, batch_size=64, device=device)
        results.append(sorted(stream.execute_and_collect()))
    assert results[0] == results[1] == [x * 10 for x in range(1000)]


@pytest.mark.gpu
def test_a_real_gpu_gives_what_numpy_gives() -> None:
    pytest.importorskip("cupy")
    env = Environment()
    stream = env.from_sequence(0, 9999).map_batches(_times_ten, batch_size=256, device="cuda")
    assert sorted(stream.execute_and_collect()) == [x * 10 for x in range(10000)]
