"""The REST API, Prometheus metrics and web UI of a JobManager: runs wherever a JobManager
runs (a session cluster's process, or the client of an embedded job with ``rest.enabled``)."""

from accelflow.runtime.rest._metrics import render_metrics
from accelflow.runtime.rest._rest import RestServer
from accelflow.runtime.rest._savepoints import JobNotRunning, Operations, UnknownJob
from accelflow.runtime.rest._savepoints import answer as answer_savepoint
from accelflow.runtime.rest._snapshot import checkpoints_view, cluster_view, retained_checkpoint

__all__ = [
    "JobNotRunning",
    "Operations",
    "RestServer",
    "UnknownJob",
    "answer_savepoint",
    "checkpoints_view",
    "cluster_view",
    "render_metrics",
    "retained_checkpoint",
]
