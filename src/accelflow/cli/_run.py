"""``accelflow run job.py [--conf FILE] [-D k=v ...] [-- script args]``: run a job script (like
``flink run``) with the CLI's config around the script's own: ``--conf`` below the script's
``Environment({...})`` dict, ``-D`` above it. Shows a progress bar for bounded jobs and a
live record count otherwise (on a terminal).

``--cluster URL`` submits the script's jobs to a running session cluster (``accelflow cluster
start``) instead of starting an embedded one; then only the job-level keys of the config
(restart strategy, placement policy, isolation, runtime mode, batch size) apply to the job."""

from __future__ import annotations

import argparse
import runpy
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from accelflow._errors import ConfigError
from accelflow.cli._common import add_config_options, conf_file, load_cli_config, stderr
from accelflow.runtime.client import ExecutionContext, ProgressSource, use_context


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run", help="run a job script on the embedded local cluster",
        description="Run a Python job script. Config layers, lowest first: --conf (or "
        "$ACCELFLOW_CONF), the script's own Environment({...}), then -D.",
    )
    add_config_options(parser)
    parser.add_argument("script", help="the job script, e.g. examples/fashion_mnist_inference.py")
    parser.add_argument("args", nargs=argparse.REMAINDER, help="arguments for the script")
    parser.add_argument("--no-progress", action="store_true", help="do not show progress")
    parser.add_argument(
        "--cluster", metavar="URL",
        help="submit to the session cluster serving this REST URL (see 'accelflow cluster start')",
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    script = Path(args.script)
    if not script.is_file():
        raise ConfigError("no such job script", key=f"accelflow run {args.script}")
    load_cli_config(args)  # validate --conf/-D up front, one message for every problem
    base: dict[str, Any] = {}
    if args.cluster:
        from accelflow.runtime.service import find_session, session_config

        # fails before the script runs when nothing serves the URL; the cluster's keys are the
        # lowest layer, so the script sees the cluster's external resources
        base = session_config(find_session(args.cluster))
    show = not args.no_progress and sys.stderr.isatty()
    context = ExecutionContext(
        base_config=base, conf_file=conf_file(args), definitions=tuple(args.definitions),
        progress=_progress_display if show else None, cluster_url=args.cluster,
        script_dir=str(script.parent.absolute()) if args.cluster else None,
    )
    argv = sys.argv
    sys.argv = [str(script), *[a for a in args.args if a != "--"]]
    sys.path.insert(0, str(script.parent.absolute()))
    try:
        with use_context(context):
            runpy.run_path(str(script), run_name="__main__")
    except SystemExit as exc:
        return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
    finally:
        sys.argv = argv
        sys.path.remove(str(script.parent.absolute()))
    return 0


def _progress_display(source: ProgressSource, graph: Any) -> Callable[[], None]:
    progress = Progress(
        SpinnerColumn(), TextColumn("[bold]{task.description}"), BarColumn(),
        TextColumn("{task.completed:,.0f}{task.fields[of]} records"), TimeElapsedColumn(),
        console=stderr(), transient=True,
    )
    task = progress.add_task(graph.name, total=None, of="")
    progress.start()

    def update(snapshot: dict[str, Any]) -> None:
        total = snapshot["total"]
        progress.update(task, completed=snapshot["records"], total=total,
                        of=f" / {total:,}" if total else "")

    source.progress_listeners.append(update)
    return progress.stop
