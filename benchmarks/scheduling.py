"""Benchmark: placing 10 subtasks per TaskExecutor on 100, 300 and 1,000 TaskExecutors (issue 31).

Synthetic offers as in the issue: 16 slots and 8 GPUs per TaskExecutor, every subtask asking
``{"gpu": 0.5}``, placed with ``pack`` and ``spread``, by

* today's (the first) placement, kept as the plain reference
  (``accelflow.scheduling._reference.place``: sorts every offer per request, quadratic), run
  once per cell; a cell that runs past ``--reference-limit`` seconds is stopped and shown as
  ``> N s``;
* the incremental placement (``accelflow.scheduling.place``), ``--repeat`` times: median
  (min - max). Its assignments are compared with the reference's wherever the reference ran.

Then the JobManager's path on 1,000 TaskExecutors, through ``ClusterState`` (its capacity
index, device ledger and slot book; the ``Deployer`` adds only the ``Deploy`` messages):
deploying the 10,000 subtasks, losing one TaskExecutor and placing its subtasks again on the
others (``--repeat`` TaskExecutors lost in turn), releasing everything, and a refusal with its
explanation on a full cluster. Last, soft preferences (issue 27): the whole job restarted with
every subtask preferring its predecessor's device and one warm device per TaskExecutor, against
the same placement without them.

Usage::

    python benchmarks/scheduling.py [--repeat 5] [--reference-limit 60] [--sizes 100 300 1000]
"""

from __future__ import annotations

import argparse
import math
import os
import platform
import signal
import statistics
import sys
import time
from collections.abc import Callable, Sequence
from fractions import Fraction
from types import FrameType
from typing import Any

from accelflow import AllocationError
from accelflow.runtime import RegisteredDevice, RegisteredResource, Registration, SubtaskKey
from accelflow.runtime.jobmanager._state import ClusterState
from accelflow.scheduling import DeviceKey, ResourceProfile, SlotRequest, SubtaskRequest, TaskExecutorOffer, place
from accelflow.scheduling._reference import place as reference_place

SLOTS, GPUS, PER_TE = 16, 8, 10
HALF = ResourceProfile({"gpu": Fraction(1, 2)})
POLICIES = ("pack", "spread")


def offers(n: int) -> list[TaskExecutorOffer]:
    gpus = {str(a): Fraction(1) for a in range(GPUS)}
    return [TaskExecutorOffer(f"taskexecutor-{i}", SLOTS, SLOTS, {"gpu": dict(gpus)}) for i in range(1, n + 1)]


def requests(m: int, attempt: int = 0, indexes: Sequence[int] | None = None) -> list[SlotRequest]:
    return [SlotRequest((SubtaskRequest(SubtaskKey("bench", attempt, 0, i), f"embed ({i + 1}/{m})", HALF),))
            for i in (indexes if indexes is not None else range(m))]


def timed(fn: Callable[[], Any]) -> tuple[float, Any]:
    started = time.perf_counter()
    result = fn()
    return time.perf_counter() - started, result


class _Stopped(Exception):
    pass


def _stop(signum: int, frame: FrameType | None) -> None:
    raise _Stopped


def time_limited(fn: Callable[[], Any], limit: float) -> tuple[float | None, Any]:
    """``fn``'s time and result, or (None, None) when it ran past ``limit`` seconds (0: none)."""
    previous = signal.signal(signal.SIGALRM, _stop)
    if limit:
        signal.setitimer(signal.ITIMER_REAL, limit)
    try:
        return timed(fn)
    except _Stopped:
        return None, None
    finally:
        signal.setitimer(signal.ITIMER_REAL, 0)
        signal.signal(signal.SIGALRM, previous)


def spread_of(times: list[float], unit: float = 1.0, digits: int = 3) -> str:
    t = [x / unit for x in times]
    return f"{statistics.median(t):.{digits}f} ({min(t):.{digits}f} - {max(t):.{digits}f})"


