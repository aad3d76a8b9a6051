"""NumPy sources on a session cluster (issue 25.1): ``accelflow run --cluster URL job.py`` with
an array source runs (the session holds the array as it was unpickled, protocol 5, behind a
``memoryview``), and a job whose array cannot be shared fails with one line naming the source
while its subtasks end ``CANCELED`` in the REST API instead of waiting forever."""

from __future__ import annotations

import resource
import subprocess
import sys
import textwrap
from collections.abc import Iterator

import pytest

from rest_support import Session, _environment, gpu_definitions, stop_and_check

#: the session's file-size limit: writing more into one file (the shared-memory copy of an
#: array included) fails with EFBIG, as on a host with ``ulimit -f``
_FSIZE = 4 << 20

JOB = textwrap.dedent("""
    import sys
    import numpy as np
    from accelflow import Environment

    rows = int(sys.argv[1])
    data = np.arange(rows, dtype=np.float64)
    if sys.argv[2] == "memoryview":  # an array whose memory a memoryview owns
        data = np.frombuffer(memoryview(data.tobytes()))
    if sys.argv[2] == "memmap":  # sent by its file, mapped by the cluster
        np.save(sys.argv[0] + ".npy", data)
        data = np.load(sys.argv[0] + ".npy", mmap_mode="r")
    out = Environment().from_collection(data).map_batches(lambda b: b * 2).execute_and_collect_batch()
    print("sum", float(out.sum()), len(out))
""")


def _limit_file_size() -> None:
    resource.setrlimit(resource.RLIMIT_FSIZE, (_FSIZE, _FSIZE))


@pytest.fixture(scope="module")
def copying_session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """A session that copies source arrays into shared memory, under a 4 MB file-size limit."""
    tmp = tmp_path_factory.mktemp("session")
    session = Session(_environment(tmp, 2), tmp,
                      gpu_definitions(tmp, **{"pipeline.array-sharing": "copy"}), _limit_file_size)
    try:
        yield session
    finally:
        stop_and_check(session)


def _run(session: Session, rows: int, kind: str) -> subprocess.CompletedProcess[str]:
    job = session.tmp / "numpy_job.py"
    job.write_text(JOB, encoding="utf-8")
    return subprocess.run(
        [sys.executable, "-m", "accelflow", "run", "--no-progress", "--cluster", session.url,
         str(job), str(rows), kind],
        env=session.env, capture_output=True, text=True, timeout=120)


@pytest.mark.parametrize("kind", ["arange", "memoryview", "memmap"])
def test_a_numpy_source_runs_on_a_session_cluster(session: Session, kind: str) -> None:
    done = _run(session, 1000, kind)
    assert done.returncode == 0, done.stderr
    assert "sum 999000.0 1000" in done.stdout
    assert "Traceback" not in done.stderr and "Exception in thread" not in done.stderr


def test_an_array_the_session_cannot_share_fails_naming_the_source_and_ends_its_subtasks(
        copying_session: Session) -> None:
    small = _run(copying_session, 1000, "arange")  # 8 KB: within the limit
    assert small.returncode == 0, small.stderr
    done = _run(copying_session, 1_000_000, "arange")  # 8 MB: over it
    assert done.returncode == 1
    assert ("source 'collection': cannot share its NumPy array with the subtasks "
            "(pipeline.array-sharing: copy): OSError: [Errno 27] File too large") in done.stderr
    jobs = copying_session.get("/v1/jobs")["jobs"]
    failed = [j for j in jobs if j["state"] == "FAILED"]
    assert len(failed) == 1 and "File too large" in failed[0]["error"]
    detail = copying_session.get(f"/v1/jobs/{failed[0]['id']}")
    states = [(s["name"], s["state"], s["taskexecutor"]) for s in detail["subtasks"]]
    assert states == [("collection -> map_batches -> collect (1/1)", "CANCELED", None)]
    assert detail["subtasks_by_state"]["CANCELED"] == 1
