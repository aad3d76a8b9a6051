"""``GET /metrics``: the cluster view in the Prometheus text exposition format (version 0.0.4).

Metric families (labels in braces):

- ``accelflow_device_allocated_share{taskexecutor,resource,address}``: share held (0..1);
- ``accelflow_device_free_share{taskexecutor,resource,address}``: share free (0..1);
- ``accelflow_device_holder_share{taskexecutor,resource,address,job,subtask}``: one per holder;
- ``accelflow_device_health{taskexecutor,resource,address,state}``: 1 for the device's state
  (``healthy``, ``quarantined``, ``rejoining``), 0 for the others (watched devices only);
- ``accelflow_device_xid_total{taskexecutor,resource,address,xid}``: Xids the device reported;
- ``accelflow_device_memory_used_bytes{taskexecutor,resource,address,job,subtask}``: device
  memory the subtask's processes hold, as its TaskExecutor's last probe saw it;
- ``accelflow_resource_discovery_failed{taskexecutor,resource,status,driver}``: 1 when the
  resource's driver or discovery failed (``degraded`` or ``no-driver``), else 0;
- ``accelflow_operator_records_in_total`` / ``..._out_total{job,operator}``: counters;
- ``accelflow_subtasks{job,state}``: subtasks of each job's current attempt by state;
- ``accelflow_checkpoints_completed_total`` / ``..._failed_total{job}``: counters;
- ``accelflow_checkpoint_duration_seconds{job}`` / ``accelflow_checkpoint_size_bytes{job}``:
  of the job's last completed checkpoint (absent before its first);
- ``accelflow_job_restarts_total{job}``: restarts of the job (its attempt number);
- ``accelflow_job_rollbacks_total{job,path}``: failovers by path, ``in-place`` (the failed
  subtask replaced, the others rolled back in their processes) or ``full`` (every subtask
  restarted), see ``docs/failover.md``;
- ``accelflow_job_recovery_seconds{job}``: of the job's last failover that recovered, from the
  failure seen to every subtask running again (absent before);
- ``accelflow_standby_subtasks{job}``: standby subtasks opened and ready to take over;
- ``accelflow_kafka_lag{job,topic,partition}``: records behind the partition's end, as the
  Kafka source subtasks report them (summed over subtasks);
- ``accelflow_jobs{state}``, ``accelflow_taskexecutors``, ``accelflow_slots_total``,
  ``accelflow_slots_free``.

The text is written here, without ``prometheus-client``, so that every install serves metrics
where it serves the UI: the format is a few lines per family (``# HELP``, ``# TYPE``, one line
per sample, label values escaped), written as ``prometheus_client.generate_latest`` writes
them; the tests parse it with ``prometheus_client``'s own parser.
"""

from __future__ import annotations

import math
from collections.abc import Iterator, Sequence

from accelflow.runtime.rest._snapshot import View

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"


def render_metrics(view: View) -> bytes:
    """The Prometheus text exposition of ``view`` (a :func:`cluster_view`).

    Example:
        >>> view = {"overview": {"jobs": {"RUNNING": 1}, "taskexecutors": 1,
        ...                      "slots": {"total": 4, "free": 3}}, "taskexecutors": [], "jobs": []}
        >>> print(render_metrics(view).decode().splitlines()[-1])
        accelflow_slots_free 3.0
    """
    families = [*_devices(view), *_health(view), *_jobs(view), *_checkpoints(view), *_cluster(view)]
    return "".join(line for family in families for line in family.lines()).encode()