def table(sizes: list[int], repeat: int, limit: float) -> dict[tuple[int, str], list[float]]:
    print("| TaskExecutors | subtasks | today pack | today spread | new pack | new spread | same decisions |")
    print("|---|---|---|---|---|---|---|")
    new: dict[tuple[int, str], list[float]] = {}
    for n in sizes:
        cells, same = [], []
        for policy in POLICIES:
            seconds, expected = time_limited(lambda: reference_place(requests(PER_TE * n), offers(n), policy), limit)
            cells.append(f"{seconds:.2f} s" if seconds is not None else f"> {limit:.0f} s (stopped)")
            runs = []
            for _ in range(repeat):
                reqs, offs = requests(PER_TE * n), offers(n)
                seconds, got = timed(lambda: place(reqs, offs, policy))
                runs.append(seconds)
            new[(n, policy)] = runs
            same.append("n/a" if expected is None else "yes" if got == expected else "NO")
        cells += [f"{spread_of(new[(n, p)])} s" for p in POLICIES]
        print(f"| {n:,} | {PER_TE * n:,} | {' | '.join(cells)} | {' / '.join(same)} |")
    return new


def verdicts(sizes: list[int], new: dict[tuple[int, str], list[float]]) -> None:
    small, large = min(sizes), max(sizes)
    ratio = large / small
    nlogn = ratio * math.log(large) / math.log(small)
    print()
    print("growth from the fastest of the runs (the least disturbed by other work on the machine):")
    for policy in POLICIES:
        grew = min(new[(large, policy)]) / min(new[(small, policy)])
        at = statistics.median(new[(large, policy)])
        print(f"  {policy}: {large:,} TaskExecutors / {PER_TE * large:,} subtasks in {at:.3f} s (median) "
              f"(target < 1 s: {'met' if at < 1 else 'MISSED'}); {small:,} -> {large:,} TaskExecutors "
              f"grew x{grew:.1f} (n log n: x{nlogn:.1f}, n^2: x{ratio ** 2:.0f}; "
              f"{'no faster than n log n' if grew <= nlogn else 'FASTER THAN n log n'})")


def registration(i: int) -> Registration:
    devices = tuple(RegisteredDevice(str(a), {"index": str(a)}) for a in range(GPUS))
    return Registration(f"taskexecutor-{i}", i, SLOTS, (RegisteredResource("gpu", GPUS, "gpu", devices=devices),))


def jobmanager_path(n: int, repeat: int) -> None:
    print(f"\nJobManager path (ClusterState: capacity index + ledger + slot book), {n:,} TaskExecutors, "
          f"{PER_TE * n:,} subtasks; milliseconds, median (min - max) of {repeat}:")
    for policy in POLICIES:
        state = ClusterState()
        for i in range(1, n + 1):
            state.add_taskexecutor(registration(i))
        deploys, replaces, releases, moved = [], [], [], []
        for attempt in range(repeat):
            reqs = requests(PER_TE * n, attempt)
            seconds, placed = timed(lambda: _deploy(state, attempt, reqs, policy))
            deploys.append(seconds)
            victim = placed[(attempt * 997) % len(placed)].taskexecutor  # a different one each time
            seconds, again = timed(lambda: _lose_and_replace(state, victim, attempt, placed, policy))
            replaces.append(seconds)
            moved.append(len(again))
            seconds, _ = timed(lambda: _release_all(state, attempt, placed + again))
            releases.append(seconds)
            state.add_taskexecutor(registration(int(victim.rsplit("-", 1)[1])))  # its replacement
        print(f"  {policy}: deploy {spread_of(deploys, 1e-3, 1)}; "
              f"lose one TaskExecutor and place its {moved[0]} subtasks again {spread_of(replaces, 1e-3, 2)} "
              f"(target < 50 ms: {'met' if statistics.median(replaces) < 0.05 else 'MISSED'}); "
              f"release all {spread_of(releases, 1e-3, 1)}")
    refusal(n)


def _deploy(state: ClusterState, attempt: int, reqs: list[SlotRequest], policy: Any) -> list[Any]:
    with state.lock:
        placed = state.place(reqs, policy)
        state.take("bench", attempt, placed)
    return placed


def _lose_and_replace(state: ClusterState, te: str, attempt: int, placed: list[Any], policy: Any) -> list[Any]:
    """What a lost TaskExecutor costs: forget it, release its subtasks (their devices went
    with it), place them again on the others and take their slots and shares."""
    with state.lock:
        state.lose_taskexecutor(te, int(te.rsplit("-", 1)[1]))
        lost = [key for a in placed if a.taskexecutor == te for key in a.shares]
        for key in lost:
            state.release_devices(key)
        again = state.place(requests(PER_TE * len(state.taskexecutors), attempt, [k.index for k in lost]), policy)
        state.take("bench-again", attempt, again)
    return again  # type: ignore[no-any-return]


