"""The JobManager: job lifecycle, TaskExecutor membership and deployment."""

from accelflow.runtime.jobmanager._checkpoint_signing import CheckpointSigning
from accelflow.runtime.jobmanager._checkpoint_store import load_checkpoint
from accelflow.runtime.jobmanager._deployment import resident_only
from accelflow.runtime.jobmanager._jobmanager import JobManager
from accelflow.runtime.jobmanager._jobs import (
    JOB_ENDED,
    JOB_STATES,
    SUBTASK_STATES,
    CheckpointRecord,
    FailoverRecord,
    Job,
    JobResult,
    PendingReason,
    SubtaskState,
    TaskExecutorInfo,
    checkpoints_retained,
)
from accelflow.runtime.jobmanager._plan import JOB_KEYS, source_total

__all__ = [
    "JOB_ENDED",
    "JOB_KEYS",
    "JOB_STATES",
    "SUBTASK_STATES",
    "CheckpointRecord",
    "CheckpointSigning",
    "FailoverRecord",
    "Job",
    "JobManager",
    "JobResult",
    "PendingReason",
    "SubtaskState",
    "TaskExecutorInfo",
    "checkpoints_retained",
    "load_checkpoint",
    "resident_only",
    "source_total",
]
