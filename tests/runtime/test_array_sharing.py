"""NumPy sources reach the subtasks straight from the client's memory, through shared memory or
the caller's memory map, never a temporary ``.npy`` file, and the shared memory goes away when
the job ends, however it ends."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import threading
from pathlib import Path
from typing import Any

import cloudpickle
import numpy as np
import pytest

from accelflow import Environment, JobError
from accelflow.connectors import ArraySource
from accelflow.dataflow import Columns
from accelflow.runtime import (
    ProcessArray, SharedArray, _process_memory, release_arrays, share_arrays, shared_view,
)

CONF = {"taskmanager.numberOfTaskSlots": 2}


def _shm() -> set[str]:
    return set(os.listdir("/dev/shm")) if os.path.isdir("/dev/shm") else set()


def _read_all(source: ArraySource) -> list[Any]:
    """What the subtasks read: the source as pickled into a chain plan, every split."""
    remote = cloudpickle.loads(cloudpickle.dumps(source))
    return [c for split in remote.create_splits(3) for c in remote.read_chunks(split, None)]


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux")
def test_an_array_is_copied_once_into_anonymous_shared_memory_not_a_file(tmp_path: Path) -> None:
    array = np.arange(300_000, dtype=np.float32).reshape(100_000, 3)
    source = ArraySource([array])
    view = share_arrays(source, tmp_path, copy=True)
    (shared,) = view.arrays
    assert isinstance(shared, SharedArray) and shared.path.startswith(f"/proc/{os.getpid()}/fd/")
    assert list(tmp_path.iterdir()) == []  # nothing spilled
    assert len(cloudpickle.dumps(view)) < 10_000  # subtasks get where it is, not the data
    assert np.array_equal(np.concatenate(_read_all(view)), array)
    assert share_arrays(source, tmp_path, copy=True) is view  # idempotent
    assert source.arrays == [array]  # the user's source is left as it is
    release_arrays(source)
    assert not os.path.exists(shared.path)  # the memory is given back
    assert shared_view(source) is source


def test_a_memory_mapped_caller_array_is_passed_by_its_file_and_offset(tmp_path: Path) -> None:
    path = tmp_path / "data.bin"
    full = np.memmap(path, dtype=np.int64, mode="w+", offset=8, shape=(5000, 4))
    full[:] = np.arange(20_000).reshape(5000, 4)
    full.flush()
    view = full[1000:3000]  # a slice starts inside the mapping
    source = ArraySource([view, full[1000:3000, 0:1]])  # the second is not contiguous
    workdir = tmp_path / "work"
    workdir.mkdir()
    mapped, copied = share_arrays(source, workdir, copy=True).arrays
    assert isinstance(mapped, SharedArray)
    assert (mapped.path, mapped.offset, mapped.shape) == (str(path), 8 + 1000 * 4 * 8, (2000, 4))
    assert isinstance(copied, SharedArray) and copied.path != str(path)
    chunks = _read_all(shared_view(source))
    assert all(isinstance(c, Columns) for c in chunks)
    assert np.array_equal(np.concatenate([c.columns()[0] for c in chunks]), np.asarray(view))
    assert np.array_equal(np.concatenate([c.columns()[1] for c in chunks]), np.asarray(view[:, 0:1]))
    assert list(workdir.iterdir()) == []
    release_arrays(source)


def test_object_and_empty_arrays_travel_pickled(tmp_path: Path) -> None:
    objects = np.array([{"a": 1}, None, "x"], dtype=object)
    source = ArraySource([objects])
    view = share_arrays(source, tmp_path)
    assert view.arrays[0] is objects
    assert [r for c in _read_all(view) for r in c] == list(objects)
    empty = ArraySource([np.zeros((0, 3))])
    assert isinstance(share_arrays(empty, tmp_path).arrays[0], np.ndarray)
    release_arrays(source)
    release_arrays(empty)


def _fail_on_seven(batch: Any) -> Any:
    if (batch == 7).any():
        raise ValueError("seven")
    return batch


@pytest.mark.parametrize("fails", [False, True])
def test_a_job_gives_the_shared_memory_back_when_it_ends(fails: bool) -> None:
    before = _shm()
    array = np.arange(20_000, dtype=np.int32)
    env = Environment(CONF)
    stream = env.from_collection(array, parallelism=2)
    out = stream.map_batches(_fail_on_seven if fails else (lambda b: b + 1), parallelism=2)
    out.add_sink(lambda x: None)
    client = env.execute_async()
    (source,) = [t.source for t in client.graph.sources if isinstance(t.source, ArraySource)]
    if fails:
        with pytest.raises(JobError, match="seven"):
            client.wait(120)
    else:
        assert client.wait(120).operators["collection"]["records_out"] == 20_000
    client.jobmanager.state.jobs["job-1"].done.wait(5)
    for _ in range(100):  # the release runs on the job's end, in its own thread
        if shared_view(source) is source:
            break
        client._done.wait(0.05)
    assert shared_view(source) is source and source.arrays[0] is array
    assert _shm() == before  # nothing named in /dev/shm


_KILLED_CLIENT = """
    import sys, time
    import numpy as np
    from accelflow.connectors import ArraySource
    from accelflow.runtime import share_arrays
    source = ArraySource([np.ones((1000, 100))])
    view = share_arrays(source, __import__("pathlib").Path(sys.argv[1]), copy=True)
    print(view.arrays[0].path, flush=True)
    time.sleep(60)
