"""The arguments of ``accelflow-gpu-discovery`` (shared by the command and the driver).

The driver reads a script's ``discovery-script.args`` with the same parser to learn which
coordination file the command recorded GPUs in, so it can release them eagerly.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path
from typing import NoReturn

from accelflow._errors import AccelflowError

COMMAND_NAME = "accelflow-gpu-discovery"


def _amount(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}") from None
    if value < 0:
        raise argparse.ArgumentTypeError(f"expected a whole number >= 0, got {text!r}")
    return value


def _pid(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"expected a process id, got {text!r}") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"expected a process id, got {text!r}")
    return value


class _QuietParser(argparse.ArgumentParser):
    """Raises :class:`ValueError` instead of printing usage and exiting."""

    def error(self, message: str) -> NoReturn:
        raise ValueError(message)


def build_parser(*, quiet: bool = False) -> argparse.ArgumentParser:
    """The argument parser; ``quiet`` parsers raise ``ValueError`` instead of exiting."""
    parser = (_QuietParser if quiet else argparse.ArgumentParser)(
        prog=COMMAND_NAME,
        add_help=not quiet,
        description="Print the indexes of <amount> NVIDIA GPUs of this host, comma-separated.",
        allow_abbrev=False,
    )
    parser.add_argument("amount", type=_amount, help="how many GPUs (0 prints nothing)")
    parser.add_argument(
        "--enable-coordination-mode",
        "--enable-coordination",
        dest="coordination",
        action="store_true",
        help="allocate through the host coordination file so co-located TaskExecutors never "
        "share a GPU",
    )
    parser.add_argument(
        "--coordination-file",
        type=Path,
        metavar="PATH",
        help="the coordination file (default: per user, under the temp directory)",
    )
    parser.add_argument(
        "--owner-pid",
        type=_pid,
        metavar="PID",
        help="the process that owns the GPUs (default: the parent of this command)",
    )
    return parser


def coordination_file_of(args: Sequence[str]) -> Path | None:
    """The coordination file that ``args`` (without the amount) make this command use, or
    ``None`` when they do not enable coordination or do not parse.

    Example:
        >>> coordination_file_of(["--enable-coordination", "--coordination-file", "/tmp/g.json"])
        PosixPath('/tmp/g.json')
    """
    try:
        namespace = build_parser(quiet=True).parse_args(["1", *args])
    except ValueError:
        return None
    if not namespace.coordination:
        return None
    from accelflow.resources.gpu._coordination import default_coordination_path

    try:
        return absolute(namespace.coordination_file) or default_coordination_path()
    except AccelflowError:
        return None


def absolute(path: Path | None) -> Path | None:
    return None if path is None else path.expanduser().absolute()


def args_problem(args: Sequence[str]) -> str | None:
    """Why ``args`` (without the amount) would make this command fail, or ``None``.

    Example:
        >>> args_problem(["--enable-coordination-mod"])
        'unrecognized arguments: --enable-coordination-mod'
    """
    try:
        build_parser(quiet=True).parse_args(["1", *args])
    except ValueError as exc:
        return str(exc)
    return None
