"""The ``accelflow`` command. Each subcommand lives in its own module with ``register()``.

Every :class:`accelflow.AccelflowError` becomes a message on stderr without a traceback and
exit code 2 (config and usage errors) or 1 (everything else).
"""

from __future__ import annotations

import argparse
import importlib
import sys
from collections.abc import Sequence

from accelflow import __version__
from accelflow._errors import AccelflowError, ConfigError
from accelflow._warn import configure_logging

# name -> module; each module defines register(subparsers)
_COMMANDS = ("resources", "run", "render", "cluster", "savepoints")


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
        _print_error("config error", exc)
        return 2
    except AccelflowError as exc:
        _print_error("error", exc)
        return 1
    except KeyboardInterrupt:
        print("accelflow: interrupted", file=sys.stderr, flush=True)
        return 130
    return code


def _print_error(kind: str, exc: AccelflowError) -> None:
    lines = str(exc).splitlines() or [type(exc).__name__]
    if isinstance(exc, ConfigError) and len(exc.problems) > 1:
        print(f"accelflow: {kind}: {len(exc.problems)} problems", file=sys.stderr)
        for line in lines:
            print(f"  {line}", file=sys.stderr)
        return
    print(f"accelflow: {kind}: {lines[0]}", file=sys.stderr)
    for line in lines[1:]:
        print(f"  {line}", file=sys.stderr)
