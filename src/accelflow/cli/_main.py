"""The ``accelflow`` command. Each subcommand lives in its own module with ``register()``.

Every :class:`accelflow.AccelflowError` becomes a message on stderr without a traceback and
exit code 2 (config and usage errors) or 1 (everything else).
"""

from __future__ import annotations

import argparse
import importlib
import sys
import traceback
from collections.abc import Sequence

from accelflow import __version__
from accelflow._errors import AccelflowError, ConfigError, remote_traceback
from accelflow._warn import configure_logging

# name -> module; each module defines register(subparsers)
_COMMANDS = ("resources", "run", "render", "cluster", "savepoints", "kafka")


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="accelflow",
        description="Stream and batch processing whose scheduler understands accelerators.",
    )
    parser.add_argument("--version", action="version", version=f"accelflow {__version__}")
    parser.add_argument("-v", "--verbose", action="store_true", help="log at DEBUG level")
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in _COMMANDS:
        try:
            module = importlib.import_module(f"accelflow.cli._{name}")
        except ModuleNotFoundError as exc:
            if exc.name != f"accelflow.cli._{name}":
                raise
            continue
        module.register(sub)
    return parser


def main(argv: Sequence[str] | None = None) -> int:
    parser = build_parser()
    args = parser.parse_args(argv)
    args.argv = list(sys.argv[1:] if argv is None else argv)  # as typed, e.g. 'run' sees a '--'
    configure_logging(verbose=args.verbose)
    try:
        code: int = args.func(args)
    except ConfigError as exc:
        _print_error("config error", exc, verbose=args.verbose)
        return 2
    except AccelflowError as exc:
        _print_error("error", exc, verbose=args.verbose)
        return 1
    except KeyboardInterrupt:
        print("accelflow: interrupted", file=sys.stderr, flush=True)
        return 130
    return code


def _print_error(kind: str, exc: AccelflowError, *, verbose: bool = False) -> None:
    """``accelflow: error: ...``, the message's further lines indented. With ``-v`` the
    traceback comes first: where the error was raised (in a subtask or a session cluster, for
    the error of a job that ran there), else here; without ``-v``, an error from another
    process says how to see it."""
    where = remote_traceback(exc)
    if verbose:
        print(f"accelflow: traceback{' where it was raised' if where else ''}:", file=sys.stderr)
        print((where or "".join(traceback.format_exception(exc))).rstrip(), file=sys.stderr)
    lines = str(exc).splitlines() or [type(exc).__name__]
    if isinstance(exc, ConfigError) and len(exc.problems) > 1:
        print(f"accelflow: {kind}: {len(exc.problems)} problems", file=sys.stderr)
    else:
        print(f"accelflow: {kind}: {lines[0]}", file=sys.stderr)
        lines = lines[1:]
    for line in lines:
        print(f"  {line}", file=sys.stderr)
    if where and not verbose:
        print("accelflow: run with -v for the traceback", file=sys.stderr)
