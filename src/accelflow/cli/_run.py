"""``accelflow run [--conf FILE] [-D k=v ...] [--cluster URL] job.py [script args]``: run a job
script (like ``flink run [OPTIONS] <job> <args>``) with the CLI's config around the script's
own: ``--conf`` below the script's ``Environment({...})`` dict, ``-D`` above it. Options go
before the script: everything after it is the script's (``sys.argv``), so an ``accelflow run``
option found there draws a warning naming it (``--`` after the script says "these are the
script's own" and silences it). Shows a progress bar for bounded jobs and a live record count
otherwise (on a terminal).

Where the script's jobs run: the embedded local cluster started for them (default), a running
session cluster with ``--cluster URL`` (``accelflow cluster start``; then only the job-level
keys of the config (restart strategy, placement policy, isolation, runtime mode, batch size)
apply to the job), or Ray with ``-D execution.target=ray`` (docs/ray.md).

``-s PATH`` (``--fromSavepoint``) starts the script's jobs from a checkpoint or savepoint
(``execution.state-recovery.path``), checked before the script runs; ``-n``
(``--allowNonRestoredState``) lets state of operators the job no longer has be dropped.
Ctrl-C cancels the running job, exits with 130 and, where its checkpoints are retained
(``externalized-checkpoint-retention: RETAIN_ON_CANCELLATION``), says how to resume."""

from __future__ import annotations

import argparse
import os
import runpy
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from rich.progress import BarColumn, Progress, SpinnerColumn, TextColumn, TimeElapsedColumn

from accelflow._errors import AccelflowError, ConfigError
from accelflow._warn import warn
from accelflow.cli._common import add_config_options, conf_file, load_cli_config, stderr
from accelflow.cli._run_ending import Interrupts, print_script_error, report_interrupted, report_stopped
from accelflow.config import keys as k
from accelflow.runtime.client import ExecutionContext, ProgressSource, use_context

_DESCRIPTION = """\
Run a Python job script, like 'flink run [OPTIONS] <job> <args>': options go before the
script; whatever follows the script is the script's own arguments.

Where its jobs run:
  (default)                  an embedded local cluster started for the script
  --cluster URL              a running session cluster (see 'accelflow cluster start')
  -D execution.target=ray    Ray actors: a local Ray instance, or a running Ray cluster with
                             -D ray.address=auto (see docs/ray.md)

Start from a checkpoint or savepoint with -s PATH (Flink's --fromSavepoint); Ctrl-C cancels
the job and, with retained checkpoints, prints the -s PATH to resume from.

Config layers, lowest first: --conf (or $ACCELFLOW_CONF), the script's own
Environment({...}), then -D."""

_EPILOG = """\
examples:
  accelflow run examples/fashion_mnist_inference.py
  accelflow run --conf conf/accelflow.yaml examples/fashion_mnist_inference.py --parallelism 4
  accelflow run --cluster http://127.0.0.1:8081 job.py
  accelflow run -D execution.target=ray -D ray.address=auto job.py
  accelflow run -s /ckpt/3f2a.../chk-42 job.py"""

#: ``accelflow run``'s own options: after the script they reach the script instead
_OPTIONS_WITH_VALUE = ("-D", "--conf", "--cluster", "--fromSavepoint")
_FLAGS = ("--no-progress", "--allowNonRestoredState", "--allow-non-restored-state")


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "run", help="run a job script: embedded local cluster, session cluster (--cluster) or Ray",
        description=_DESCRIPTION, epilog=_EPILOG,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_config_options(parser)
    parser.add_argument("script", help="the job script, e.g. examples/fashion_mnist_inference.py")
    parser.add_argument("args", nargs=argparse.REMAINDER,
                        help="arguments for the script (after it; options of accelflow run go "
                        "before the script)")
    parser.add_argument("--no-progress", action="store_true", help="do not show progress")
    parser.add_argument(
        "--cluster", metavar="URL",
        help="submit to the session cluster serving this REST URL (see 'accelflow cluster start') "
        "instead of starting an embedded one",
    )
    parser.add_argument(
        "-s", "--fromSavepoint", dest="from_savepoint", metavar="PATH",
        help="start the job from this checkpoint or savepoint (a chk-<n> or savepoint "
        "directory, or a job's checkpoint directory: its newest complete checkpoint); sets "
        "execution.state-recovery.path",
    )
    parser.add_argument(
        "-n", "--allowNonRestoredState", "--allow-non-restored-state", dest="allow_non_restored",
        action="store_true",
        help="start even if the checkpoint holds state of operators the job no longer has (it "
        "is dropped); sets execution.state-recovery.ignore-unclaimed-state",
    )
    parser.set_defaults(func=run)


def misplaced_options(script_args: Sequence[str]) -> list[str]:
    """The ``accelflow run`` options among the arguments after the job script, each with its
    value (``'-D execution.target=ray'``), up to a ``--``.

    Example:
        >>> misplaced_options(["--epochs", "3", "-D", "execution.target=ray", "--conf=a.yaml"])
        ['-D execution.target=ray', '--conf=a.yaml']
        >>> misplaced_options(["--", "-D", "x=1"])
        []
    """
    found = []
    for i, arg in enumerate(script_args):
        if arg == "--":
            break
        if arg in _OPTIONS_WITH_VALUE:
            value = script_args[i + 1] if i + 1 < len(script_args) else ""
            found.append(f"{arg} {value}".strip())
        elif arg in _FLAGS or (arg.startswith("-D") and arg != "-D") or any(
            arg.startswith(f"{option}=") for option in _OPTIONS_WITH_VALUE if option != "-D"
        ):
            found.append(arg)
    return found


