"""The execution context: how the jobs of a script are run, handed explicitly from the CLI.

``accelflow run`` builds one :class:`ExecutionContext` (config layers, progress display, a
session cluster to submit to) and runs the job script inside :func:`use_context`. Each
:class:`~accelflow.Environment` takes the context that is current when it is built and
hands it to :func:`accelflow.runtime.client.submit` with its graph and config. This is
Flink's *context environment* (``flink run`` installs one before calling the job's
``main``), scoped by a :class:`contextvars.ContextVar` so nested or concurrent runs never see
each other's context, and nothing is a mutable module global.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Protocol


class ProgressSource(Protocol):
    """What a progress display attaches to: a JobManager or a session-cluster job client."""

    progress_listeners: list[Callable[[dict[str, Any]], None]]


#: ``progress(source, graph)`` starts a display and returns the function that stops it
ProgressHook = Callable[[ProgressSource, Any], Callable[[], None]]


@dataclass(frozen=True, slots=True, kw_only=True)
class ExecutionContext:
    """How jobs run: config layers around a script's own dict, progress, target cluster.

    Attributes:
        base_config: the lowest config layer (e.g. a session cluster's own keys).
        conf_file: a YAML file of flat keys, below the script's dict (``--conf``).
        definitions: ``key=value`` overrides above the script's dict (``-D``).
        progress: a progress display for each job, or ``None``.
        cluster_url: submit to the session cluster serving this REST URL instead of starting
            an embedded cluster (``accelflow run --cluster URL``).
        script_dir: the job script's directory; its modules travel to a session cluster by
            value.
    """

    base_config: Mapping[str, Any] = field(default_factory=dict)
    conf_file: str | None = None
    definitions: tuple[str, ...] = ()
    progress: ProgressHook | None = None
    cluster_url: str | None = None
    script_dir: str | None = None


DEFAULT_CONTEXT = ExecutionContext()

_current: ContextVar[ExecutionContext] = ContextVar("accelflow_execution_context",
                                                     default=DEFAULT_CONTEXT)


def current_context() -> ExecutionContext:
    """The context installed by the innermost :func:`use_context`, else the default one."""
    return _current.get()


@contextmanager
def use_context(context: ExecutionContext) -> Iterator[ExecutionContext]:
    """Run the body (e.g. a job script) with ``context`` as the current execution context."""
    token = _current.set(context)
    try:
        yield context
    finally:
        _current.reset(token)
