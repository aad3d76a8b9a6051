"""REST contract tests against a running session cluster with fake GPUs."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from rest_support import Session, start_session, stop_and_check, wait_until
from rest_jobs import Slowly, discard, identity

from accelflow import AllocationError, Environment, JobCancelledError
from accelflow.runtime.rest._rest import UNAUTHORIZED


def _submit(gpu: float, parallelism: int, name: str) -> Any:
    env = Environment()
    (
        env.from_source(Slowly(), parallelism=parallelism)
        .map(identity, name="classify", parallelism=parallelism, resources={"gpu": gpu})
        .add_sink(discard)
    )
    return env.execute_async(name)


def _holders(session: Session) -> dict[str, list[tuple[str, str, str]]]:
    return {
        key: sorted((h["job"], h["subtask"], h["share"]["exact"]) for h in d["holders"])
        for key, d in session.devices().items()
    }


def _cancel(session: Session, client: Any) -> None:
    status, body = session.request(f"/v1/jobs/{client.job_id}/cancel", "POST")
    assert (status, body) == (202, {"job": client.job_id, "cancel_requested": True})
    with pytest.raises(JobCancelledError, match=rf"^{client.job_id} \(.*\) was cancelled"):
        client.wait(30)
    # a stopped subtask's shares come back once its TaskExecutor found no process of its left
    # on the GPU (docs/gpu.md, "Reconciliation")
    wait_until(lambda: not any(job == client.job_id for held in _holders(session).values() for job, _, _ in held),
               f"{client.job_id}'s shares to come back")


def test_holders_appear_and_disappear_as_subtasks_start_and_end(session: Session) -> None:
    client = _submit(0.25, 2, "quarter")
    job = client.job_id
    held = wait_until(lambda: [h for hs in _holders(session).values() for h in hs], "holders")
    assert sorted(held) == [(job, "classify -> sink (1/2)", "1/4"), (job, "classify -> sink (2/2)", "1/4")]
    device = session.devices()["taskexecutor-1/0"]  # pack: both on the first GPU
    assert device["free"] == {"exact": "1/2", "value": 0.5}
    assert [h["operator"] for h in device["holders"]] == ["classify", "classify"]
    assert device["properties"]["uuid"] == "GPU-00000000-0000-4000-8000-000000000000"
    detail = session.get(f"/v1/jobs/{job}")
    assert detail["state"] == "RUNNING"
    assert {o["name"]: (o["parallelism"], o["resources"]) for o in detail["operators"]} == {
        "Slowly": (2, {}), "classify": (2, {"gpu": {"exact": "1/4", "value": 0.25}}), "sink": (2, {}),
    }
    classify = [s for s in detail["subtasks"] if s["name"].startswith("classify")]
    assert [(s["taskexecutor"], s["devices"]) for s in classify] == [
        ("taskexecutor-1", [{"resource": "gpu", "address": "0", "share": {"exact": "1/4", "value": 0.25}}])
    ] * 2
    wait_until(lambda: all(r["in"] > 0 for s in session.get(f"/v1/jobs/{job}")["subtasks"]
                           for r in s["records"] if r["operator"] == "classify"), "records to flow")
    _cancel(session, client)
    assert _holders(session) == {"taskexecutor-1/0": [], "taskexecutor-1/1": []}
    assert all(d["free"]["exact"] == "1" for d in session.devices().values())
    detail = session.get(f"/v1/jobs/{job}")
    assert detail["state"] == "CANCELED" and detail["subtasks_by_state"]["CANCELED"] == 4
    status, body = session.request(f"/v1/jobs/{job}/cancel", "POST")
    assert status == 409 and body == {"error": f"{job} has already ended (CANCELED)"}


def test_a_job_that_does_not_fit_now_waits_with_reasons_and_starts_when_capacity_frees(
    session: Session,
) -> None:
    first = _submit(1, 2, "both gpus")
    wait_until(lambda: all(d["holders"] for d in session.devices().values()), "both GPUs held")
    second = _submit(0.5, 1, "half a gpu")
    pending = wait_until(lambda: (p := session.get(f"/v1/jobs/{second.job_id}/pending"))["waiting"] and p, "pending")
    assert pending["state"] == "PENDING"
    assert pending["subtasks"] == ["Slowly (1/1)", "classify -> sink (1/1)"]
    assert pending["message"].startswith("cannot place classify (1/1) asking for gpu: 0.5 on any of 1 TaskExecutor(s)")
    assert pending["reasons"] == [
        {"taskexecutor": "taskexecutor-1", "reason": "gpu 0 has 0 free, 0.5 needed"},
        {"taskexecutor": "taskexecutor-1", "reason": "gpu 1 has 0 free, 0.5 needed"},
    ]
    assert session.get("/v1/overview")["jobs"]["PENDING"] == 1
    assert session.get(f"/v1/jobs/{first.job_id}/pending") == {
        "job": first.job_id, "state": "RUNNING", "waiting": False, "subtasks": [],
        "message": None, "since": None, "reasons": [],
    }
    try:
        _cancel(session, first)
        wait_until(lambda: session.get(f"/v1/jobs/{second.job_id}")["state"] == "RUNNING", "the waiting job to start")
        # its share shows once its subtask holds it, a moment after RUNNING, on whichever GPU
        # the first job's shares came back from first
        held = wait_until(lambda: [h for hs in _holders(session).values() for h in hs], "the waiting job's share")
        assert held == [(second.job_id, "classify -> sink (1/1)", "1/2")]
        assert not session.get(f"/v1/jobs/{second.job_id}/pending")["waiting"]
    finally:
        _cancel(session, second)  # the next tests of this session expect it idle


def test_a_job_that_can_never_fit_fails_at_submission(session: Session) -> None:
    with pytest.raises(AllocationError) as info:
        _submit(3, 1, "too big")
    assert str(info.value).startswith("cannot place classify (1/1) asking for gpu: 3 on any of 1 TaskExecutor(s)")
    assert info.value.reasons == (
        "taskexecutor-1: gpu needs 3 whole device(s), 2 of 2 are wholly free (gpu 0 has 1 free, gpu 1 has 1 free)",
    )
    assert "too big" not in [j["name"] for j in session.get("/v1/jobs")["jobs"]]  # refused, not run


def test_unknown_ids_and_paths_are_404s_and_wrong_methods_405s(session: Session) -> None:
    assert session.request("/v1/jobs/job-999") == (404, {"error": "no such job: job-999"})
    assert session.request("/v1/jobs/job-999/pending") == (404, {"error": "no such job: job-999"})
    assert session.request("/v1/jobs/job-999/cancel", "POST") == (404, {"error": "no such job: job-999"})
    assert session.request("/v1/nothing") == (404, {"error": "no such path: /v1/nothing"})
    assert session.request("/etc/passwd") == (404, {"error": "no such path: /etc/passwd"})
    assert session.request("/v1/jobs", "POST") == (405, {"error": "/v1/jobs accepts GET only"})
    assert session.request("/v1/jobs/job-1/cancel") == (405, {"error": "/v1/jobs/job-1/cancel accepts POST only"})
    assert session.request("/v1/jobs", "DELETE") == (405, {"error": "method DELETE is not allowed"})


def test_overview_counts_slots_jobs_and_resources(session: Session) -> None:
    overview = session.get("/v1/overview")
    assert overview["taskexecutors"] == 1
    assert overview["slots"] == {"total": 4, "free": 4}
    assert overview["resources"] == {
        "gpu": {"devices": 2, "total": {"exact": "2", "value": 2.0}, "free": {"exact": "2", "value": 2.0}}
    }
    assert set(overview["jobs"]) == {"CREATED", "PENDING", "RUNNING", "RESTARTING", "FINISHED", "FAILED", "CANCELED"}


def test_a_degraded_driver_shows_its_error_and_the_token_guards_every_request(tmp_path: Path) -> None:
    session = start_session(
        tmp_path, gpus=2, **{"external-resource.gpu.amount": 3,
                             "external-resource.gpu.on-discovery-failure": "degrade",
                             "rest.token": "s3cret"},
    )
    try:
        for path in ("/v1/overview", "/v1/taskexecutors", "/v1/jobs", "/metrics", "/v1/jobs/job-1"):
            for token in ("", "wrong"):
                status, body = session.request(path, token=token or "-")
                assert status == 401, path
                assert body == {"error": UNAUTHORIZED}
        assert session.request("/v1/jobs/job-1/cancel", "POST", token="wrong")[0] == 401
        status, page = session.request("/", token="-")  # the UI shell holds no data: served
        assert status == 200 and "<title>accelflow</title>" in page
        (te,) = session.get("/v1/taskexecutors")["taskexecutors"]
        (gpu,) = te["resources"]
        assert (gpu["name"], gpu["amount"], gpu["driver"], gpu["status"]) == ("gpu", 3, "gpu", "degraded")
        assert "3" in gpu["message"] and "2" in gpu["message"], gpu["message"]
        assert [(d["address"], d["placeholder"], d["properties"]) for d in gpu["devices"]] == [
            ("#0", True, {}), ("#1", True, {}), ("#2", True, {}),
        ]
        from prometheus_client.parser import text_string_to_metric_families

        families = {f.name: f for f in text_string_to_metric_families(session.get("/metrics"))}
        (failed,) = families["accelflow_resource_discovery_failed"].samples
        assert failed.labels == {"taskexecutor": "taskexecutor-1", "resource": "gpu", "status": "degraded", "driver": "gpu"}
        assert failed.value == 1.0
    finally:
        stop_and_check(session)


def test_a_job_brings_its_job_level_keys_and_the_cluster_keeps_its_own(session: Session) -> None:
    env = Environment({"scheduler.placement-policy": "spread", "external-resource.gpu.amount": 1,
                       "taskmanager.numberOfTaskSlots": 1})
    env.from_source(Slowly(), parallelism=2).map(identity, name="classify", parallelism=2,
                                                  resources={"gpu": 0.25}).add_sink(discard)
    client = env.execute_async("spread")
    wait_until(lambda: sum(len(hs) for hs in _holders(session).values()) == 2, "both holders")
    held = {k: [h[1] for h in hs] for k, hs in _holders(session).items()}
    # spread (the job's key) puts one subtask on each GPU; the cluster keeps 2 GPUs and 4 slots
    assert held == {"taskexecutor-1/0": ["classify -> sink (1/2)"], "taskexecutor-1/1": ["classify -> sink (2/2)"]}
    assert session.get("/v1/overview")["slots"] == {"total": 4, "free": 2}
    _cancel(session, client)