def _warn_misplaced(args: argparse.Namespace) -> None:
    raw: list[str] = getattr(args, "argv", [])
    n = len(args.args)
    if len(raw) >= n + 2 and raw[len(raw) - n - 1] == "--" and raw[len(raw) - n - 2] == args.script:
        return  # 'job.py -- ...': the user said these are the script's (argparse dropped the --)
    for option in misplaced_options(args.args):
        warn(f"'{option}' comes after the job script, so the script gets it and accelflow run "
             f"does not; put it before the script (accelflow run {option} {args.script} ...)")


def run(args: argparse.Namespace) -> int:
    script = _job_script(args.script)
    _warn_misplaced(args)
    given = list(args.definitions)
    args.definitions = [*given, *_recovery_definitions(args)]  # -s and -n win over -D
    load_cli_config(args, show_warnings=False)  # validate --conf/-D up front; Environment warns
    base: dict[str, Any] = {}
    if args.cluster:
        from accelflow.runtime.client import find_session, session_config

        # fails before the script runs when nothing serves the URL; the cluster's keys are the
        # lowest layer, so the script sees the cluster's external resources
        base = session_config(find_session(args.cluster))
    show = not args.no_progress and sys.stderr.isatty()
    started: list[tuple[ProgressSource, Any]] = []  # every job the script starts, for Ctrl-C

    def follow(source: ProgressSource, graph: Any) -> Callable[[], None]:
        started.append((source, graph))
        stop = _progress_display(source, graph) if show else _nothing

        def ended() -> None:
            stop()
            report_stopped(source, graph, args, given)
        return ended

    context = ExecutionContext(
        base_config=base, conf_file=conf_file(args), definitions=tuple(args.definitions),
        progress=follow, cluster_url=args.cluster, script_dir=str(script.parent) if args.cluster else None,
    )
    argv = sys.argv
    sys.argv = [args.script, *_without_separator(args.args)]
    sys.path.insert(0, str(script.parent))
    with Interrupts(started) as interrupts:
        try:
            with use_context(context):
                runpy.run_path(str(script), run_name="__main__")
        except SystemExit as exc:
            return exc.code if isinstance(exc.code, int) else (0 if exc.code is None else 1)
        except KeyboardInterrupt:  # the job client has cancelled its job and waited for its end
            interrupts.ending()
            report_interrupted(started, args, given)
            return 130
        except AccelflowError:
            raise  # one line, no traceback (cli._main)
        except Exception as exc:  # the script's own error: shown as `python script.py` shows it
            return print_script_error(exc, str(script))
        finally:
            sys.argv = argv
            sys.path.remove(str(script.parent))
    return 0


def _job_script(given: str) -> Path:
    """The job script's absolute path (Python's own ``__file__`` of a script it runs).

    Raises:
        ConfigError: no such file, or a directory.
    """
    script = Path(given).absolute()
    key = f"accelflow run {given}"
    if script.is_dir():
        inside = sorted(p.name for p in script.glob("*.py"))
        which = (f"one of {', '.join(inside[:4])}{', ...' if len(inside) > 4 else ''} in it" if inside
                 else f"e.g. accelflow run {Path(given) / 'job.py'}")
        raise ConfigError(f"is a directory, not a job script; give the script itself ({which})", key=key)
    if not script.is_file():
        raise ConfigError("no such job script", key=key)
    return script


def _recovery_definitions(args: argparse.Namespace) -> list[str]:
    """``-s PATH`` and ``-n`` as ``-D`` definitions; the checkpoint at ``PATH`` is read once
    here, so a wrong path fails before the script or any TaskExecutor starts.

    Raises:
        CheckpointError: no checkpoint or savepoint at ``PATH`` (missing, incomplete, corrupt).
    """
    from accelflow.runtime.jobmanager import CheckpointSigning, load_checkpoint

    out = []
    if args.from_savepoint is not None:
        path = args.from_savepoint.strip()
        if not path:
            raise ConfigError("expected a checkpoint or savepoint directory, got ''",
                              key="accelflow run -s")
        if "://" not in path:
            path = os.path.abspath(os.path.expanduser(path))  # a session cluster's working directory is not ours
        if not (args.cluster and path.startswith("memory://")):  # that one lives in the cluster
            load_checkpoint(path, CheckpointSigning.from_config(load_cli_config(args, show_warnings=False)))
        out.append(f"{k.STATE_RECOVERY_PATH.name}={path}")
    if args.allow_non_restored:
        out.append(f"{k.ALLOW_NON_RESTORED_STATE.name}=true")
    return out


def _nothing() -> None:
    pass


def _without_separator(script_args: list[str]) -> list[str]:
    """The script's arguments without the first ``--`` (the end of accelflow run's options)."""
    if "--" in script_args:
        i = script_args.index("--")
        return [*script_args[:i], *script_args[i + 1:]]
    return script_args


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
