"""Checkpoints of jobs on a real session cluster, seen and steered from outside: ``GET
/v1/jobs/{id}/checkpoints``, ``/metrics``, Flink's asynchronous savepoint and stop operations
(``POST /v1/jobs/{id}/savepoints|stop``, ``GET .../savepoints/{request-id}``), the web UI's
checkpoints panel, and ``accelflow savepoint|stop`` then ``accelflow run --cluster -s``."""

from __future__ import annotations

import json
import re
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from rest_checkpoint_jobs import CommitLog, LaggingPaced, Paced, double, published
from rest_support import Session, cli, wait_until

from accelflow import Environment, JobCancelledError

N = 3000


def _env(tmp: Path, **extra: Any) -> Environment:
    return Environment({
        "parallelism.default": 1,
        "execution.checkpointing.interval": "100 ms",
        "execution.checkpointing.dir": str(tmp / "checkpoints"),
        **extra,
    })


def _post(session: Session, path: str, body: Any, headers: dict[str, str] | None = None) -> tuple[int, Any]:
    data = json.dumps(body).encode()
    return session.raw(path, "POST", {"Authorization": f"Bearer {session.token}",
                                      "Content-Type": "application/json",
                                      "Content-Length": str(len(data)), **(headers or {})}, data)


def _operation(session: Session, job: str, request_id: str) -> Any:
    def done() -> Any:
        body = session.get(f"/v1/jobs/{job}/savepoints/{request_id}")
        return body if body["status"]["id"] != "IN_PROGRESS" else None
    return wait_until(done, f"savepoint {request_id}", timeout=60)


def _metric(text: str, name: str, job: str) -> float:
    match = re.search(rf'^{name}{{job="{job}"}} (\S+)$', text, re.MULTILINE)
    assert match, f"{name} for {job} not in /metrics"
    return float(match[1])


