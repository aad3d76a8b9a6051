"""How ``accelflow run`` tells the end of a job it did not see coming: Ctrl-C, a stop with a
savepoint, an error in the job script itself.

Ctrl-C (SIGINT) raises ``KeyboardInterrupt`` in the script once: its job client cancels the
job and waits for its end. Every later Ctrl-C while a job the script started is still ending
only says so (:class:`Interrupts`), so the end is always reported, with the ``-s PATH`` to
resume from, and no cancellation is cut short halfway (a second Ctrl-C used to stop the wait,
tear the cluster down under the job and lose the resume hint).
"""

from __future__ import annotations

import argparse
import os
import shlex
import signal
import sys
import threading
import time
from types import FrameType, TracebackType
from typing import Any

from accelflow.cli._common import say
from accelflow.runtime.client import ProgressSource

#: how long the ended script waits for the jobs it started to finish cancelling
CANCEL_WAIT_S = 30.0
_STILL_ENDING = b"accelflow: interrupted again: still cancelling; waiting for the job to end\n"


class Interrupts:
    """SIGINT while ``accelflow run`` runs a script (a context manager; main thread only).

    A SIGINT raises ``KeyboardInterrupt``, unless a job that was running at the previous one
    has not ended yet (its client is cancelling it), or after :meth:`ending` (the CLI waits
    for the cancelled jobs): then it prints one line instead, once. A script that catches
    the interrupt and starts another job can still be interrupted again.
    """

    def __init__(self, started: list[tuple[ProgressSource, Any]]) -> None:
        self.started = started
        self._cancelling: list[tuple[ProgressSource, Any]] = []
        self._ending = False
        self._said = False
        self._previous: Any = None
        self._installed = threading.current_thread() is threading.main_thread()

    def __enter__(self) -> Interrupts:
        if self._installed:
            self._previous = signal.signal(signal.SIGINT, self._on_sigint)
        return self

    def __exit__(self, *exc: object) -> None:
        if self._installed:
            signal.signal(signal.SIGINT, self._previous)

    def ending(self) -> None:
        """From now on every SIGINT only says that the jobs are still ending."""
        self._ending = True

    def _on_sigint(self, signum: int, frame: FrameType | None) -> None:
        if self._ending or any(not _ended(s, g) for s, g in self._cancelling):
            if not self._said:
                self._said = True
                os.write(2, _STILL_ENDING)  # not print(): the main thread may be inside a print
            return
        self._cancelling = [(s, g) for s, g in self.started if not _ended(s, g)]
        self._said = False
        raise KeyboardInterrupt


def report_interrupted(started: list[tuple[ProgressSource, Any]], args: argparse.Namespace,
                       given: list[str]) -> None:
    """After Ctrl-C: cancel what still runs, wait for its end, and say which job was
    cancelled and where its retained checkpoint is (with the command to resume from it)."""
    deadline = time.monotonic() + CANCEL_WAIT_S
    for source, graph in started:
        _cancel_and_wait(source, graph, deadline)
    reported = False
    for source, graph in started:
        job_id, state, retained = ending_of(source, graph)
        if job_id is None or state in ("FINISHED", "FAILED"):
            continue  # ended before the interrupt
        reported = True
        if state != "CANCELED":
            say(f"interrupted; {job_id} ({graph.name}) has not stopped yet ({state})")
            continue
        say(f"interrupted: cancelled {job_id} ({graph.name})")
        if retained is None:
            continue
        if retained.startswith("memory://") and not args.cluster:
            say("its checkpoints were kept in memory (execution.checkpointing.dir is not set), "
                "so none is left to resume from")
            continue
        say(f"its latest checkpoint is kept at {retained}")
        say(f"resume with: {resume_command(retained, args, given)}")
    if not reported:
        say("interrupted")