class Family:
    """One metric family: its ``# HELP`` and ``# TYPE`` lines and its samples.

    A counter's name ends in ``_total`` (as ``prometheus-client`` writes it).

    Example:
        >>> f = Family("accelflow_jobs", "gauge", "Jobs by state.", ["state"])
        >>> f.add(["RUNNING"], 2)
        >>> print("".join(f.lines()), end="")
        # HELP accelflow_jobs Jobs by state.
        # TYPE accelflow_jobs gauge
        accelflow_jobs{state="RUNNING"} 2.0
    """

    def __init__(self, name: str, kind: str, help_text: str, labels: Sequence[str] = ()) -> None:
        self.name, self.kind, self.help, self.labels = name, kind, help_text, tuple(labels)
        self.samples: list[tuple[tuple[str, ...], float]] = []

    def add(self, values: Sequence[object], value: float) -> None:
        if len(values) != len(self.labels):
            raise ValueError(f"{self.name} has labels {self.labels}, got values {tuple(values)}")
        self.samples.append((tuple(str(v) for v in values), value))

    def lines(self) -> Iterator[str]:
        help_text = self.help.replace("\\", "\\\\").replace("\n", "\\n")
        yield f"# HELP {self.name} {help_text}\n"
        yield f"# TYPE {self.name} {self.kind}\n"
        for values, value in self.samples:
            pairs = sorted(zip(self.labels, values))
            labels = ",".join(f'{k}="{escape_label_value(v)}"' for k, v in pairs)
            yield f"{self.name}{'{' + labels + '}' if labels else ''} {format_value(value)}\n"


def escape_label_value(value: str) -> str:
    """A label value as the text format quotes it: ``\\``, ``\\"`` and ``\\n`` escaped."""
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def format_value(value: float) -> str:
    """A sample value as Go (Prometheus) writes it: ``+Inf``, ``-Inf``, ``NaN``, else the
    float's shortest repr, with Go's exponent from 1e7 up.

    Example:
        >>> [format_value(v) for v in (2, 0.5, 12345678.0, float("inf"))]
        ['2.0', '0.5', '1.2345678e+07', '+Inf']
    """
    value = float(value)
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    text = repr(value)
    dot = text.find(".")
    if value > 0 and dot > 6:  # 12345678.0 -> 1.2345678e+07
        mantissa = f"{text[0]}.{text[1:dot]}{text[dot + 1:]}".rstrip("0.")
        return f"{mantissa}e+{dot - 1:02d}"
    return text


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


def _devices(view: View) -> Iterator[Family]:
    device = ["taskexecutor", "resource", "address"]
    allocated = Family("accelflow_device_allocated_share", "gauge", "Share of the device held by subtasks (0..1).", device)
    free = Family("accelflow_device_free_share", "gauge", "Share of the device free (0..1).", device)
    holder = Family("accelflow_device_holder_share", "gauge", "Share of the device one subtask holds.", [*device, "job", "subtask"])
    failed = Family(
        "accelflow_resource_discovery_failed", "gauge",
        "1 when the resource's driver or discovery failed on the TaskExecutor (degraded, no-driver).",
        ["taskexecutor", "resource", "status", "driver"],
    )
    for te in view["taskexecutors"]:
        for r in te["resources"]:
            failed.add([te["id"], r["name"], r["status"], r["driver"]], 0.0 if r["status"] == "ok" else 1.0)
            for d in r["devices"]:
                labels = [te["id"], r["name"], d["address"]]
                free.add(labels, d["free"]["value"])
                allocated.add(labels, 1.0 - d["free"]["value"])
                for h in d["holders"]:
                    holder.add([*labels, h["job"], h["subtask"]], h["share"]["value"])
    yield from (allocated, free, holder, failed)


def _health(view: View) -> Iterator[Family]:
    device = ["taskexecutor", "resource", "address"]
    health = Family("accelflow_device_health", "gauge", "1 for the device's health state, 0 for the others.",
                    [*device, "state"])
    xids = Family("accelflow_device_xid_total", "counter", "Xids the device reported.", [*device, "xid"])
    used = Family("accelflow_device_memory_used_bytes", "gauge", "Device memory the subtask's processes hold.",
                  [*device, "job", "subtask"])
    for te in view["taskexecutors"]:
        for r in te["resources"]:
            for d in r["devices"]:
                labels = [te["id"], r["name"], d["address"]]
                if d.get("health") is not None:
                    for state in ("healthy", "quarantined", "rejoining"):
                        health.add([*labels, state], 1.0 if d["health"]["state"] == state else 0.0)
                    for xid, count in sorted(d["health"]["xid_counts"].items(), key=lambda i: int(i[0])):
                        xids.add([*labels, xid], count)
                for h in d["holders"]:
                    if h.get("memory_used") is not None:
                        used.add([*labels, h["job"], h["subtask"]], h["memory_used"])
    yield from (health, xids, used)


