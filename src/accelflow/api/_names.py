"""Small helpers of the API: operator names and values shown in errors."""

from __future__ import annotations

from typing import Any

from accelflow.dataflow import Transformation


def shown(value: Any) -> str:
    """``value`` for an error message: its type and a short repr, e.g. ``int (42)``."""
    text = repr(value)
    return f"{type(value).__name__} ({text if len(text) <= 60 else text[:57] + '...'})"


def unique_name(name: str, transformations: list[Transformation], own: int | None = None) -> str:
    """``name``, or ``name-2``, ``name-3``... if another operator has it (names key the
    per-operator counts, and the state of operators without a uid)."""
    taken = {t.name for t in transformations if t.id != own}
    if name not in taken:
        return name
    return next(f"{name}-{i}" for i in range(2, len(taken) + 3) if f"{name}-{i}" not in taken)
