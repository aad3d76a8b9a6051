"""Launchers: where TaskExecutors run (local OS processes, or Ray actors)."""

from __future__ import annotations

import logging

from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow.runtime.launchers._base import Event, Launcher, TaskExecutorHandle
from accelflow.runtime.launchers._ray import actor_resources

__all__ = ["Event", "Launcher", "TaskExecutorHandle", "actor_resources", "make_launcher", "start_zygote"]

_log = logging.getLogger(__name__)


def start_zygote() -> None:
    """Start this client's zygote for the current environment unless it runs (see
    ``local.start-method``); a zygote that cannot start is only logged here: the job that
    needs it warns and spawns its TaskExecutors instead."""
    from accelflow.runtime.launchers._zygote import get_zygote

    try:
        get_zygote()
    except Exception as exc:  # noqa: BLE001 (the job reports it, with its fallback)
        _log.debug("no zygote started ahead of a job: %s", exc)


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
