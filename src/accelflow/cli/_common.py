"""Options every command shares: ``--conf FILE`` and ``-D key=value``."""

from __future__ import annotations

import argparse
import os
import sys

from rich.console import Console

from accelflow._warn import warn
from accelflow.config import Configuration, config_from
from accelflow.config.keys import ACCELFLOW_CONF_ENV_VAR


def add_config_options(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--conf",
        metavar="FILE",
        help=f"YAML file of flat config keys (default: ${ACCELFLOW_CONF_ENV_VAR} if set)",
    )
    parser.add_argument(
        "-D",
        dest="definitions",
        action="append",
        default=[],
        metavar="KEY=VALUE",
        help="set a config key; wins over --conf; repeatable",
    )


def conf_file(args: argparse.Namespace) -> str | None:
    """The config file to read: ``--conf``, else ``$ACCELFLOW_CONF`` (not both), else none."""
    return args.conf or os.environ.get(ACCELFLOW_CONF_ENV_VAR) or None


def load_cli_config(args: argparse.Namespace, *, show_warnings: bool = True) -> Configuration:
    """The config the user gave: ``--conf`` (or ``$ACCELFLOW_CONF``), then ``-D``.

    ``show_warnings=False`` where these layers are not the whole config (``accelflow run``:
    the job script's own dict sits between them, and its ``Environment`` warns about the
    merged config instead, e.g. a ``-D external-resource.gpu.*`` key for a resource that only
    the script lists is no news).
    """
    config = config_from(conf_file=conf_file(args), definitions=args.definitions)
    if show_warnings:
        for warning in config.warnings:
            warn(warning)
    return config


class StdoutConsole(Console):
    """rich's ``Console`` for a command's output (stdout), e.g. ``StdoutConsole().print(table)``.

    A reader that goes (``| head -1``) raises ``BrokenPipeError`` on to :func:`accelflow.cli.main`,
    which ends every command the same way (exit code 141), where rich would exit with 1.
    """

    def on_broken_pipe(self) -> None:
        raise BrokenPipeError


def stderr() -> Console:
    return Console(file=sys.stderr, soft_wrap=True)


def say(line: str) -> None:
    """One ``accelflow: ...`` status line on stderr (stdout stays for what scripts read), in
    one write: TaskExecutors and subtasks may write to the same terminal or file meanwhile."""
    sys.stderr.write(f"accelflow: {line}\n")
    sys.stderr.flush()
