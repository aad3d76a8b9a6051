"""The devices a local cluster's job wants warm before it is deployed, handed from the client
(which knows the job graph before it starts the cluster) to its TaskExecutors through a file
in the cluster's working directory. Only the standard library: the TaskExecutor package's
facade imports it before the forkserver starts.
"""

from __future__ import annotations

import json
import os
from collections.abc import Mapping

#: in a local cluster's working directory: the devices its job wants warm at once
#: (:func:`write_warm_ahead`, :meth:`WarmDevices.warm_ahead`)
WARM_AHEAD_FILE = "warm-ahead.json"


def write_warm_ahead(workdir: str, wanted: Mapping[str, tuple[int, int]]) -> None:
    """Tell the TaskExecutors started in ``workdir`` which devices their job wants warm:
    ``{resource: (devices, subtasks per device)}``, e.g. ``{"gpu": (1, 2)}`` for two subtasks
    at ``{"gpu": 0.5}``."""
    with open(os.path.join(workdir, WARM_AHEAD_FILE), "w", encoding="utf-8") as f:
        json.dump(wanted, f)


def read_warm_ahead(workdir: str) -> dict[str, tuple[int, int]]:
    """What :func:`write_warm_ahead` wrote in ``workdir`` (nothing: ``{}``)."""
    try:
        with open(os.path.join(workdir, WARM_AHEAD_FILE), encoding="utf-8") as f:
            return {resource: (int(devices), int(each)) for resource, (devices, each) in json.load(f).items()}
    except FileNotFoundError:
        return {}
