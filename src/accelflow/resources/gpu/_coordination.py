"""The GPU coordination file: host coordination (:mod:`accelflow.resources.coordination`) for
resource ``gpu``, as the GPU plugin has always named it (``gpu-coordination.json``, format
``accelflow-gpu-coordination``, owner variable ``ACCELFLOW_GPU_OWNER``)."""

from __future__ import annotations

import os
from pathlib import Path

from accelflow.resources import coordination
from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S, Owner, owner_env_var

RESOURCE = "gpu"

OWNER_ENV_VAR = owner_env_var(RESOURCE)
"""Set by the GPU driver for its discovery script: ``<pid>:<start_ticks>`` of the TaskExecutor
(``<pid>:`` where there is no ``/proc``). ``accelflow-gpu-discovery`` records this process as
the owner of the GPUs it allocates, whatever its parent is."""


class CoordinationFile(coordination.CoordinationFile):
    """Allocates GPUs for owner processes so that no two live owners share one: a
    :class:`accelflow.resources.coordination.CoordinationFile` for resource ``gpu``.

    Example:
        >>> ledger = CoordinationFile("/tmp/accelflow-doc/gpu-coordination.json")
        >>> gpus = [GPUDevice(index="0"), GPUDevice(index="1")]
        >>> me = Owner.of_process()
        >>> [d.index for d in ledger.allocate(gpus, 1, me)]
        ['0']
        >>> len(ledger.release(gpus, me))
        1

    Args:
        path: the state file; its directory is created if missing. ``None``: the per-user
            default of :func:`default_coordination_path`.
        lock_timeout: the longest wait for the lock, in seconds.

    Raises:
        CoordinationError: the default directory is unsafe.
        ValueError: ``lock_timeout`` is not a positive number.
    """

    def __init__(
        self, path: str | os.PathLike[str] | None = None, *, lock_timeout: float = DEFAULT_LOCK_TIMEOUT_S
    ) -> None:
        super().__init__(path, resource=RESOURCE, lock_timeout=lock_timeout)


def default_coordination_path(temp_dir: str | None = None) -> Path:
    """The per-user default: ``<tempdir>/accelflow-<uid>/gpu-coordination.json`` (see
    :func:`accelflow.resources.coordination.default_coordination_path`).

    Raises:
        CoordinationError: the directory is unsafe or cannot be created.
    """
    return coordination.default_coordination_path(RESOURCE, temp_dir)


def owner_from_env(value: str) -> Owner:
    """The live owner that :data:`OWNER_ENV_VAR` names.

    Example:
        >>> import os
        >>> owner_from_env(Owner.of_process().to_env()).pid == os.getpid()
        True

    Raises:
        ValueError: the value is malformed, or names a process that has exited.
    """
    return coordination.owner_from_env(value, RESOURCE)
