"""The arguments of ``accelflow-gpu-discovery``: the one parser of the discovery flags.

Used by the command itself, by the driver (a script's ``discovery-script.args`` tell which
coordination file the command recorded GPUs in, so it can release them eagerly) and by the
parameter check (``discovery-script.args`` without a script configure the in-process default
discovery, as Flink's args configure its default script).
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import NoReturn

from accelflow._errors import AccelflowError
from accelflow.config import _parse
from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S

COMMAND_NAME = "accelflow-gpu-discovery"
MAX_LOCK_TIMEOUT_S = 3600.0
"""The longest wait for the coordination lock one may configure: a holder keeps the lock for
milliseconds, so a longer wait only hides a stuck holder (issue 16.5)."""


def lock_timeout_seconds(value: object) -> float:
    """A coordination lock timeout: a positive duration of at most :data:`MAX_LOCK_TIMEOUT_S`.

    Example:
        >>> lock_timeout_seconds("500 ms"), lock_timeout_seconds("2")
        (0.5, 2.0)

    Raises:
        ValueError: not a positive duration, or longer than :data:`MAX_LOCK_TIMEOUT_S`.
    """
    seconds = _parse.seconds(value)
    if seconds > MAX_LOCK_TIMEOUT_S:
        raise ValueError(
            f"expected at most {MAX_LOCK_TIMEOUT_S:g} s (a lock is held for milliseconds; a "
            f"longer wait only hides a stuck holder), got {value!r}"
        )
    return seconds


def _lock_timeout(text: str) -> float:
    try:
        return lock_timeout_seconds(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


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
        help="the process that owns the GPUs (default: the process named by "
        "$ACCELFLOW_GPU_OWNER, else the parent of this command)",
    )
    parser.add_argument(
        "--lock-timeout",
        type=_lock_timeout,
        metavar="SECONDS",
        help="the longest wait for the coordination lock, e.g. '10' or '500 ms' (default "
        f"{DEFAULT_LOCK_TIMEOUT_S:g} s, at most {MAX_LOCK_TIMEOUT_S:g} s)",
    )
    return parser


@dataclass(frozen=True, slots=True, kw_only=True)
class DiscoveryFlags:
    """The discovery flags (everything after the amount), parsed.

    Attributes:
        coordination: ``--enable-coordination-mode`` (or ``--enable-coordination``) was given.
        coordination_file: ``--coordination-file``, made absolute; ``None`` when not given.
        owner_pid: ``--owner-pid``; ``None`` when not given.
        lock_timeout: ``--lock-timeout`` in seconds; ``None`` when not given.
    """

    coordination: bool = False
    coordination_file: Path | None = None
    owner_pid: int | None = None
    lock_timeout: float | None = None


def parse_flags(args: Sequence[str]) -> DiscoveryFlags:
    """Parse the flags the command takes after its amount.

    Example:
        >>> flags = parse_flags(["--enable-coordination", "--coordination-file", "/tmp/g.json"])
        >>> flags.coordination, flags.coordination_file, flags.owner_pid, flags.lock_timeout
        (True, PosixPath('/tmp/g.json'), None, None)

    Raises:
        ValueError: an unknown flag or a bad value; the message names it.
    """
    namespace = build_parser(quiet=True).parse_args(["1", *args])
    return DiscoveryFlags(
        coordination=namespace.coordination,
        coordination_file=absolute(namespace.coordination_file),
        owner_pid=namespace.owner_pid,
        lock_timeout=namespace.lock_timeout,
    )


def coordination_file_of(args: Sequence[str]) -> Path | None:
    """The coordination file that ``args`` (without the amount) make this command use, or
    ``None`` when they do not enable coordination or do not parse.

    Example:
        >>> coordination_file_of(["--enable-coordination", "--coordination-file", "/tmp/g.json"])
        PosixPath('/tmp/g.json')
    """
    try:
        flags = parse_flags(args)
    except ValueError:
        return None
    if not flags.coordination:
        return None
    from accelflow.resources.gpu._coordination import default_coordination_path

    try:
        return flags.coordination_file or default_coordination_path()
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
        parse_flags(args)
    except ValueError as exc:
        return str(exc)
    return None
