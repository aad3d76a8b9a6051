"""``execute_and_collect`` on a session cluster (``accelflow run --cluster``) after a rollback
in place: every record exactly once (issue s7-fix-collect; the session's JobManager lost the
records collected before the restored checkpoint, as the embedded one did)."""

from __future__ import annotations

import sys
from pathlib import Path

from rest_support import Session

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "runtime"))  # collect_jobs

from collect_jobs import N, restored_a_checkpoint, run_job  # noqa: E402


def test_a_session_clusters_collect_is_exactly_once_after_a_rollback(session: Session, tmp_path: Path) -> None:
    out, stderr = run_job(tmp_path, {}, cluster=session.url, env=session.env)
    assert restored_a_checkpoint(tmp_path)
    assert sorted(out) == list(range(1, N + 1)), stderr
