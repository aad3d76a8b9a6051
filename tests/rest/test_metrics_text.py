"""``GET /metrics`` on every install (issue 25, item 6): accelflow writes the Prometheus text
format itself, so a session cluster that cannot import ``prometheus-client`` serves it, and
``prometheus-client``'s own parser (the test extra) reads it back sample for sample."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
from prometheus_client import CollectorRegistry, generate_latest
from prometheus_client.parser import text_string_to_metric_families
from rest_support import start_session_hiding, stop_and_check

from accelflow.runtime.rest import render_metrics


def _samples(text: str) -> dict[str, dict[tuple[tuple[str, str], ...], float]]:
    out: dict[str, dict[tuple[tuple[str, str], ...], float]] = {}
    for family in text_string_to_metric_families(text):
        for sample in family.samples:
            out.setdefault(sample.name, {})[tuple(sorted(sample.labels.items()))] = sample.value
    return out


def test_a_session_without_prometheus_client_serves_metrics(tmp_path: Path) -> None:
    session = start_session_hiding(tmp_path, "prometheus_client")
    try:
        hidden = subprocess.run([sys.executable, "-c", "import prometheus_client"], env=session.env,
                                capture_output=True, text=True, timeout=60)
        assert hidden.returncode == 1 and "not installed (hidden by the test)" in hidden.stderr
        status, text = session.request("/metrics")
        assert status == 200, text  # was 501 naming the 'rest' extra
        metrics = _samples(text)
        assert metrics["accelflow_taskexecutors"] == {(): 1.0}
        assert metrics["accelflow_slots_total"] == {(): 4.0}
        gpu0 = (("address", "0"), ("resource", "gpu"), ("taskexecutor", "taskexecutor-1"))
        assert metrics["accelflow_device_free_share"][gpu0] == 1.0
        assert metrics["accelflow_jobs"][(("state", "RUNNING"),)] == 0.0
    finally:
        stop_and_check(session)


def _share(value: float) -> dict[str, Any]:
    return {"exact": str(value), "value": value}


#: a view with what the format must escape: quotes, backslashes, newlines, non-ASCII, big numbers
VIEW = {
    "overview": {"jobs": {"RUNNING": 1, "FAILED": 0}, "taskexecutors": 1, "slots": {"total": 4, "free": 3}},
    "taskexecutors": [{"id": "taskexecutor-1", "resources": [
        {"name": "gpu", "status": "ok", "driver": "gpu", "devices": [{
            "address": "0", "free": _share(0.5),
            "holders": [{"job": "job-1", "subtask": 'say "hi" \\ to\nme (1/1)', "share": _share(0.5)}],
        }]},
        {"name": "fpga", "status": "degraded", "driver": None, "devices": []},
    ]}],
    "jobs": [{
        "id": "job-1", "restarts": 2, "subtasks_by_state": {"RUNNING": 1},
        "operators": [{"name": "détecter", "records_in": 12345678, "records_out": 3}],
        "checkpoints": {"counts": {"completed": 3, "failed": 1},
                        "latest": {"completed": {"duration_s": 0.25, "size": 4096}}},
        "subtasks": [{"metrics": {"kafka_lag:orders:0": 7}}],
        "failovers": [{"path": "in-place", "recovery_s": 3.5}, {"path": "full", "recovery_s": None}],
        "standby_ready": 1,
    }],
}


def test_the_text_reads_back_as_written_without_prometheus_client(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setitem(sys.modules, "prometheus_client", None)  # what "not installed" looks like
    text = render_metrics(VIEW).decode()
    monkeypatch.undo()
    families = {f.name: f for f in text_string_to_metric_families(text)}
    (holder,) = families["accelflow_device_holder_share"].samples
    assert holder.labels["subtask"] == 'say "hi" \\ to\nme (1/1)' and holder.value == 0.5
    (records,) = families["accelflow_operator_records_in"].samples
    assert (records.name, records.labels["operator"], records.value) == (
        "accelflow_operator_records_in_total", "détecter", 12345678.0)
    assert families["accelflow_operator_records_in"].type == "counter"
    assert families["accelflow_kafka_lag"].samples[0].labels == {"job": "job-1", "topic": "orders", "partition": "0"}
    failed = {s.labels["resource"]: s.value for s in families["accelflow_resource_discovery_failed"].samples}
    assert failed == {"gpu": 0.0, "fpga": 1.0}
    rollbacks = {s.labels["path"]: s.value for s in families["accelflow_job_rollbacks"].samples}
    assert rollbacks == {"in-place": 1.0, "full": 1.0}
    assert families["accelflow_job_recovery_seconds"].samples[0].value == 3.5  # the last that recovered
    assert families["accelflow_standby_subtasks"].samples[0].value == 1
    # prometheus-client writes exactly the same text from the families it parsed
    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Parsed(text))  # type: ignore[arg-type]
    assert generate_latest(registry).decode() == text


class _Parsed:
    def __init__(self, text: str) -> None:
        self.text = text

    def collect(self) -> Any:
        return text_string_to_metric_families(self.text)
