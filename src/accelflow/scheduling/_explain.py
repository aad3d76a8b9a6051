"""Why a slot request fits nowhere, in words a user can act on.

A small cluster gets one line per TaskExecutor and device, as it always did
(``taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed``). Past :data:`FLAT_LIMIT` lines, each
TaskExecutor's reason is summed up in one line without its devices, and TaskExecutors with the
same summary are merged into ranges in natural order::

    taskexecutor-1..640: no free slot (16 of 16 used)
    taskexecutor-641..1000: gpu has at most 0.3 free, 0.5 needed

so a refusal on 1,000 TaskExecutors reads in a few lines, not 8,000.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Iterable, Sequence
from fractions import Fraction

from accelflow.scheduling._memory import MEMORY_PROPERTY, format_bytes
from accelflow.scheduling._model import SlotRequest, SubtaskRequest, TaskExecutorOffer, natural_key

#: more reason lines than this are grouped into ranges of TaskExecutors
FLAT_LIMIT = 32
_TRAILING = re.compile(r"(.*?)(\d+)")
#: at most this many ranges are named per grouped line; the rest are counted
MAX_RANGES = 8


class Reasons:
    """Why each TaskExecutor refuses one slot request.

    Attributes:
        lines: one line per TaskExecutor and device, e.g.
            ``"taskexecutor-1: gpu 0 has 0.3 free, 0.5 needed"``.
        summaries: per TaskExecutor, its reason in one line without the devices, e.g.
            ``"gpu has at most 0.3 free, 0.5 needed"``.
    """

    __slots__ = ("lines", "summaries")

    def __init__(self) -> None:
        self.lines: list[str] = []
        self.summaries: dict[str, str] = {}

    def add(self, taskexecutor: str, details: Iterable[str], summary: str) -> None:
        self.lines.extend(f"{taskexecutor}: {d}" for d in details)
        self.summaries.setdefault(taskexecutor, summary)

    def readable(self) -> list[str]:
        """:attr:`lines` when at most :data:`FLAT_LIMIT`, else :func:`grouped` summaries."""
        return self.lines if len(self.lines) <= FLAT_LIMIT else grouped(self.summaries)


def grouped(summaries: dict[str, str]) -> list[str]:
    """One line per distinct summary, naming its TaskExecutors as ranges in natural order.

    A range ``a..b`` is every TaskExecutor from ``a`` to ``b`` (in natural order) that gave a
    reason, so a lost ``taskexecutor-5`` does not split ``taskexecutor-1..9``.

    Example:
        >>> grouped({"te-1": "no free slot", "te-2": "no free slot", "te-3": "has no gpu"})
        ['te-1..2: no free slot', 'te-3: has no gpu']
    """
    runs: list[tuple[str, str, str]] = []  # first, last, summary
    for te in sorted(summaries, key=natural_key):
        if runs and runs[-1][2] == summaries[te]:
            runs[-1] = (runs[-1][0], te, runs[-1][2])
        else:
            runs.append((te, te, summaries[te]))
    by_summary: dict[str, list[tuple[str, str, str]]] = {}
    for run in runs:
        by_summary.setdefault(run[2], []).append(run)
    lines = []
    for summary, group in by_summary.items():
        named = ", ".join(_span(first, last) for first, last, _ in group[:MAX_RANGES])
        if len(group) > MAX_RANGES:
            count = sum(1 for s in summaries.values() if s == summary)
            named += f", ... ({count} TaskExecutors in {len(group)} ranges)"
        lines.append(f"{named}: {summary}")
    return lines


def _span(first: str, last: str) -> str:
    """``taskexecutor-1..640``; ``a..b`` when the two do not differ in a trailing number."""
    if first == last:
        return first
    head, tail = _TRAILING.fullmatch(first), _TRAILING.fullmatch(last)
    if head and tail and head.group(1) == tail.group(1):
        return f"{first}..{tail.group(2)}"
    return f"{first}..{last}"


def describe_failure(request: SlotRequest, offers: Sequence[TaskExecutorOffer]) -> str:
    """The first line of a refusal: what was asked, of how many TaskExecutors, and hints."""
    asking = [s for s in request.subtasks if s.profile]
    total = sum(o.total_slots for o in offers)
    where = f"any of {len(offers)} TaskExecutor(s) ({total} slots in all)"
    if not asking:
        names = ", ".join(s.description for s in request.subtasks)
        return (
            f"no free slot for {names} on {where}; raise taskmanager.numberOfTaskSlots or the "
            "number of TaskExecutors (local.number-taskmanager; ray.number-taskmanager on Ray), "
            "or lower the parallelism:"
        )
    asks = "; ".join(
        f"{s.description} asking for "
        + ", ".join(f"{k}: {s.profile.describe(k)}" for k in s.profile)
        for s in asking
    )
    hints = [*missing_resource_hints(asking, offers), *memory_hints(asking, offers)]
    return f"cannot place {asks} on {where}{''.join(f'; {h}' for h in hints)}:"


def memory_hints(subtasks: Sequence[SubtaskRequest], offers: Sequence[TaskExecutorOffer]) -> list[str]:
    """One hint per resource whose memory request is larger than every device of it (naming
    the largest), or whose devices report no memory size at all.

    >>> from accelflow.scheduling import ResourceProfile
    >>> gib = 2**30
    >>> offers = [TaskExecutorOffer("taskexecutor-1", 1, 1, {"gpu": {"0": Fraction(1)}},
    ...                             {"gpu": {"0": (24 * gib, 24 * gib)}})]
    >>> ask = ResourceProfile({"gpu": Fraction(0)}, {"gpu": 100 * gib})
    >>> memory_hints([SubtaskRequest("a", "map (1/1)", ask)], offers)
    ['no gpu has 100 GiB of memory: the largest is taskexecutor-1: gpu 0 with 24 GiB']
    """
    wanted: dict[str, int] = {}
    for subtask in subtasks:
        for resource, size in subtask.profile.memory.items():
            wanted[resource] = max(wanted.get(resource, 0), size)
    hints = []
    for resource, size in wanted.items():
        sizes = [(total, natural_key(o.id), natural_key(a), f"{o.id}: {resource} {a}")
                 for o in offers for a, (_, total) in o.memory.get(resource, {}).items()]
        has = any(o.devices.get(resource) for o in offers)
        if not sizes and has:
            hints.append(
                f"no {resource} reports its memory size (the '{MEMORY_PROPERTY}' property of its "
                f"infos), so a memory request cannot be placed on one; ask for a share instead"
            )
        elif sizes and size > (top := max(s[0] for s in sizes)):
            name = min((s for s in sizes if s[0] == top), key=lambda s: (s[1], s[2]))[3]
            hints.append(
                f"no {resource} has {format_bytes(size)} of memory: the largest is {name} "
                f"with {format_bytes(top)}"
            )
    return hints


def missing_resource_hints(
    subtasks: Sequence[SubtaskRequest], offers: Sequence[TaskExecutorOffer]
) -> list[str]:
    """One hint per requested resource that no TaskExecutor has at all: a close name that
    some TaskExecutor has, or the keys that configure the resource.

    >>> from accelflow.scheduling import ONE
    >>> offers = [TaskExecutorOffer("taskexecutor-1", 1, 1)]
    >>> print(missing_resource_hints([SubtaskRequest("a", "map (1/1)", {"gpu": ONE})], offers)[0])
    no TaskExecutor has a gpu: configure it with 'external-resources: gpu', \
'external-resource.gpu.amount: 1' and 'external-resource.gpu.driver-factory.class: gpu' \
(see docs/configuration.md), or check that discovery found its devices
    """
    offered = sorted({r for o in offers for r, devices in o.devices.items() if devices})
    wanted: dict[str, Fraction] = {}
    for subtask in subtasks:
        for resource, amount in subtask.profile.items():
            wanted[resource] = max(wanted.get(resource, Fraction(0)), amount)
    hints = []
    for resource, amount in wanted.items():
        if resource in offered:
            continue
        close = difflib.get_close_matches(resource, offered, n=1, cutoff=0.6)
        if close:
            hints.append(f"no TaskExecutor has a {resource}; did you mean {close[0]!r}?")
            continue
        factory = "gpu" if resource == "gpu" else "<driver factory>"
        hints.append(
            f"no TaskExecutor has a {resource}: configure it with 'external-resources: {resource}', "
            f"'external-resource.{resource}.amount: {max(1, math.ceil(amount))}' and "
            f"'external-resource.{resource}.driver-factory.class: {factory}' "
            "(see docs/configuration.md), or check that discovery found its devices"
        )
    return hints
