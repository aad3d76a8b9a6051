"""NumPy source arrays whose memory something other than an array owns (issue 25.1): a
``memoryview`` (``np.frombuffer(memoryview(...))``, an array unpickled with protocol 5),
``bytes`` or an ``mmap``; and a failure to share an array reaches the job as one clear error,
not a thread's traceback."""

from __future__ import annotations

import mmap
import pickle
import resource
import subprocess
import sys
import textwrap
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from accelflow.connectors import ArraySource
from accelflow.runtime import ProcessArray, SharedArray, object_handles, release_arrays, share_arrays, shared_view

def _owned_elsewhere() -> dict[str, Any]:
    data = np.arange(1000, dtype=np.float64)
    region = mmap.mmap(-1, data.nbytes)
    region[:] = data.tobytes()
    return {
        "memoryview": np.frombuffer(memoryview(data.tobytes())),
        "bytes": np.frombuffer(data.tobytes()),
        "protocol 5": pickle.loads(pickle.dumps(data, protocol=5)),
        "mmap": np.frombuffer(region),
    }


def test_arrays_owned_by_a_memoryview_bytes_or_an_mmap_are_shared(tmp_path: Path) -> None:
    for what, array in _owned_elsewhere().items():
        source = ArraySource([array])
        shared = share_arrays(source, tmp_path).arrays[0]
        assert isinstance(shared, ProcessArray), what
        assert np.array_equal(shared.rows(0, 1000), np.arange(1000.)), what
        release_arrays(source)


def test_a_memmap_seen_through_a_memoryview_is_still_passed_by_its_file(tmp_path: Path) -> None:
    mapped = np.memmap(tmp_path / "data.bin", dtype=np.int64, mode="w+", shape=(100,))
    mapped[:] = np.arange(100)
    source = ArraySource([np.frombuffer(memoryview(mapped), dtype=np.int64)[10:]])
    shared = share_arrays(source, tmp_path).arrays[0]
    assert isinstance(shared, SharedArray)
    assert (shared.path, shared.offset, shared.shape) == (str(tmp_path / "data.bin"), 80, (90,))
    release_arrays(source)


def test_a_share_that_fails_leaves_nothing_shared_and_may_be_tried_again(tmp_path: Path) -> None:
    array = np.arange(10.)
    source = ArraySource([array])

    def full(_: Any) -> Any:
        raise OSError(28, "No space left on device")

    with pytest.raises(OSError, match="No space left"):
        share_arrays(source, tmp_path, full)
    assert shared_view(source) is source and source.arrays[0] is array and object_handles(source) == {}
    view = share_arrays(source, tmp_path)  # idempotent only once it worked
    assert shared_view(source) is view and isinstance(view.arrays[0], ProcessArray)
    release_arrays(source)


JOB = textwrap.dedent("""
    import sys
    import numpy as np
    from accelflow import Environment

    data = np.arange(int(sys.argv[1]), dtype=np.float64)
    if sys.argv[2] == "memoryview":
        data = np.frombuffer(memoryview(data.tobytes()))
    out = Environment().from_collection(data).map_batches(lambda b: b * 2).execute_and_collect_batch()
    print("sum", float(out.sum()))
""")


def _run(tmp_path: Path, *args: str, preexec: Any = None) -> subprocess.CompletedProcess[str]:
    """``accelflow run [options] job.py ROWS KIND`` (``args``: options, then ROWS and KIND)."""
    job = tmp_path / "job.py"
    job.write_text(JOB, encoding="utf-8")
    accelflow = Path(sys.executable).with_name("accelflow")  # the CLI of this environment
    return subprocess.run([str(accelflow), "run", "--no-progress", *args[:-2], str(job), *args[-2:]],
                          capture_output=True, text=True, timeout=120, cwd=tmp_path, preexec_fn=preexec)


def test_a_memoryview_array_runs_locally_without_a_thread_traceback(tmp_path: Path) -> None:
    done = _run(tmp_path, "1000", "memoryview")
    assert done.returncode == 0, done.stderr
    assert "sum 999000.0" in done.stdout
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr


def test_an_array_that_cannot_be_shared_fails_the_job_with_one_line_naming_the_source(tmp_path: Path) -> None:
    def limit() -> None:  # as `ulimit -f 2048`: the shared-memory copy of 8 MB is over it
        resource.setrlimit(resource.RLIMIT_FSIZE, (2 << 20, 2 << 20))

    done = _run(tmp_path, "-D", "pipeline.array-sharing=copy", "1000000", "arange", preexec=limit)
    assert done.returncode == 1
    assert done.stderr.strip().splitlines() == [
        "accelflow: error: source 'collection': cannot share its NumPy array with the subtasks "
        "(pipeline.array-sharing: copy): OSError: [Errno 27] File too large"]


def test_a_job_sent_to_a_session_carries_a_memmapped_array_by_its_file(tmp_path: Path) -> None:
    """A session cluster runs on the client's machine: an array mapped from a file reaches it
    as the file's name, offset, type and shape (a 784 MB array of images took 4 s to send
    pickled), and loads there mapped read-only from the same bytes."""
    from accelflow.runtime.client._remote import _Pickler
    from accelflow.runtime import dumps

    np.save(tmp_path / "a.npy", np.arange(2_000_000, dtype=np.float64))  # 16 MB
    mapped = np.load(tmp_path / "a.npy", mmap_mode="r")
    source = ArraySource([mapped[1000:], np.arange(5.0)])  # a slice of it, and a plain array
    blob = dumps(source, _Pickler)
    assert len(blob) < 64 << 10
    loaded = pickle.loads(blob)
    assert isinstance(loaded.arrays[0], np.memmap) and not loaded.arrays[0].flags.writeable
    assert np.array_equal(loaded.arrays[0], np.arange(1000, 2_000_000, dtype=np.float64))
    assert np.array_equal(loaded.arrays[1], np.arange(5.0))
    assert len(dumps(source)) > 16_000_000 - 8000  # the runtime's own pickling: by value


def test_a_copy_on_write_memmap_goes_by_value_with_what_was_written_into_it(tmp_path: Path) -> None:
    """``mode="c"``: the caller's writes are in its memory only, not in the file."""
    from accelflow.runtime.client._remote import _Pickler
    from accelflow.runtime import dumps

    np.save(tmp_path / "a.npy", np.zeros(1000))
    private = np.load(tmp_path / "a.npy", mmap_mode="c")
    private[0] = 7.0
    loaded = pickle.loads(dumps(ArraySource([private]), _Pickler))
    assert loaded.arrays[0][0] == 7.0
    source = ArraySource([private])
    shared = share_arrays(source, tmp_path).arrays[0]
    assert not isinstance(shared, SharedArray)  # read from the caller's memory, not the file
    release_arrays(source)
