"""A job's progress in REST (``progress.records`` of ``GET /v1/jobs/{id}``) counts the records
its sources read as the user sees them: after a rollback in place it goes back to the restored
checkpoint's count, never to 0, and a job resumed from a savepoint counts on from the
savepoint's; a FINISHED job shows its total (review 7, finding 10)."""

from __future__ import annotations

import json
import threading
from pathlib import Path
from typing import Any

from rest_checkpoint_jobs import FailWhenLetGo, Paced
from rest_jobs import discard
from rest_support import Session, wait_until

from accelflow import Environment

N = 3000


def _env(tmp: Path, **extra: Any) -> Environment:
    return Environment({
        "parallelism.default": 2,
        "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.dir": str(tmp / "checkpoints"),
        "restart-strategy": "fixed-delay",
        "restart-strategy.fixed-delay.delay": "0 s",
        **extra,
    })


def test_progress_after_a_rollback_in_place_counts_from_the_checkpoint_and_ends_at_the_total(
        session: Session, tmp_path: Path) -> None:
    env = _env(tmp_path)
    gate = tmp_path / "checkpointed"
    # subtask 2/2 reads 1500..2999 and fails on 2500 in attempt 0, once a checkpoint completed;
    # subtask 1/2 survives
    env.from_source(Paced(N, chunk=20, delay=0.01), name="numbers") \
        .map(FailWhenLetGo(2500, str(gate)), name="flaky").add_sink(discard)
    client = env.execute_async("progress after a rollback")
    job = client.job_id
    seen: list[tuple[int, int]] = []  # (failovers, records), sampled while the job runs
    done = threading.Event()

    def sample() -> None:
        while not done.is_set():
            detail = session.get(f"/v1/jobs/{job}")
            seen.append((len(detail["failovers"]), detail["progress"]["records"]))

    sampler = threading.Thread(target=sample)
    sampler.start()
    try:
        wait_until(lambda: session.get(f"/v1/jobs/{job}/checkpoints")["counts"]["completed"] >= 1, "a checkpoint", 60)
        gate.touch()
        assert client.wait(120).status == "FINISHED"
    finally:
        done.set()
        sampler.join()
    detail = session.get(f"/v1/jobs/{job}")
    assert [f["path"] for f in detail["failovers"]] == ["in-place"], detail["failovers"]
    assert detail["checkpoints"]["restored"] is not None  # rolled back to a checkpoint, not the start
    assert detail["progress"] == {"records": N, "total": N}
    after = [records for failovers, records in seen if failovers]
    assert after and 0 not in after, seen  # back to the checkpoint's count at most, never to 0


def _post(session: Session, path: str, body: Any) -> Any:
    data = json.dumps(body).encode()
    status, answer = session.raw(path, "POST", {"Authorization": f"Bearer {session.token}",
                                                "Content-Type": "application/json",
                                                "Content-Length": str(len(data))}, data)
    assert status == 202, answer
    return answer


def test_a_job_resumed_from_a_savepoint_counts_on_from_the_savepoints_records(
        session: Session, tmp_path: Path) -> None:
    env = _env(tmp_path, **{"parallelism.default": 1})
    env.from_source(Paced(N, chunk=100, delay=0.005, bounded=False), name="numbers").add_sink(discard)
    client = env.execute_async("resumable progress")
    job = client.job_id
    wait_until(lambda: session.get(f"/v1/jobs/{job}")["progress"]["records"] == N, "every record read", 60)
    request = _post(session, f"/v1/jobs/{job}/stop", {"targetDirectory": str(tmp_path / "stop")})["request-id"]
    stopped = wait_until(lambda: (s := session.get(f"/v1/jobs/{job}/savepoints/{request}"))["status"]["id"]
                         != "IN_PROGRESS" and s, "the stop", 60)
    assert stopped["status"]["id"] == "COMPLETED", stopped
    client.wait(60)

    resumed = _env(tmp_path, **{"parallelism.default": 1,
                                "execution.state-recovery.path": stopped["operation"]["location"]})
    resumed.from_source(Paced(N, chunk=100, delay=0.005), name="numbers").add_sink(discard)
    again = resumed.execute_async("resumable progress")
    assert again.wait(60).status == "FINISHED"
    detail = session.get(f"/v1/jobs/{again.job_id}")
    assert detail["checkpoints"]["restored"]["path"] == stopped["operation"]["location"]
    assert detail["progress"] == {"records": N, "total": N}  # nothing left to read: all read before
