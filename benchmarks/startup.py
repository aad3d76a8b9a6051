"""Where start-up time goes: ``execute()`` to the first record, phase by phase.

    .venv/bin/python benchmarks/startup.py [--repeat 5] [--taskexecutors 1]

The job is the smallest there is, ``Environment().from_sequence(1, 10).map(f)
.execute_and_collect()``. Each repetition runs in a fresh interpreter (``import accelflow``
done before the clock starts), once per ``local.start-method``, and runs the job twice: a
client's first job (whose ``Environment``, made just before ``execute()``, starts the zygote)
and its next one are shown apart. With
``$ACCELFLOW_STARTUP_TRACE`` set, the launcher, each
TaskExecutor and ``f`` append time stamps (``accelflow.runtime.taskexecutor._trace``) to one
file; the phases below are seconds since ``execute()``, the median of the repetitions:

* ``launcher popen``: the first TaskExecutor process is asked for;
* ``te process created`` / ``te imports done``: its interpreter exists / its imports are done
  (the last TaskExecutor's);
* ``te forkserver started`` (its preloads import on their own), ``te drivers done``, ``te registered``: the last TaskExecutor's;
* ``deploy received``, ``subtask forked``: the first subtask's Deploy and fork;
* ``first record``: ``f`` called on the first record (the first subtask to get one);
* ``startup_s``: ``JobResult.startup_s`` (the JobManager's own figure: first record out of
  a source, as reported by the subtask's progress message);
* ``done``: ``execute_and_collect()`` returned (cluster stopped).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from typing import Any

PHASES = [
    "launcher popen", "te process created", "te imports done", "te forkserver started",
    "te drivers done", "te registered", "deploy received", "subtask forked", "first record",
    "startup_s", "done",
]
_FIRST = {"launcher popen", "deploy received", "subtask forked", "first record"}


def _one(trace_path: str, taskexecutors: int, method: str) -> None:
    """One repetition, in this (fresh) interpreter: two jobs, traced to ``trace_path.1``
    and ``trace_path.2``."""
    from accelflow import Environment
    from accelflow.runtime.taskexecutor import trace

    for job in (1, 2):
        path = f"{trace_path}.{job}"
        os.environ["ACCELFLOW_STARTUP_TRACE"] = path

        def stamp(x: Any, _seen: list[bool] = [], path: str = path) -> Any:  # noqa: B006 - once per subtask
            if not _seen:
                _seen.append(True)
                os.environ["ACCELFLOW_STARTUP_TRACE"] = path
                trace("first record")
            return x

        env = Environment({"local.number-taskmanager": taskexecutors, "local.start-method": method})
        stream = env.from_sequence(1, 10).map(stamp)
        trace("execute")
        records = stream.execute_and_collect()
        result = env.last_result
        trace("done")
        assert sorted(records) == list(range(1, 11)), records
        trace(f"startup_s {result.startup_s}")


def phases(trace_text: str) -> dict[str, float]:
    """Seconds since ``execute`` for each phase of one repetition's trace."""
    events: list[tuple[float, str]] = []
    startup: float | None = None
    for line in trace_text.splitlines():
        stamp, _pid, event = line.split(" ", 2)
        if event.startswith("startup_s "):
            value = event.split(" ", 1)[1]
            startup = None if value == "None" else float(value)
            continue
        events.append((float(stamp), event))
    out = phase_times(events, PHASES, _FIRST)
    if startup is not None:
        out["startup_s"] = startup
    return out


def phase_times(events: list[tuple[float, str]], phases: list[str], first: set[str]) -> dict[str, float]:
    """Seconds since the ``execute`` event for each of ``phases`` found in ``events``: its
    first occurrence for the phases in ``first``, its last for the others (e.g. the last
    TaskExecutor's). Shared with benchmarks/ray_startup.py."""
    t0 = next(t for t, e in events if e == "execute")
    out: dict[str, float] = {}
    for phase in phases:
        times = [t - t0 for t, e in events if e == phase or e.startswith(phase + " ")]
        if times:
            out[phase] = min(times) if phase in first else max(times)
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--taskexecutors", type=int, default=1)
    parser.add_argument("--one", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.one:
        _one(args.one[0], args.taskexecutors, args.one[1])
        return
    runs: dict[tuple[str, int], list[dict[str, float]]] = {}
    with tempfile.TemporaryDirectory(prefix="accelflow-startup-") as tmp:
        for i in range(args.repeat):
            for method in ("spawn", "zygote"):  # interleaved: the same minutes for both
                path = os.path.join(tmp, f"trace{i}-{method}")
                subprocess.run([sys.executable, __file__, "--one", path, method,
                                "--taskexecutors", str(args.taskexecutors)], check=True)
                for job in (1, 2):
                    with open(f"{path}.{job}", encoding="utf-8") as f:
                        runs.setdefault((method, job), []).append(phases(f.read()))
                time.sleep(0.2)
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    print(f"# {platform.platform()}, Python {platform.python_version()}, {cores} cores")
    print(f"# from_sequence(1, 10).map(f).execute_and_collect(), {args.taskexecutors} "
          f"TaskExecutor(s); seconds since execute(), median of {args.repeat} (min - max)")
    for (method, job), title in (
        (("spawn", 2), "local.start-method: spawn (every job alike; the second job of a client)"),
        (("zygote", 1), "local.start-method: zygote, a client's first job (its Environment, made "
                        "just before, starts the zygote)"),
        (("zygote", 2), "local.start-method: zygote, the client's next job (the zygote runs)"),
    ):
        print(f"\n{title}")
        for phase in PHASES:
            values = [r[phase] for r in runs[method, job] if phase in r]
            if values:
                print(f"  {phase:<20} {statistics.median(values):6.3f} s"
                      f"   ({min(values):.3f} - {max(values):.3f})")


if __name__ == "__main__":
    main()
