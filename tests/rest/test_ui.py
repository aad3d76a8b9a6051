"""The web UI in real headless Chromium (Playwright): the job detail and the cancel button
(through the link with the generated token), a cluster with ``rest.token`` used through
``/?token=`` (kept in sessionStorage, dropped from the URL), and the header line of clusters
with and without external resources."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from rest_support import Session, start_session, stop_and_check, wait_until
from rest_jobs import Slowly, discard, identity
from test_done_when import CHROMIUM, CHROMIUM_ARGS

from accelflow import Environment, JobCancelledError

pytestmark = pytest.mark.skipif(
    not CHROMIUM.exists(),
    reason="/usr/bin/chromium is absent; scripts/test installs Debian's chromium where it can",
)


def _browser(p: Any) -> Any:
    return p.chromium.launch(executable_path=str(CHROMIUM), args=CHROMIUM_ARGS)


def test_the_cancel_button_cancels_the_job(session: Session) -> None:
    from playwright.sync_api import expect, sync_playwright

    env = Environment()
    env.from_source(Slowly()).map(identity, name="classify", resources={"gpu": 1}).add_sink(discard)
    client = env.execute_async("to cancel")
    with sync_playwright() as p:
        browser = _browser(p)
        try:
            page = browser.new_page()
            page.on("dialog", lambda dialog: dialog.accept())  # "Cancel job-N?"
            page.goto(session.ui_url)
            row = page.locator(f'tr[data-job="{client.job_id}"]')
            expect(row).to_contain_text("RUNNING", timeout=15000)
            expect(page.locator("#summary")).to_have_text(re.compile(
                r"^1 TaskExecutors · slots \d/4 free · gpu [0-2]/2 free · [1-9]\d* active job\(s\)$"))
            row.locator("a").click()  # the detail of a job with no error that does not wait
            detail = page.locator("#job-detail")
            expect(detail.locator("h2")).to_have_text(f"{client.job_id} · to cancel", timeout=15000)
            expect(detail.locator("tbody tr")).to_have_count(2)
            assert "null" not in detail.inner_text()  # was "nullnull" before the table
            assert detail.locator(".error").count() == 0
            row.locator("button.cancel").click()
            expect(row).to_contain_text("CANCELED", timeout=15000)
            expect(row.locator("button.cancel")).to_have_count(0)
        finally:
            browser.close()
    with pytest.raises(JobCancelledError):
        client.wait(30)


def test_the_ui_takes_the_token_from_the_url_and_shows_a_degraded_driver(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    session = start_session(tmp_path, gpus=1, **{
        "external-resource.gpu.on-discovery-failure": "degrade", "rest.token": "s3cret",
    })
    try:
        with sync_playwright() as p:
            browser = _browser(p)
            try:
                page = browser.new_page()
                page.goto(session.url + "?token=s3cret")
                te = page.locator('[data-te="taskexecutor-1"]')
                expect(te.locator(".badge")).to_have_text("degraded", timeout=15000)
                expect(te.locator(".error")).not_to_be_empty()
                assert "token" not in page.url  # kept in sessionStorage, not in the address bar
                page.reload()  # still authorized after a reload, from sessionStorage
                expect(te.locator(".badge")).to_have_text("degraded", timeout=15000)
                other = browser.new_page()  # another tab has no token: told so
                other.goto(session.url)
                expect(other.locator("#status")).to_contain_text("401", timeout=15000)
            finally:
                browser.close()
    finally:
        stop_and_check(session)


def test_the_header_of_a_cluster_without_external_resources_has_no_empty_part() -> None:
    from playwright.sync_api import expect, sync_playwright

    from accelflow.runtime.client import ExecutionContext, use_context

    with use_context(ExecutionContext()):  # not the session cluster of this module's other tests
        env = Environment({"rest.enabled": True, "rest.port": 0})  # embedded: no gpu, no fpga
        env.from_source(Slowly()).map(identity, name="plain").add_sink(discard)
        client = env.execute_async("no resources")
    try:
        wait_until(lambda: client.rest is not None and client.status() == "RUNNING", "the REST server")
        with sync_playwright() as p:
            browser = _browser(p)
            try:
                page = browser.new_page()
                page.goto(client.rest.ui_url)
                summary = page.locator("#summary")
                expect(summary).to_have_text(re.compile(r"active job"), timeout=15000)
                # was "1 TaskExecutors · slots 0/1 free ·  · 1 active job(s)"
                assert re.fullmatch(r"1 TaskExecutors · slots \d+/\d+ free · 1 active job\(s\)",
                                    summary.inner_text()), summary.inner_text()
            finally:
                browser.close()
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)
