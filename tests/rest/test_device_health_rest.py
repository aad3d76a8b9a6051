"""Device health on a real session cluster (issue 29 phase 2): ``accelflow cluster
inject-fault`` (the REST drill behind it, token-guarded like every write) quarantines the GPU
under a running subtask, which restarts on the other GPU; ``/v1/taskexecutors``, ``/metrics``
and the web UI show the device's health, Xid history, quarantine reason and the device memory
each subtask's processes hold."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families
from rest_jobs import OnTheFakeGpu, Slowly, discard
from rest_support import Session, cli, start_session, stop_and_check, wait_until
from test_done_when import CHROMIUM, CHROMIUM_ARGS

from accelflow import Environment, JobClient

GIB = 2**30
TE = "taskexecutor-1"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    from accelflow.runtime.client import ExecutionContext, use_context

    tmp = tmp_path_factory.mktemp("health")
    session = start_session(tmp, **{"external-resource.gpu.param.health.probe-interval": "200 ms",
                                    "restart-strategy": "fixed-delay", "restart-strategy.fixed-delay.delay": "0 s"})
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCELFLOW_STATE_DIR", session.env["ACCELFLOW_STATE_DIR"])
        try:
            with use_context(ExecutionContext(cluster_url=session.url)):
                yield session
        finally:
            stop_and_check(session)


def _samples(session: Session) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    text = session.get("/metrics")
    return {(s.name, tuple(sorted(s.labels.items()))): s.value
            for family in text_string_to_metric_families(text) for s in family.samples}


def _holder(session: Session) -> tuple[str, dict[str, Any]]:
    """The GPU the job's subtask holds, and its holder record."""
    for name, device in session.devices().items():
        for holder in device["holders"]:
            return name.split("/")[1], holder
    raise AssertionError("no holder")


def test_a_drill_quarantines_the_gpu_under_a_subtask_which_moves_and_every_view_shows_it(cluster: Session) -> None:
    env = Environment()
    env.from_source(Slowly()).map(OnTheFakeGpu(3072), name="classify", resources={"gpu": 1}).add_sink(discard)
    client: JobClient = env.execute_async("drilled")
    try:
        wait_until(lambda: any(d["holders"] and d["holders"][0].get("memory_used") for d in cluster.devices().values()),
                   "the subtask's device memory in /v1/taskexecutors")
        gpu, holder = _holder(cluster)
        assert holder["memory_used"] == 3 * GIB and holder["memory"] == 80 * GIB  # a whole 80 GiB GPU
        device = cluster.devices()[f"{TE}/{gpu}"]
        assert device["memory"] == {"free": 0, "total": 80 * GIB}
        assert device["health"]["state"] == "healthy" and device["quarantined"] is None
        assert _samples(cluster)[("accelflow_device_memory_used_bytes", (
            ("address", gpu), ("job", client.job_id), ("resource", "gpu"), ("subtask", holder["subtask"]),
            ("taskexecutor", TE)))] == 3 * GIB

        out = cli(cluster.env, "cluster", "inject-fault", "--cluster", cluster.url, "--taskexecutor", TE,
                  "--device", gpu, "--xid", "79")
        assert out.returncode == 0, out.stderr
        assert out.stdout == (f"injected Xid 79 (GPU has fallen off the bus, hardware) into {TE}: gpu {gpu}\n")

        other = {"0": "1", "1": "0"}[gpu]
        wait_until(lambda: cluster.devices()[f"{TE}/{other}"]["holders"], "the subtask on the other GPU")
        device = cluster.devices()[f"{TE}/{gpu}"]
        assert device["quarantined"] == "Xid 79 (GPU has fallen off the bus)"
        health = device["health"]
        assert health["state"] == "quarantined" and health["xid_counts"] == {"79": 1}
        assert [(h["xid"], h["kind"]) for h in health["history"]] == [(79, "hardware")]
        assert cluster.get(f"/v1/jobs/{client.job_id}")["restarts"] >= 1
        samples = _samples(cluster)
        labels = (("address", gpu), ("resource", "gpu"))
        assert samples[("accelflow_device_health", (*labels, ("state", "quarantined"), ("taskexecutor", TE)))] == 1
        assert samples[("accelflow_device_health", (*labels, ("state", "healthy"), ("taskexecutor", TE)))] == 0
        assert samples[("accelflow_device_xid_total", (*labels, ("taskexecutor", TE), ("xid", "79")))] == 1
        if CHROMIUM.exists():
            _the_ui_shows_it(cluster, gpu)
    finally:
        client.cancel()


