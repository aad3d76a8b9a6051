"""The GPU plugin on Ray: the GPUs Ray assigned to a TaskExecutor actor.

Inside a Ray actor that asked for ``num_gpus``, Ray has already chosen the devices (its
accelerator ids, which are also in the actor's ``CUDA_VISIBLE_DEVICES``). The factory says so
through :class:`accelflow.resources.RayResourceDecorator` (``num_gpus`` and
:data:`RAY_GPU_IDS_ENV_VAR`), so the Ray launcher puts Ray's ids in that variable before the
drivers run, and :class:`GPUDriver` then reports exactly those GPUs instead of discovering
and coordinating on its own: two actors on one node must never pick the same GPU behind Ray's
back.
"""

from __future__ import annotations

from collections.abc import Mapping

from accelflow._errors import DiscoveryError

RAY_GPU_IDS_ENV_VAR = "ACCELFLOW_RAY_GPU_IDS"
"""Comma-separated accelerator ids Ray assigned to this TaskExecutor actor, e.g. ``"2,3"``."""


def ray_assigned_ids(environ: Mapping[str, str], amount: int) -> list[str] | None:
    """The GPU ids Ray assigned to this actor, or ``None`` outside a Ray TaskExecutor.

    Example:
        >>> ray_assigned_ids({"ACCELFLOW_RAY_GPU_IDS": "2,3"}, 2)
        ['2', '3']

    Raises:
        DiscoveryError: Ray assigned a different number of GPUs than ``amount``.
    """
    raw = environ.get(RAY_GPU_IDS_ENV_VAR)
    if raw is None:
        return None
    ids = [i.strip() for i in raw.split(",") if i.strip()]
    if len(ids) != amount:
        raise DiscoveryError(
            f"Ray assigned {len(ids)} GPU(s) ({raw!r}) to this TaskExecutor actor but "
            f"external-resource.<gpu>.amount is {amount}; the actor must request num_gpus equal "
            "to the amount (the Ray launcher does this; check custom actor options)",
            resource="gpu",
        )
    return ids