def _jobs(view: View) -> Iterator[Family]:
    records_in = Family("accelflow_operator_records_in_total", "counter", "Records into the operator (current attempt).", ["job", "operator"])
    records_out = Family("accelflow_operator_records_out_total", "counter", "Records out of the operator (current attempt).", ["job", "operator"])
    subtasks = Family("accelflow_subtasks", "gauge", "Subtasks of the job's current attempt by state.", ["job", "state"])
    for job in view["jobs"]:
        for op in job["operators"]:
            records_in.add([job["id"], op["name"]], op["records_in"])
            records_out.add([job["id"], op["name"]], op["records_out"])
        for state, n in job["subtasks_by_state"].items():
            subtasks.add([job["id"], state], n)
    yield from (records_in, records_out, subtasks)


def _checkpoints(view: View) -> Iterator[Family]:
    job = ["job"]
    completed = Family("accelflow_checkpoints_completed_total", "counter", "Checkpoints and savepoints completed.", job)
    failed = Family("accelflow_checkpoints_failed_total", "counter", "Checkpoints and savepoints that failed.", job)
    duration = Family("accelflow_checkpoint_duration_seconds", "gauge", "Duration of the last completed checkpoint.", job)
    size = Family("accelflow_checkpoint_size_bytes", "gauge", "Size of the last completed checkpoint.", job)
    restarts = Family("accelflow_job_restarts_total", "counter", "Restarts of the job.", job)
    rollbacks = Family("accelflow_job_rollbacks_total", "counter", "Failovers of the job by path (in-place or full).",
                       ["job", "path"])
    recovery = Family("accelflow_job_recovery_seconds", "gauge", "Recovery time of the job's last failover.", job)
    standby = Family("accelflow_standby_subtasks", "gauge", "Standby subtasks ready to take over.", job)
    lag = Family("accelflow_kafka_lag", "gauge", "Records behind the end of the Kafka partition.", ["job", "topic", "partition"])
    for j in view["jobs"]:
        stats = j["checkpoints"]
        completed.add([j["id"]], stats["counts"]["completed"])
        failed.add([j["id"]], stats["counts"]["failed"])
        restarts.add([j["id"]], j["restarts"])
        for path in ("in-place", "full"):
            rollbacks.add([j["id"], path], sum(1 for f in j["failovers"] if f["path"] == path))
        standby.add([j["id"]], j["standby_ready"])
        recovered = [f["recovery_s"] for f in j["failovers"] if f["recovery_s"] is not None]
        if recovered:
            recovery.add([j["id"]], recovered[-1])
        last = stats["latest"]["completed"]
        if last is not None and last["duration_s"] is not None:
            duration.add([j["id"]], last["duration_s"])
        if last is not None and last["size"] is not None:
            size.add([j["id"]], last["size"])
        for (topic, partition), value in sorted(kafka_lag(j).items()):
            lag.add([j["id"], topic, partition], value)
    yield from (completed, failed, duration, size, restarts, rollbacks, recovery, standby, lag)


def _cluster(view: View) -> Iterator[Family]:
    overview = view["overview"]
    jobs = Family("accelflow_jobs", "gauge", "Jobs by state.", ["state"])
    for state, n in overview["jobs"].items():
        jobs.add([state], n)
    yield jobs
    for name, help_text, value in (
        ("accelflow_taskexecutors", "Registered TaskExecutors.", overview["taskexecutors"]),
        ("accelflow_slots_total", "Slots of all TaskExecutors.", overview["slots"]["total"]),
        ("accelflow_slots_free", "Free slots.", overview["slots"]["free"]),
    ):
        family = Family(name, "gauge", help_text)
        family.add([], value)
        yield family