def test_checkpoints_endpoint_metrics_and_rest_savepoint_and_stop(session: Session, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = _env(tmp_path)
    (env.from_source(LaggingPaced(N, chunk=20, delay=0.01, bounded=False), name="numbers")
        .map(double, name="double").sink_to(CommitLog(str(out)), name="log"))
    client = env.execute_async("checkpointed")
    job = client.job_id

    stats = wait_until(lambda: (s := session.get(f"/v1/jobs/{job}/checkpoints"))["counts"]["completed"] >= 2 and s,
                       "two completed checkpoints", timeout=60)
    assert stats["enabled"] and stats["counts"]["failed"] == 0 and stats["restored"] is None
    latest = stats["latest"]["completed"]
    assert latest["status"] == "COMPLETED" and not latest["savepoint"]
    assert latest["size"] > 0 and latest["duration_s"] >= 0 and latest["trigger_time"] > 0
    assert (Path(latest["path"]) / "_metadata").is_file()
    assert latest["path"].startswith(str(tmp_path / "checkpoints"))
    ids = [r["id"] for r in stats["history"]]
    assert ids == sorted(ids, reverse=True)  # newest first
    detail = session.get(f"/v1/jobs/{job}")
    assert detail["restarts"] == 0 and detail["checkpoints"]["job"] == job

    def lag_reported() -> str | None:
        text: str = session.get("/metrics")
        return text if "accelflow_kafka_lag{" in text else None
    metrics = wait_until(lag_reported, "the source's lag in /metrics")
    assert _metric(metrics, "accelflow_checkpoints_completed_total", job) >= 2
    assert _metric(metrics, "accelflow_checkpoints_failed_total", job) == 0
    assert _metric(metrics, "accelflow_checkpoint_size_bytes", job) > 0
    assert _metric(metrics, "accelflow_checkpoint_duration_seconds", job) >= 0
    assert _metric(metrics, "accelflow_job_restarts_total", job) == 0
    assert f'accelflow_kafka_lag{{job="{job}",partition="0",topic="orders"}} 7.0' in metrics

    # bad requests, each with a clear answer; none changes the job
    assert session.request(f"/v1/jobs/{job}/savepoints", "POST", token="wrong")[0] == 401
    status, body = _post(session, f"/v1/jobs/{job}/savepoints", {}, {"Origin": "http://evil.example"})
    assert status == 403 and "cross-origin" in body["error"]
    status, body = _post(session, "/v1/jobs/job-999/savepoints", {"target-directory": str(tmp_path)})
    assert status == 404 and body["error"].startswith("no such job: job-999")
    status, body = _post(session, f"/v1/jobs/{job}/savepoints", {"target-directory": "relative/dir"})
    assert status == 400 and "must be an absolute path" in body["error"]
    status, body = _post(session, f"/v1/jobs/{job}/savepoints", {"target": "/x"})
    assert status == 400 and "unknown field 'target'" in body["error"]
    status, body = _post(session, f"/v1/jobs/{job}/savepoints", {})
    assert status == 400 and "no savepoint directory" in body["error"]
    status, body = session.raw(f"/v1/jobs/{job}/savepoints", "POST",
                               {"Authorization": f"Bearer {session.token}", "Content-Length": "5"}, b"{nope")
    assert status == 400 and "not JSON" in body["error"]
    assert session.request(f"/v1/jobs/{job}/savepoints/0123abcd")[0] == 404

    status, body = _post(session, f"/v1/jobs/{job}/savepoints", {"target-directory": str(tmp_path / "sp")})
    assert status == 202, body
    done = _operation(session, job, body["request-id"])
    assert done["status"]["id"] == "COMPLETED", done
    savepoint = Path(done["operation"]["location"])
    assert savepoint.parent == tmp_path / "sp" and (savepoint / "_metadata").is_file()
    history = session.get(f"/v1/jobs/{job}/checkpoints")
    assert history["latest"]["savepoint"]["path"] == str(savepoint)
    assert session.get(f"/v1/jobs/{job}")["state"] == "RUNNING"  # a savepoint leaves it running

    status, body = _post(session, f"/v1/jobs/{job}/stop", {"targetDirectory": str(tmp_path / "stop")})
    assert status == 202, body
    done = _operation(session, job, body["request-id"])
    assert done["status"]["id"] == "COMPLETED", done
    assert (Path(done["operation"]["location"]) / "_metadata").is_file()
    result = client.wait(60)
    assert result.status == "FINISHED"
    assert session.get(f"/v1/jobs/{job}")["checkpoints"]["stopped_with_savepoint"] == done["operation"]["location"]
    records = published(out)
    assert records and len(records) == len(set(records))  # committed once each
    status, body = _post(session, f"/v1/jobs/{job}/savepoints", {"target-directory": str(tmp_path / "sp")})
    assert status == 409 and "has already ended (FINISHED)" in body["error"]


JOB = """\
import sys
from rest_checkpoint_jobs import CommitLog, Paced, double
from accelflow import Environment
out, checkpoints, bounded = sys.argv[1], sys.argv[2], sys.argv[3] == "bounded"
env = Environment({"parallelism.default": 1, "execution.checkpointing.interval": "100 ms",
                   "execution.checkpointing.dir": checkpoints})
env.from_source(Paced(%d, chunk=20, delay=0.01, bounded=bounded), name="numbers") \\
    .map(double, name="double").sink_to(CommitLog(out), name="log")
env.execute("resumable")
""" % N


def _running(session: Session, out: Path, tmp_path: Path, *options: str) -> tuple[subprocess.Popen[str], str]:
    """``accelflow run --cluster`` of the job script, unbounded, once it has checkpointed."""
    script = tmp_path / "job.py"
    script.write_text(JOB, encoding="utf-8")
    proc = subprocess.Popen(
        [sys.executable, "-m", "accelflow", "run", "--cluster", session.url, *options, str(script),
         str(out), str(tmp_path / "checkpoints"), "unbounded"],
        env=session.env, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    job = wait_until(lambda: next((j["id"] for j in session.get("/v1/jobs")["jobs"]
                                   if j["name"] == "resumable" and j["state"] == "RUNNING"), None),
                     "the job to run", timeout=60)
    wait_until(lambda: session.get(f"/v1/jobs/{job}/checkpoints")["counts"]["completed"] >= 1,
               "a checkpoint", timeout=60)
    return proc, job


def test_cli_savepoint_and_stop_then_run_s_resumes_exactly_once(session: Session, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    proc, job = _running(session, out, tmp_path)
    try:
        taken = cli(session.env, "savepoint", "--cluster", session.url, job, str(tmp_path / "sp"))
        assert taken.returncode == 0, taken.stderr
        path = Path(taken.stdout.strip())
        assert path.parent == tmp_path / "sp" and (path / "_metadata").is_file()
        assert f"accelflow run -s {path}" in taken.stderr

        unknown = cli(session.env, "savepoint", "job-999", str(tmp_path / "sp"))
        assert unknown.returncode == 1
        assert unknown.stderr.startswith("accelflow: error: no such job: job-999 (jobs on this cluster:")
        nowhere = cli(session.env, "savepoint", job)
        assert nowhere.returncode == 1 and "no savepoint directory" in nowhere.stderr

        stopped = cli(session.env, "stop", "--savepoint-path", str(tmp_path / "stop"), job)
        assert stopped.returncode == 0, stopped.stderr
        final = stopped.stdout.strip()
        assert (Path(final) / "_metadata").is_file()
        assert session.get(f"/v1/jobs/{job}")["state"] == "FINISHED"
        _, stderr = proc.communicate(timeout=60)
        assert proc.returncode == 0, stderr  # the submitting `accelflow run` sees it finish
        lines = stderr.splitlines()  # ... and says why it finished, and how to go on
        assert f"accelflow: {job} (resumable) was stopped with a savepoint at {final}" in lines, stderr
        assert (f"accelflow: resume with: accelflow run -s {final} --cluster {session.url} "
                f"{tmp_path / 'job.py'} {out} {tmp_path / 'checkpoints'} unbounded") in lines, stderr
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    first = published(out)
    assert first and len(first) == len(set(first))

    again = cli(session.env, "stop", job)
    assert again.returncode == 1 and f"{job} has already ended (FINISHED)" in again.stderr

    # resume on the cluster from the stop's savepoint: every record exactly once in all
    resumed = cli(session.env, "run", "--cluster", session.url, "-s", final, str(tmp_path / "job.py"),
                  str(out), str(tmp_path / "checkpoints"), "bounded", timeout=120)
    assert resumed.returncode == 0, resumed.stderr
    assert sorted(published(out)) == [2 * x for x in range(N)]
    restored = [j for j in session.get("/v1/jobs")["jobs"] if j["name"] == "resumable"][-1]
    detail = session.get(f"/v1/jobs/{restored['id']}/checkpoints")
    assert detail["restored"]["path"] == final


def test_ctrl_c_on_run_cluster_cancels_the_job_and_names_its_retained_checkpoint(
        session: Session, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    retain = "execution.checkpointing.externalized-checkpoint-retention=RETAIN_ON_CANCELLATION"
    proc, job = _running(session, out, tmp_path, "-D", retain)  # -D travels to the cluster
    try:
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
        proc.communicate()
    assert proc.returncode == 130, stderr
    assert f"accelflow: interrupted: cancelled {job} (resumable)" in stderr.splitlines()
    assert session.get(f"/v1/jobs/{job}")["state"] == "CANCELED"
    kept = re.search(r"^accelflow: its latest checkpoint is kept at (\S+)$", stderr, re.MULTILINE)
    assert kept and (Path(kept[1]) / "_metadata").is_file(), stderr
    assert (f"accelflow: resume with: accelflow run -s {kept[1]} -D {retain} --cluster {session.url} "
            f"{tmp_path / 'job.py'}") in stderr


def test_run_with_a_bad_savepoint_path_fails_before_submitting(session: Session, tmp_path: Path) -> None:
    script = tmp_path / "job.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    jobs = len(session.get("/v1/jobs")["jobs"])
    out = cli(session.env, "run", "--cluster", session.url, "-s", str(tmp_path / "nope"), str(script))
    assert out.returncode == 1
    assert out.stderr == (f"accelflow: error: {tmp_path / 'nope'}: no such checkpoint or savepoint "
                          "directory; check execution.state-recovery.path\n")
    assert not (tmp_path / "ran").exists() and len(session.get("/v1/jobs")["jobs"]) == jobs


def _check_ui(session: Session, job: str, tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright
    from test_done_when import CHROMIUM, CHROMIUM_ARGS

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(session.ui_url)
            row = page.locator(f'tr[data-job="{job}"]')
            expect(row).to_contain_text("RUNNING", timeout=15000)
            row.locator("a").click()
            panel = page.locator("#job-detail .checkpoints")
            expect(panel.locator("td.state-COMPLETED").first).to_have_text("COMPLETED", timeout=15000)
            expect(panel).to_contain_text("last restore: none")
            expect(page.locator("#job-detail .job-restarts")).to_have_text("restarts: 0")
            assert str(tmp_path / "checkpoints") in panel.inner_text()
        finally:
            browser.close()


def test_the_ui_shows_checkpoints_and_cancel_job_cancels_after_the_savepoint(
        session: Session, tmp_path: Path) -> None:
    out = tmp_path / "out"
    out.mkdir()
    env = _env(tmp_path)
    env.from_source(Paced(N, chunk=20, delay=0.01, bounded=False), name="numbers").sink_to(CommitLog(str(out)))
    client = env.execute_async("checkpoints in the UI")
    try:
        if Path("/usr/bin/chromium").exists():  # else only the REST part (tests/rest/test_ui.py)
            _check_ui(session, client.job_id, tmp_path)
        # Flink's cancel with savepoint: the savepoint completes, then the job is cancelled
        status, body = _post(session, f"/v1/jobs/{client.job_id}/savepoints",
                             {"target-directory": str(tmp_path / "sp"), "cancel-job": True})
        assert status == 202 and body["kind"] == "cancel", body
        done = _operation(session, client.job_id, body["request-id"])
        assert (Path(done["operation"]["location"]) / "_metadata").is_file()
        with pytest.raises(JobCancelledError):
            client.wait(60)
    finally:
        if client.status() == "RUNNING":
            client.cancel()
            with pytest.raises(JobCancelledError):
                client.wait(60)