def _the_ui_shows_it(session: Session, gpu: str) -> None:
    from playwright.sync_api import expect, sync_playwright

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)
        try:
            page = browser.new_page()
            page.goto(session.ui_url)
            device = page.locator(f'[data-te="{TE}"] [data-resource="gpu"][data-address="{gpu}"]')
            expect(device.locator(".badge.health")).to_have_text("quarantined", timeout=15000)
            expect(device.locator(".quarantine")).to_have_text("quarantined: Xid 79 (GPU has fallen off the bus)")
            expect(device.locator(".xids")).to_contain_text("Xid 79 × 1")
            expect(device.locator(".memory")).to_have_text(re.compile(r"^memory .* free of 80\.0 GiB$"))
        finally:
            browser.close()


@pytest.mark.parametrize(("args", "error"), [
    (("--device", "0", "--xid", "999"), "accelflow: config error: --xid: Xid 999 is not in NVIDIA's Xid catalogue; "
                                        "a drill injects a known Xid (hardware: 46, 48,"),
    (("--device", "0", "--xid", "lots"), "accelflow: config error: --xid: 'lots' is not an Xid number"),
    (("--device", "9", "--xid", "79"), "accelflow: config error: --device: taskexecutor-1 has no gpu device '9'; it has: "
                                       "0 (GPU-00000000-0000-4000-8000-000000000000), 1 (GPU-00000000-0000-4000-8000-000000000001) "
                                       "(give an index or a UUID)"),
    (("--device", "0", "--xid", "79", "--resource", "fpga"),
     "accelflow: config error: --resource: taskexecutor-1 watches no resource 'fpga'; it watches: gpu"),
])
def test_a_drill_with_a_bad_xid_or_device_is_refused_with_exit_code_2(cluster: Session, args: tuple[str, ...],
                                                                        error: str) -> None:
    out = cli(cluster.env, "cluster", "inject-fault", "--taskexecutor", TE, *args)
    assert out.returncode == 2 and out.stderr.startswith(error), out.stderr
    out = cli(cluster.env, "cluster", "inject-fault", "--taskexecutor", "taskexecutor-7", "--device", "0", "--xid", "79")
    assert out.returncode == 2 and out.stderr == (
        "accelflow: config error: --taskexecutor: no TaskExecutor 'taskexecutor-7'; registered: taskexecutor-1\n")


def test_the_drill_route_is_guarded_like_every_write(cluster: Session) -> None:
    path = f"/v1/taskexecutors/{TE}/faults"
    body = b'{"device": "0", "xid": 63}'
    host = cluster.url.split("//")[1].rstrip("/")
    assert cluster.raw(path, "POST", {"Host": host, "Content-Length": str(len(body))}, body)[0] == 401
    status, answer = cluster.raw(path, "POST", {"Host": host, "Origin": "http://evil.example",
                                                "Authorization": f"Bearer {cluster.token}",
                                                "Content-Length": str(len(body))}, body)
    assert status == 403 and "cross-origin POST" in answer["error"]
    status, answer = cluster.raw("/v1/taskexecutors/taskexecutor-7/faults", "POST", {
        "Host": host, "Authorization": f"Bearer {cluster.token}", "Content-Length": str(len(body))}, body)
    assert status == 404 and answer["error"] == "no TaskExecutor 'taskexecutor-7'; registered: taskexecutor-1"
    status, answer = cluster.request(path)
    assert status == 405
