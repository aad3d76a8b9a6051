"""``GET /metrics``: the cluster view in the Prometheus text format (``prometheus-client``).

Metric families (labels in braces):

- ``accelflow_device_allocated_share{taskexecutor,resource,address}``: share held (0..1);
- ``accelflow_device_free_share{taskexecutor,resource,address}``: share free (0..1);
- ``accelflow_device_holder_share{taskexecutor,resource,address,job,subtask}``: one per holder;
- ``accelflow_resource_discovery_failed{taskexecutor,resource,status,driver}``: 1 when the
  resource's driver or discovery failed (``degraded`` or ``no-driver``), else 0;
- ``accelflow_operator_records_in_total`` / ``..._out_total{job,operator}``: counters;
- ``accelflow_subtasks{job,state}``: subtasks of each job's current attempt by state;
- ``accelflow_checkpoints_completed_total`` / ``..._failed_total{job}``: counters;
- ``accelflow_checkpoint_duration_seconds{job}`` / ``accelflow_checkpoint_size_bytes{job}``:
  of the job's last completed checkpoint (absent before its first);
- ``accelflow_job_restarts_total{job}``: restarts of the job (its attempt number);
- ``accelflow_kafka_lag{job,topic,partition}``: records behind the partition's end, as the
  Kafka source subtasks report them (summed over subtasks);
- ``accelflow_jobs{state}``, ``accelflow_taskexecutors``, ``accelflow_slots_total``,
  ``accelflow_slots_free``.

``prometheus-client`` is the ``rest`` extra; it is imported only when metrics are asked for.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from accelflow._errors import MissingDependencyError
from accelflow.runtime.service._snapshot import View

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render_metrics(view: View) -> bytes:
    """The Prometheus text exposition of ``view`` (a :func:`cluster_view`).

    Raises:
        MissingDependencyError: ``prometheus-client`` is not installed (``accelflow[rest]``).
    """
    try:
        from prometheus_client import CollectorRegistry, generate_latest
    except ImportError as exc:
        raise MissingDependencyError("GET /metrics", extra="rest") from exc

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Collector(view))  # type: ignore[arg-type]
    return bytes(generate_latest(registry))


def kafka_lag(job: View) -> dict[tuple[str, str], float]:
    """``(topic, partition)`` → lag, from the subtasks' ``kafka_lag:<topic>:<partition>``
    gauges (a partition read by two subtasks, e.g. during a rebalance, is summed)."""
    out: dict[tuple[str, str], float] = {}
    for st in job["subtasks"]:
        for name, value in (st.get("metrics") or {}).items():
            kind, _, rest = name.partition(":")
            topic, sep, partition = rest.rpartition(":")
            if kind == "kafka_lag" and sep and topic:
                out[(topic, partition)] = out.get((topic, partition), 0.0) + float(value)
    return out


class _Collector:
    def __init__(self, view: View) -> None:
        self.view = view

    def collect(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        device = ["taskexecutor", "resource", "address"]
        allocated = GaugeMetricFamily("accelflow_device_allocated_share", "Share of the device held by subtasks (0..1).", labels=device)
        free = GaugeMetricFamily("accelflow_device_free_share", "Share of the device free (0..1).", labels=device)
        holder = GaugeMetricFamily("accelflow_device_holder_share", "Share of the device one subtask holds.", labels=[*device, "job", "subtask"])
        failed = GaugeMetricFamily(
            "accelflow_resource_discovery_failed",
            "1 when the resource's driver or discovery failed on the TaskExecutor (degraded, no-driver).",
            labels=["taskexecutor", "resource", "status", "driver"],
        )
        for te in self.view["taskexecutors"]:
            for r in te["resources"]:
                failed.add_metric([te["id"], r["name"], r["status"], str(r["driver"])], 0.0 if r["status"] == "ok" else 1.0)
                for d in r["devices"]:
                    labels = [te["id"], r["name"], d["address"]]
                    free.add_metric(labels, d["free"]["value"])
                    allocated.add_metric(labels, 1.0 - d["free"]["value"])
                    for h in d["holders"]:
                        holder.add_metric([*labels, str(h["job"]), h["subtask"]], h["share"]["value"])
        yield from (allocated, free, holder, failed)
        yield from self._jobs()
        yield from self._cluster()

    def _jobs(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        records_in = CounterMetricFamily("accelflow_operator_records_in", "Records into the operator (current attempt).", labels=["job", "operator"])
        records_out = CounterMetricFamily("accelflow_operator_records_out", "Records out of the operator (current attempt).", labels=["job", "operator"])
        subtasks = GaugeMetricFamily("accelflow_subtasks", "Subtasks of the job's current attempt by state.", labels=["job", "state"])
        for job in self.view["jobs"]:
            for op in job["operators"]:
                records_in.add_metric([job["id"], op["name"]], op["records_in"])
                records_out.add_metric([job["id"], op["name"]], op["records_out"])
            for state, n in job["subtasks_by_state"].items():
                subtasks.add_metric([job["id"], state], n)
        yield from (records_in, records_out, subtasks)
        yield from self._checkpoints()

    def _checkpoints(self) -> Iterator[Any]:
        from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily

        job = ["job"]
        completed = CounterMetricFamily("accelflow_checkpoints_completed", "Checkpoints and savepoints completed.", labels=job)
        failed = CounterMetricFamily("accelflow_checkpoints_failed", "Checkpoints and savepoints that failed.", labels=job)
        duration = GaugeMetricFamily("accelflow_checkpoint_duration_seconds", "Duration of the last completed checkpoint.", labels=job)
        size = GaugeMetricFamily("accelflow_checkpoint_size_bytes", "Size of the last completed checkpoint.", labels=job)
        restarts = CounterMetricFamily("accelflow_job_restarts", "Restarts of the job.", labels=job)
        lag = GaugeMetricFamily("accelflow_kafka_lag", "Records behind the end of the Kafka partition.", labels=["job", "topic", "partition"])
        for j in self.view["jobs"]:
            stats = j["checkpoints"]
            completed.add_metric([j["id"]], stats["counts"]["completed"])
            failed.add_metric([j["id"]], stats["counts"]["failed"])
            restarts.add_metric([j["id"]], j["restarts"])
            last = stats["latest"]["completed"]
            if last is not None and last["duration_s"] is not None:
                duration.add_metric([j["id"]], last["duration_s"])
            if last is not None and last["size"] is not None:
                size.add_metric([j["id"]], last["size"])
            for (topic, partition), value in sorted(kafka_lag(j).items()):
                lag.add_metric([j["id"], topic, partition], value)
        yield from (completed, failed, duration, size, restarts, lag)

    def _cluster(self) -> Iterator[Any]:
        from prometheus_client.core import GaugeMetricFamily

        overview = self.view["overview"]
        jobs = GaugeMetricFamily("accelflow_jobs", "Jobs by state.", labels=["state"])
        for state, n in overview["jobs"].items():
            jobs.add_metric([state], n)
        yield jobs
        yield GaugeMetricFamily("accelflow_taskexecutors", "Registered TaskExecutors.", value=overview["taskexecutors"])
        yield GaugeMetricFamily("accelflow_slots_total", "Slots of all TaskExecutors.", value=overview["slots"]["total"])
        yield GaugeMetricFamily("accelflow_slots_free", "Free slots.", value=overview["slots"]["free"])
