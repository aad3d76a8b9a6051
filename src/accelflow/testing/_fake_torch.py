"""Putting :mod:`accelflow.testing.fake_torch` where ``import torch`` finds it: in this process
(:func:`use_fake_torch`, undone when the test ends) and in processes started with a given
environment, such as a cluster's TaskExecutors and their subtasks (:func:`install_fake_torch`).

Example (in a pytest test, with its ``monkeypatch`` and ``tmp_path``):
    >>> env = dict(os.environ)
    >>> shim = install_fake_torch(tmp_path, environ=env)   # a child started with env imports the fake
    >>> env["PYTHONPATH"].split(os.pathsep)[0] == str(shim)
    True
"""

from __future__ import annotations

import os
import sys
from collections.abc import MutableMapping
from pathlib import Path
from typing import Any, Protocol

from accelflow.testing import fake_torch

SHIM_FOLDER = "torch-shim"
_SHIM = (
    '"""torch: the fake of accelflow.testing (written by install_fake_torch)."""\n'
    "import sys\n"
    "import accelflow.testing.fake_torch as _fake\n"
    "sys.modules['torch'] = _fake\n"
    "sys.modules['torch.cuda'] = _fake.cuda\n"
)


def install_fake_torch(directory: str | os.PathLike[str], *, environ: MutableMapping[str, str] | None = None) -> Path:
    """Write a ``torch`` package that is the fake into ``directory/torch-shim``; returns that
    folder. With ``environ`` (a copy of ``os.environ`` for a child process), the folder goes
    first on its ``PYTHONPATH``. The fake's GPUs are the fake ``nvidia-smi``'s on ``PATH``."""
    folder = Path(directory) / SHIM_FOLDER
    (folder / "torch").mkdir(parents=True, exist_ok=True)
    (folder / "torch" / "__init__.py").write_text(_SHIM)
    if environ is not None:
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(folder), environ.get("PYTHONPATH", "")) if p)
    return folder


class TorchPatcher(Protocol):
    """What :func:`use_fake_torch` needs of pytest's ``monkeypatch``."""

    def setenv(self, name: str, value: str, prepend: str | None = None) -> None: ...

    def setitem(self, mapping: Any, name: str, value: Any) -> None: ...

    def setattr(self, target: Any, name: str, value: Any) -> None: ...

    def syspath_prepend(self, path: str) -> None: ...


def use_fake_torch(monkeypatch: TorchPatcher, directory: str | os.PathLike[str]) -> Path:
    """Make the fake the ``torch`` of this process (with fresh devices) and of the processes it
    starts (``PYTHONPATH``) until the test ends; returns the shim folder."""
    folder = install_fake_torch(directory)
    monkeypatch.setenv("PYTHONPATH", str(folder), prepend=os.pathsep)
    monkeypatch.syspath_prepend(str(folder))
    monkeypatch.setitem(sys.modules, "torch", fake_torch)
    monkeypatch.setitem(sys.modules, "torch.cuda", fake_torch.cuda)
    monkeypatch.setattr(fake_torch.cuda, "_devices", None)
    return folder
