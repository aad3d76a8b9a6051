"""The web UI's job detail shows each failover: its path, what was replaced and rolled back,
and the recovery time (issue 28.5; real headless Chromium, as tests/rest/test_ui.py)."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from failover_jobs import Counted, Model

from accelflow import Environment, JobCancelledError

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = pytest.mark.skipif(not CHROMIUM.exists(), reason="/usr/bin/chromium is absent")


def test_the_job_detail_shows_a_rollback_in_place(tmp_path: Path) -> None:
    from playwright.sync_api import expect, sync_playwright

    env = Environment({"parallelism.default": 2, "execution.checkpointing.interval": "100 ms",
                       "restart-strategy.fixed-delay.delay": "0 s", "rest.enabled": True, "rest.port": 0})
    (env.from_source(Counted(400, chunk=10, delay=0.01, bounded=False), name="numbers")
        .map_batches(Model(tmp_path, fail="raise", at=200), batch_size=10, name="model")
        .add_sink(_discard))
    client = env.execute_async("fails once")
    try:
        deadline = time.monotonic() + 60
        while (client.rest is None or not client.jobmanager.jobs) and time.monotonic() < deadline:
            time.sleep(0.05)
        [job_id] = client.jobmanager.jobs  # the embedded cluster's only job
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=str(CHROMIUM), args=["--no-sandbox", "--disable-gpu"])
            try:
                page = browser.new_page()
                page.goto(client.rest.ui_url)
                page.locator(f'tr[data-job="{job_id}"] a').click(timeout=15000)
                line = page.locator(".job-failovers li")
                expect(line).to_have_text(re.compile(
                    r"attempt 1 failed \(subtask .*model.* failed\): in-place, replaced .*model.*\(\d/2\); "
                    r"\d+ rolled back in place, recovered in \d+\.\d\d s"), timeout=30000)
            finally:
                browser.close()
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)


def _discard(record: Any) -> None:
    pass
