"""The message of a refused allocation: who holds the devices, and what to change.

A holder started by the same process as the allocating owner (:meth:`Owner.same_parent`) is
another TaskExecutor of the same cluster: the TaskExecutors of one ``accelflow run`` or session
cluster are children of one process. When those alone ask for more devices than the host has,
stopping a holder is the wrong advice; the config asks for too many (TaskExecutors x amount),
and the message says so.
"""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from accelflow.resources.coordination._owner import Liveness, Owner

if TYPE_CHECKING:
    from accelflow.resources.coordination._records import Allocation, Coordinated

AMOUNT_KEY = "external-resource.<name>.amount"
TASKEXECUTORS_KEY = "local.number-taskmanager"


def shortage_message(
    path: Path,
    kind: str,
    devices: Sequence[Coordinated],
    amount: int,
    free: Sequence[Coordinated],
    kept: Sequence[Allocation],
    verdicts: dict[Owner, Liveness],
    owner: Owner,
) -> str:
    """Why ``owner`` cannot have ``amount`` of ``devices`` (``kind``, e.g. ``GPU``, in the
    words): every holder, then the fix.

    Example (two TaskExecutors of one cluster asking for 2 GPUs each on a 2-GPU host)::

        need 2 GPU(s) but only 0 of the 2 visible here are free in the coordination file
        /tmp/accelflow-1000/gpu-coordination.json. Held: GPU 0 (GPU-…) held by pid 4242 on
        host node-1 since 2024-05-01T12:00:00+00:00; GPU 1 (GPU-…) held by pid 4242 on host
        node-1 since 2024-05-01T12:00:00+00:00. pid 4242 is another TaskExecutor of this same
        cluster (started, like this one, by pid 4200): the config asks for at least 4 GPUs on
        this host in all (2 TaskExecutors x 2 GPUs), but only 2 are visible here. Lower the GPU
        amount per TaskExecutor (external-resource.<name>.amount) or the number of
        TaskExecutors (local.number-taskmanager) so that TaskExecutors x amount is at most 2
    """
    holders = [
        f"{device.label()} held by {record.owner.describe()} since {record.allocated_at}"
        + _unknown_note(verdicts[record.owner])
        for device in devices
        for record in kept
        if record.matches(device)
    ]
    head = (
        f"need {amount} {kind}(s) but only {len(free)} of the {len(devices)} visible here are free "
        f"in the coordination file {path}. Held: {'; '.join(holders) or 'none'}. "
    )
    if amount > len(devices):
        return head + (
            f"This TaskExecutor alone asks for more {kind}s than the {len(devices)} visible here: "
            f"lower the {kind} amount per TaskExecutor ({AMOUNT_KEY})"
        )
    return head + (_same_cluster(kind, devices, amount, kept, owner) or _stop_a_holder(kind, path))


def _same_cluster(
    kind: str, devices: Sequence[Coordinated], amount: int, kept: Sequence[Allocation], owner: Owner
) -> str | None:
    """The advice when the holders started by ``owner``'s parent leave too few devices, else None."""
    siblings: dict[int, int] = {}  # pid of another TaskExecutor of this cluster -> devices it holds
    for device in devices:
        for record in kept:
            if record.matches(device) and record.owner.same_parent(owner) and (
                not record.owner.same_process(owner)
            ):
                siblings[record.owner.pid] = siblings.get(record.owner.pid, 0) + 1
    wanted = sum(siblings.values()) + amount
    if not siblings or wanted <= len(devices):
        return None
    pids = ", ".join(str(pid) for pid in siblings)
    who = (f"pid {pids} is another TaskExecutor" if len(siblings) == 1
           else f"pids {pids} are other TaskExecutors")
    if all(held == amount for held in siblings.values()):
        count = f"{len(siblings) + 1} TaskExecutors x {amount} {kind}s"
    else:
        count = f"{wanted - amount} held by the others + {amount} for this one"
    return (
        f"{who} of this same cluster (started, like this one, by pid {owner.parent_pid}): the "
        f"config asks for at least {wanted} {kind}s on this host in all ({count}), but only "
        f"{len(devices)} are visible here. Lower the {kind} amount per TaskExecutor ({AMOUNT_KEY}) "
        f"or the number of TaskExecutors ({TASKEXECUTORS_KEY}) so that TaskExecutors x amount "
        f"is at most {len(devices)}"
    )


def _stop_a_holder(kind: str, path: Path) -> str:
    return (
        f"Stop a TaskExecutor that holds {kind}s, lower the amount, or, if a holder is no "
        f"TaskExecutor any more, remove its record from {path}"
    )


def _unknown_note(verdict: Liveness) -> str:
    if verdict is Liveness.UNKNOWN:
        return " (another host or PID namespace: cannot tell if it runs)"
    return ""
