"""``accelflow-gpu-discovery``: the default discovery command, a drop-in for Flink's script.

Usage (exactly like ``nvidia-gpu-discovery.sh``, usable as ``discovery-script.path``)::

    accelflow-gpu-discovery <amount> [--enable-coordination-mode] [--coordination-file PATH]
                            [--owner-pid PID] [--lock-timeout SECONDS]

* prints the chosen GPU indexes, comma-separated, on stdout;
* amount 0 prints nothing and exits 0;
* without coordination: the first ``amount`` visible GPUs; too few: exit 1, message on stderr;
* ``--enable-coordination-mode`` (or ``--enable-coordination``, the spelling of Flink's docs)
  allocates through the coordination file (default: per user, see ``docs/gpu.md``); the owner
  of the GPUs is ``--owner-pid``, else the process named by ``$ACCELFLOW_GPU_OWNER`` (the GPU
  driver sets it, so a wrapper script in between does not matter), else the process that ran
  this command (its parent), as in Flink. An owner that has already exited is refused;
* ``--lock-timeout SECONDS`` bounds the wait for the coordination file's lock (default
  5 s); then the command fails naming the lock file and its holder;
* unknown options are an error (exit 2), never silently ignored.

Also runs as ``python -m accelflow.resources.gpu._discovery_cli``.
"""

from __future__ import annotations

import argparse
import os
import sys
from collections.abc import Sequence

import psutil

from accelflow._errors import AccelflowError, CoordinationError, DiscoveryError
from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S, Owner
from accelflow.resources.gpu._cli_args import COMMAND_NAME, absolute, build_parser
from accelflow.resources.gpu._coordination import OWNER_ENV_VAR, CoordinationFile, owner_from_env
from accelflow.resources.gpu._discovery import discover_gpus

EXIT_NOT_ENOUGH = 1


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command; returns the exit code (``sys.exit`` is left to the caller)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.amount == 0:
        return 0
    try:
        indexes = _choose(args)
    except AccelflowError as exc:
        print(f"{COMMAND_NAME}: error: {exc}", file=sys.stderr)
        return EXIT_NOT_ENOUGH
    print(",".join(indexes))
    return 0


def _choose(args: argparse.Namespace) -> list[str]:
    universe = discover_gpus()
    if not args.coordination:
        if len(universe) < args.amount:
            found = ", ".join(d.index for d in universe) or "none"
            raise DiscoveryError(
                f"could not get enough GPU resources: need {args.amount}, found "
                f"{len(universe)} ({found})"
            )
        return [d.index for d in universe[: args.amount]]
    ledger = CoordinationFile(
        absolute(args.coordination_file),
        lock_timeout=args.lock_timeout or DEFAULT_LOCK_TIMEOUT_S,
    )
    owner = _owner(args.owner_pid, ledger)
    return [d.index for d in ledger.allocate(universe, args.amount, owner)]


def _owner(owner_pid: int | None, ledger: CoordinationFile) -> Owner:
    """``--owner-pid``, else ``$ACCELFLOW_GPU_OWNER``, else the parent; never a dead one."""
    from_env = os.environ.get(OWNER_ENV_VAR)
    if owner_pid is None and from_env is not None:
        try:
            return owner_from_env(from_env)
        except ValueError as exc:
            raise CoordinationError(str(exc), path=str(ledger.path)) from None
    pid = owner_pid or psutil.Process().ppid()
    try:
        return Owner.of_process(pid)
    except psutil.NoSuchProcess:
        raise CoordinationError(
            f"the owner process {pid} is gone, so its GPUs would be free again at once",
            path=str(ledger.path),
        ) from None


if __name__ == "__main__":
    sys.exit(main())
