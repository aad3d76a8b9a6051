"""The public surface of accelflow.io: sorted, complete, and shown as accelflow.io."""

from __future__ import annotations

import accelflow.io


def test_all_is_sorted_and_resolvable() -> None:
    names = accelflow.io.__all__
    assert list(names) == sorted(names, key=lambda n: (not n.isupper(), n))
    assert all(hasattr(accelflow.io, name) for name in names)


def test_public_callables_show_the_public_module() -> None:
    for name in ("IdxFile", "IdxHeader", "IdxPair", "FashionMnistFiles", "read_idx", "open_idx"):
        assert getattr(accelflow.io, name).__module__ == "accelflow.io"
