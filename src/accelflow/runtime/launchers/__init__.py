"""Launchers: where TaskExecutors run (local OS processes, or Ray actors)."""

from __future__ import annotations

from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.runtime.launchers._base import Event, Launcher, TaskExecutorHandle
from accelflow.runtime.launchers._ray import actor_resources

__all__ = ["Event", "Launcher", "TaskExecutorHandle", "actor_resources", "make_launcher"]


def make_launcher(config: Configuration) -> Launcher:
    """The launcher ``execution.target`` names.

    Raises:
        MissingDependencyError: ``execution.target: ray`` without Ray installed.
    """
    if config.get(k.EXECUTION_TARGET) == "ray":
        from accelflow.runtime.launchers._ray import RayLauncher  # imports Ray only on this path

        return RayLauncher(config)
    from accelflow.runtime.launchers._local import LocalLauncher

    return LocalLauncher(config)