"""


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux")
def test_a_sigkilled_client_leaves_no_shared_memory_behind(tmp_path: Path) -> None:
    before = _shm()
    proc = subprocess.Popen([sys.executable, "-c", textwrap.dedent(_KILLED_CLIENT), str(tmp_path)],
                            stdout=subprocess.PIPE)
    assert proc.stdout is not None
    path = proc.stdout.readline().decode().strip()
    assert os.path.exists(path)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    proc.stdout.close()
    assert not os.path.exists(path) and _shm() == before and list(tmp_path.iterdir()) == []


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux")
def test_chunks_are_views_of_the_shared_memory_and_writing_one_stays_private(tmp_path: Path) -> None:
    array = np.arange(10_000, dtype=np.int64)
    source = ArraySource([array])
    view = share_arrays(source, tmp_path, copy=True)
    first, second = (cloudpickle.loads(cloudpickle.dumps(view)) for _ in range(2))
    chunk = next(iter(first.read_chunks((0, 10_000), None)))
    assert not chunk.flags.owndata  # no copy per chunk
    chunk *= -1  # a user function may write into its batch
    assert chunk[5] == -5
    again = next(iter(second.read_chunks((0, 10_000), None)))  # another subtask's reading
    assert again[5] == 5 and array[5] == 5
    release_arrays(source)


def _negate_in_place(batch: Any) -> Any:
    batch *= -1
    return batch


def test_a_batch_function_that_writes_into_its_batch_changes_no_one_elses_data() -> None:
    array = np.arange(20_000, dtype=np.int32)
    env = Environment(CONF)
    stream = env.from_collection(array, parallelism=2)
    first = stream.map_batches(_negate_in_place, parallelism=2).execute_and_collect()
    assert sorted(first) == sorted((-array).tolist())
    assert array[7] == 7  # the caller's array is untouched


@pytest.mark.skipif(not hasattr(os, "memfd_create"), reason="memfd is Linux")
def test_release_without_waiting_frees_the_memory_on_its_own_thread(tmp_path: Path) -> None:
    array = np.ones(1_000_000, dtype=np.uint8)
    source = ArraySource([array])
    (shared,) = share_arrays(source, tmp_path, copy=True).arrays
    release_arrays(source, wait=False)
    assert shared_view(source) is source  # at once
    for _ in range(200):
        if not os.path.exists(shared.path):
            break
        threading.Event().wait(0.01)
    assert not os.path.exists(shared.path)



_READ_IN_ANOTHER_PROCESS = """
    import sys
    import cloudpickle, numpy as np
    source = cloudpickle.loads(sys.stdin.buffer.read())
    chunks = [c.columns() for split in source.create_splits(3) for c in source.read_chunks(split, None)]
    assert all(a.flags.owndata and a.flags.writeable for c in chunks for a in c)  # fresh arrays
    sys.stdout.buffer.write(cloudpickle.dumps([np.concatenate(c) for c in zip(*chunks)]))
