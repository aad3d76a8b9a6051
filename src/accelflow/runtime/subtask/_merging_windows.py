"""Flink's ``MergingWindowSet``: the in-flight windows of one key of a merging assigner
(sessions), each mapped to the *state window*, the namespace its contents are kept under.
When windows merge, the result takes one of their state windows and the others' state is
merged into it, so merging never moves more state than needed.

The mapping lives in keyed map state (``merging-window-set``), so it is checkpointed and
rescaled with its key.

Example:
    >>> from accelflow.dataflow.eventtime import EventTimeSessionWindows, TimeWindow
    >>> merges = []
    >>> windows = MergingWindowSet(EventTimeSessionWindows.with_gap(3), {})
    >>> windows.add_window(TimeWindow(0, 3), lambda *a: merges.append(a))
    TimeWindow(start=0, end=3)
    >>> windows.add_window(TimeWindow(2, 5), lambda *a: merges.append(a))
    TimeWindow(start=0, end=5)
    >>> windows.get_state_window(TimeWindow(0, 5)), merges
    (TimeWindow(start=0, end=3), [(TimeWindow(start=0, end=5), [TimeWindow(start=0, end=3)], TimeWindow(start=0, end=3), [])])
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from accelflow._errors import AccelflowInternalError

#: ``merge(merge_result, merged_windows, state_window_result, merged_state_windows)``
MergeFunction = Callable[[Any, list[Any], Any, list[Any]], None]


class MergingWindowSet:
    """The window -> state window mapping of the current key (a copy of ``initial``)."""

    def __init__(self, assigner: Any, initial: dict[Any, Any]) -> None:
        self.assigner = assigner
        self.mapping = dict(initial)
        self.initial = dict(initial)

    def changed(self) -> bool:
        """Whether the mapping differs from what it was read from (then persist it)."""
        return self.mapping != self.initial

    def get_state_window(self, window: Any) -> Any:
        return self.mapping.get(window)

    def retire_window(self, window: Any) -> None:
        if window not in self.mapping:
            raise AccelflowInternalError(f"window {window} is not in the in-flight window set")
        del self.mapping[window]

    def add_window(self, new_window: Any, merge: MergeFunction) -> Any:
        """Adds ``new_window``, merging it with the windows it overlaps; returns the window it
        ended up in (itself or a merge result). ``merge`` is called for every merge that
        touches windows that had state."""
        results: list[tuple[Any, list[Any]]] = []
        self.assigner.merge_windows(list(self.mapping) + [new_window],
                                    lambda merged, result: results.append((result, list(merged))))
        result_window, merged_new = new_window, False
        for merge_result, merged in results:
            if new_window in merged:
                merged_new = True
                merged.remove(new_window)
                result_window = merge_result
            # the state window of the result: that of the first merged window (Flink: any)
            state_window = self.mapping[merged[0]]
            merged_state = [self.mapping.pop(w) for w in merged if w in self.mapping]
            self.mapping[merge_result] = state_window
            merged_state.remove(state_window)
            # merging one existing window into itself, unchanged, is no merge
            if not (len(merged) == 1 and merged[0] == merge_result):
                merge(merge_result, merged, state_window, merged_state)
        if not results or (result_window == new_window and not merged_new):
            self.mapping[result_window] = result_window
        return result_window


__all__ = ["MergeFunction", "MergingWindowSet"]
