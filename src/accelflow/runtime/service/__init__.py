"""The session cluster's process (``accelflow cluster start``): it runs a JobManager, its
TaskExecutors, the submission channel and the REST server (:mod:`accelflow.runtime.rest`)."""

from accelflow.runtime.service._session import SessionCluster

__all__ = ["SessionCluster"]
