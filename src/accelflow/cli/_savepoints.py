"""``accelflow savepoint JOB_ID [TARGET_DIRECTORY]`` and ``accelflow stop [-p DIR] JOB_ID``:
savepoints of a job on a session cluster, as ``flink savepoint`` and ``flink stop`` (stop with
savepoint: the sinks commit the savepoint's output, then the job ends ``FINISHED``).

Both wait until the savepoint is complete (``stop``: until the job has ended) and print its
path on stdout, alone, so ``SP=$(accelflow savepoint job-1 /savepoints)`` works; resume from it
with ``accelflow run -s PATH job.py``. A local target directory is made absolute here (the
cluster's working directory is not yours); without one, the job's
``execution.checkpointing.savepoint-dir`` is used.
"""

from __future__ import annotations

import argparse
import os
from typing import Any

from accelflow._errors import AccelflowError, decode_error
from accelflow.cli._common import say
from accelflow.runtime import SavepointDone, SavepointFailed, TriggerSavepoint

_EPILOG = """\
examples:
  accelflow savepoint job-1 /savepoints
  accelflow stop --savepoint-path /savepoints job-1
  accelflow run -s /savepoints/savepoint-3f2a9c-0a1b2c3d job.py"""


def register(sub: Any) -> None:
    savepoint = sub.add_parser(
        "savepoint", help="take a savepoint of a job on a session cluster",
        description="Take a savepoint of a running job on a session cluster (like 'flink "
        "savepoint <jobId> [targetDirectory]'); the job goes on. Prints the savepoint's path.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    savepoint.add_argument("job_id", metavar="JOB_ID", help="the job, e.g. job-1 (see the web UI)")
    savepoint.add_argument(
        "target", metavar="TARGET_DIRECTORY", nargs="?",
        help="where the savepoint goes (default: execution.checkpointing.savepoint-dir)")
    savepoint.set_defaults(func=take_savepoint)
    stop = sub.add_parser(
        "stop", help="stop a job on a session cluster with a savepoint",
        description="Stop a running job with a savepoint (like 'flink stop'): the sinks commit "
        "the savepoint's output and the job ends FINISHED. Prints the savepoint's path.",
        epilog=_EPILOG, formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    stop.add_argument(
        "-p", "--savepoint-path", "--savepointPath", dest="target", metavar="DIR",
        help="where the savepoint goes (default: execution.checkpointing.savepoint-dir)")
    stop.add_argument("job_id", metavar="JOB_ID", help="the job, e.g. job-1 (see the web UI)")
    stop.set_defaults(func=stop_job)
    for parser in (savepoint, stop):
        parser.add_argument("--cluster", metavar="URL",
                            help="the session cluster serving this REST URL (default: the only one)")


def take_savepoint(args: argparse.Namespace) -> int:
    return _savepoint(args, stop=False)


def stop_job(args: argparse.Namespace) -> int:
    return _savepoint(args, stop=True)


def _savepoint(args: argparse.Namespace, *, stop: bool) -> int:
    path = _ask(args, stop=stop)
    print(path, flush=True)
    done = (f"stopped {args.job_id} with a savepoint" if stop
            else f"savepoint of {args.job_id} complete; the job goes on")
    say(f"{done}. Resume from it with: accelflow run -s {path} ... job.py")
    return 0


def _ask(args: argparse.Namespace, *, stop: bool) -> str:
    from accelflow.runtime.client import find_session

    info = find_session(args.cluster)
    target = args.target
    if target is not None and "://" not in target:
        target = os.path.abspath(os.path.expanduser(target))
    with info.connect() as conn:
        conn.send(TriggerSavepoint(args.job_id, target, stop))
        try:
            reply = conn.recv()
        except (EOFError, OSError) as exc:
            raise AccelflowError(f"the session cluster at {info.url} went away before the "
                                 f"savepoint of {args.job_id} completed; see its log {info.log}") from exc
    if isinstance(reply, SavepointFailed):
        raise decode_error(reply.error)
    if not isinstance(reply, SavepointDone):
        raise AccelflowError(f"unexpected answer from the session cluster at {info.url}: {reply!r}")
    return reply.path