def report_stopped(source: ProgressSource, graph: Any, args: argparse.Namespace,
                   given: list[str]) -> None:
    """After a job ended: if it was stopped with a savepoint (``accelflow stop``, the REST
    API or the web UI), say where the savepoint is and how to resume from it. A job on a
    session cluster has said where already (its client prints it when the job ends)."""
    path = _stopped_with_savepoint(source, graph)
    if path is None:
        return
    if _is_jobmanager(source):
        job_id, _, _ = ending_of(source, graph)
        say(f"{job_id} ({graph.name}) was stopped with a savepoint at {path}")
    say(f"resume with: {resume_command(path, args, given)}")


def print_script_error(exc: BaseException, script: str) -> int:
    """An exception the job script let out, shown as ``python script.py`` shows it: from the
    script's own first frame on, without accelflow's and runpy's frames above it. Returns 1,
    Python's exit code for it."""
    tb: TracebackType | None = exc.__traceback__
    while tb is not None and tb.tb_frame.f_code.co_filename != script:
        tb = tb.tb_next
    sys.stdout.flush()
    sys.excepthook(type(exc), exc.with_traceback(tb), tb)  # no frame of the script: a SyntaxError...
    return 1


def ending_of(source: ProgressSource, graph: Any) -> tuple[str | None, str, str | None]:
    """``(job id, state, retained checkpoint)`` of the job that ``source`` ran."""
    if _is_jobmanager(source):
        from accelflow.runtime.rest import retained_checkpoint

        with source.lock:  # type: ignore[attr-defined]
            job = _job_of(source, graph)
            if job is None:
                return None, "CREATED", None
            return job.id, job.state, retained_checkpoint(job)
    return (getattr(source, "job_id", None), str(getattr(source, "status", lambda: "?")()),
            getattr(source, "retained_checkpoint", None))


def resume_command(path: str, args: argparse.Namespace, given: list[str]) -> str:
    """The ``accelflow run`` command line that resumes the script from ``path``.

    Example:
        >>> args = argparse.Namespace(conf=None, cluster=None, allow_non_restored=False,
        ...                           script="job.py", args=["--rate", "0"])
        >>> resume_command("/ckpt/chk-7", args, ["parallelism.default=2"])
        'accelflow run -s /ckpt/chk-7 -D parallelism.default=2 job.py --rate 0'
    """
    words = ["accelflow", "run", "-s", path]
    if args.conf:
        words += ["--conf", args.conf]
    for definition in given:
        words += ["-D", definition]
    if args.cluster:
        words += ["--cluster", args.cluster]
    if args.allow_non_restored:
        words.append("-n")
    words += [args.script, *args.args]
    return shlex.join(words)


def _is_jobmanager(source: ProgressSource) -> bool:
    from accelflow.runtime.jobmanager import JobManager

    return isinstance(source, JobManager)


def _job_of(source: Any, graph: Any) -> Any:
    jobs = [j for j in list(source.jobs.values()) if j.graph is graph]
    return jobs[-1] if jobs else None


def _ended(source: ProgressSource, graph: Any) -> bool:
    """Whether the job of ``source`` has ended; lock-free (a signal handler asks)."""
    if _is_jobmanager(source):
        job = _job_of(source, graph)
        return job is None or job.done.is_set()
    return str(getattr(source, "status", lambda: "?")()) != "RUNNING"


def _cancel_and_wait(source: ProgressSource, graph: Any, deadline: float) -> None:
    """Cancel the job of ``source`` unless it has ended, and wait for its end until
    ``deadline`` (``time.monotonic()``)."""
    if _ended(source, graph):
        return
    if _is_jobmanager(source):
        job = _job_of(source, graph)
        source.cancel(job.id)  # type: ignore[attr-defined]
        job.done.wait(max(0.0, deadline - time.monotonic()))
        return
    source.cancel()  # type: ignore[attr-defined]
    try:
        source.wait(max(0.0, deadline - time.monotonic()))  # type: ignore[attr-defined]
    except Exception:  # its end, whichever it is, is reported from its status
        pass


def _stopped_with_savepoint(source: ProgressSource, graph: Any) -> str | None:
    if _is_jobmanager(source):
        job = _job_of(source, graph)
        return None if job is None else job.stopped_with_savepoint  # type: ignore[no-any-return]
    return getattr(source, "stopped_with_savepoint", None)
