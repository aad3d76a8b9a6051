"""Host coordination, for any external resource: co-located TaskExecutors never hold the same
device. A driver (or discovery script) of GPUs, FPGAs or anything countable allocates its
devices through one file per resource and host, without importing the GPU plugin.

Example: an FPGA driver's discovery, keyed by the resource name ``fpga``::

    from accelflow.resources.coordination import CoordinationFile, Device, Owner

    ledger = CoordinationFile(resource="fpga")   # <tempdir>/accelflow-<uid>/fpga-coordination.json
    found = [Device(index=str(i), kind="FPGA") for i in range(4)]
    mine = ledger.allocate(found, 2, Owner.of_process())   # raises DiscoveryError if too few are free
    ...
    ledger.release(mine, Owner.of_process())   # at the end (a crashed owner's are reclaimed)

What it provides:

* :class:`CoordinationFile`: the state file and its lock (crash-safe, exact matching by UUID or
  index, a bounded wait for the lock), and :class:`Allocation`, its records;
* :class:`Owner` and :class:`Liveness`: a process identity that survives PID reuse;
  :func:`owner_env_var` and :func:`owner_from_env`: how a driver names the owner (the
  TaskExecutor) to a discovery script;
* :class:`Device` (or any :class:`Coordinated` type, such as the GPU plugin's ``GPUDevice``);
* :func:`kill_script_tree`: stop a discovery script that ran too long, and what it started.

The GPU plugin (``accelflow.resources.gpu``) uses it for resource ``gpu``. See ``docs/gpu.md``.
"""

from accelflow._exports import publish
from accelflow.resources.coordination._file import CoordinationFile
from accelflow.resources.coordination._lockfile import DEFAULT_LOCK_TIMEOUT_S
from accelflow.resources.coordination._owner import Liveness, Owner, owner_env_var, owner_from_env
from accelflow.resources.coordination._reaper import kill_script_tree
from accelflow.resources.coordination._records import (
    Allocation,
    Coordinated,
    Device,
    default_coordination_path,
)

__all__ = [
    "DEFAULT_LOCK_TIMEOUT_S",
    "Allocation",
    "Coordinated",
    "CoordinationFile",
    "Device",
    "Liveness",
    "Owner",
    "default_coordination_path",
    "kill_script_tree",
    "owner_env_var",
    "owner_from_env",
]

publish(globals(), __all__)
