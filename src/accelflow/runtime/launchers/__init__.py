"""Launchers: where TaskExecutors run (local OS processes, or Ray actors)."""

from __future__ import annotations

from accelflow._errors import JobError
from accelflow.config import Configuration
from accelflow.config import _keys as k
from accelflow.runtime.launchers._base import Launcher


def make_launcher(config: Configuration) -> Launcher:
    """The launcher ``execution.target`` names."""
    if config.get(k.EXECUTION_TARGET) == "ray":
        raise JobError(
            "execution.target: ray is not implemented yet; use the default 'local' target"
        )
    from accelflow.runtime.launchers._local import LocalLauncher

    return LocalLauncher(config)