def _release_all(state: ClusterState, attempt: int, placed: list[Any]) -> None:
    """Every subtask ends (gives its shares back), then the attempt gives its slots back."""
    with state.lock:
        for a in placed:
            for key in a.shares:
                state.release_devices(key)
        state.release_slots("bench", attempt)
        state.release_slots("bench-again", attempt)


def restart_with_preferences(n: int, repeat: int) -> None:
    """Issue 27: every subtask of a job restarted (the next attempt) prefers the device its
    predecessor held, and one device per TaskExecutor has an idle warm process: the whole job
    placed with those preferences, against the same placement without them."""
    print(f"\nrestart of all {PER_TE * n:,} subtasks on {n:,} TaskExecutors, each preferring its "
          f"predecessor's device, one warm device per TaskExecutor; milliseconds, median (min - max) of {repeat}:")
    for policy in POLICIES:
        state = ClusterState()
        for i in range(1, n + 1):
            state.add_taskexecutor(registration(i))
        before = _deploy(state, 0, requests(PER_TE * n, 0), policy)
        _release_all(state, 0, before)
        previous = {key.index: list(shares) for a in before for key, shares in a.shares.items()}
        warm = {DeviceKey(f"taskexecutor-{i}", "gpu", str(i % GPUS)) for i in range(1, n + 1)}
        reqs = requests(PER_TE * n, 1)
        preferences = {s.holder: previous[s.holder.index] for r in reqs for s in r.subtasks}
        timings: dict[bool, list[float]] = {True: [], False: []}
        honoured = 0
        for attempt in range(1, repeat + 1):
            for prefer in (True, False):
                with state.lock:
                    seconds, placed = timed(lambda: state.place(reqs, policy, *((preferences, warm) if prefer else ())))
                    state.take("bench", attempt, placed)
                timings[prefer].append(seconds)
                if prefer:
                    honoured = sum(1 for a in placed for key, shares in a.shares.items()
                                   if set(shares) & set(preferences[key]))
                _release_all(state, attempt, placed)
        print(f"  {policy}: with preferences {spread_of(timings[True], 1e-3, 1)} ({honoured:,} of {len(reqs):,} "
              f"on their previous device); without {spread_of(timings[False], 1e-3, 1)}")


def refusal(n: int) -> None:
    full = offers(n)
    reqs = requests(SLOTS * n + 1)
    seconds, error = timed(lambda: _refused(reqs, full))
    print(f"\nrefusal of subtask {SLOTS * n + 1:,} on {n:,} full TaskExecutors, explanation included: "
          f"{seconds:.2f} s for the whole call; its reasons: {list(error.reasons)}")


def _refused(reqs: list[SlotRequest], full: list[TaskExecutorOffer]) -> AllocationError:
    try:
        place(reqs, full)
    except AllocationError as exc:
        return exc
    raise AssertionError("a full cluster took one more subtask")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=5)
    parser.add_argument("--reference-limit", type=float, default=60.0,
                        help="stop a reference run after this many seconds (0: never)")
    parser.add_argument("--sizes", type=int, nargs="+", default=[100, 300, 1000])
    args = parser.parse_args(argv)
    load = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"# benchmarks/scheduling.py: {SLOTS} slots and {GPUS} GPUs per TaskExecutor, {PER_TE} subtasks per "
          f"TaskExecutor, each {{'gpu': 0.5}}.\n# {platform.platform()}, Python {platform.python_version()}, "
          f"{os.cpu_count()} cores, load average {load:.1f} at start. Today's reference: one run per cell "
          f"({f'stopped past {args.reference_limit:.0f} s' if args.reference_limit else 'no time limit'}); "
          f"new: median (min - max) of {args.repeat} runs.\n")
    new = table(args.sizes, args.repeat, args.reference_limit)
    if len(args.sizes) > 1:
        verdicts(args.sizes, new)
    jobmanager_path(max(args.sizes), args.repeat)
    restart_with_preferences(max(args.sizes), args.repeat)


if __name__ == "__main__":
    sys.exit(main())