"""


def test_an_array_is_read_out_of_the_clients_memory_by_another_process(tmp_path: Path) -> None:
    array = np.arange(300_000, dtype=np.float32).reshape(100_000, 3)
    strided = np.arange(200_000, dtype=np.int16).reshape(100_000, 2)[:, ::-1]  # not contiguous
    source = ArraySource([array, strided])
    view = share_arrays(source, tmp_path)
    mine, held = view.arrays
    assert isinstance(mine, ProcessArray) and (mine.pid, mine.address) == (os.getpid(), array.ctypes.data)
    assert isinstance(held, ProcessArray) and held.address != strided.ctypes.data  # a contiguous copy
    assert list(tmp_path.iterdir()) == []
    blob = cloudpickle.dumps(view)
    assert len(blob) < 10_000  # where the arrays are, not the data
    out = subprocess.run([sys.executable, "-c", textwrap.dedent(_READ_IN_ANOTHER_PROCESS)],
                         input=blob, capture_output=True, check=True).stdout
    first, second = cloudpickle.loads(out)
    assert np.array_equal(first, array) and np.array_equal(second, strided)
    release_arrays(source)
    assert shared_view(source) is source


def test_a_chunk_read_from_the_client_is_the_readers_own(tmp_path: Path) -> None:
    array = np.arange(10_000, dtype=np.int64)
    source = ArraySource([array])
    reader = cloudpickle.loads(cloudpickle.dumps(share_arrays(source, tmp_path)))
    chunk = next(iter(reader.read_chunks((0, 10_000), None)))
    chunk *= -1  # a user function may write into its batch
    assert array[5] == 5 and next(iter(reader.read_chunks((0, 10_000), None)))[5] == 5
    release_arrays(source)


def test_a_kernel_that_forbids_reading_another_process_gets_the_copy(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    yama = tmp_path / "ptrace_scope"
    yama.write_text("1\n")
    monkeypatch.setattr(_process_memory, "_YAMA", str(yama))
    assert "ptrace_scope is 1" in (_process_memory.unreadable_because() or "")
    source = ArraySource([np.arange(1000)])
    assert isinstance(share_arrays(source, tmp_path / "absent").arrays[0], SharedArray)
    release_arrays(source)


def test_reading_from_a_process_that_is_gone_names_it_and_the_way_out() -> None:
    gone = subprocess.Popen([sys.executable, "-c", "pass"])
    gone.wait()
    array = ProcessArray(gone.pid, 0x10000, np.dtype(np.int64), (100,))
    with pytest.raises(JobError, match=rf"process {gone.pid} .*pipeline.array-sharing: copy"):
        array.rows(0, 10)


def test_a_job_reads_its_array_either_way() -> None:
    array = np.arange(30_000, dtype=np.int32).reshape(10_000, 3)
    for sharing in ("auto", "copy"):
        env = Environment({**CONF, "pipeline.array-sharing": sharing})
        out = env.from_collection(array, parallelism=2).map_batches(lambda b: b * 2, parallelism=2)
        assert np.array_equal(out.execute_and_collect_batch(), array * 2)


@pytest.mark.parametrize("sharing", ["auto", "copy"])
def test_an_array_changed_after_from_collection_and_before_execute_is_read_as_changed(sharing: str) -> None:
    """Spark's SparkContext.parallelize: "Parallelize acts lazily. If seq is a mutable
    collection and is altered after the call to parallelize and before the first action on
    the RDD, the resultant RDD will reflect the modified collection." """
    array = np.zeros(5000, dtype=np.int64)
    stream = Environment({**CONF, "pipeline.array-sharing": sharing}).from_collection(array, parallelism=2)
    array[:] = np.arange(5000)
    assert np.array_equal(stream.map_batches(lambda b: b, parallelism=2).execute_and_collect_batch(),
                          np.arange(5000))
