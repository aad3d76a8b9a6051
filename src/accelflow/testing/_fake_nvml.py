"""Putting :mod:`accelflow.testing.fake_pynvml` where ``import pynvml`` finds it, and injecting
NVML events into it (from any process), as DCGM's ``dcgmi test --inject`` does for real GPUs.

Example (in a pytest test, with its ``monkeypatch`` and ``tmp_path``):
    >>> _ = use_fake_nvml(monkeypatch, tmp_path, 2)   # this process's pynvml is the fake
    >>> import pynvml
    >>> pynvml.nvmlInit()
    >>> events = pynvml.nvmlEventSetCreate()
    >>> gpu = pynvml.nvmlDeviceGetHandleByIndex(1)
    >>> pynvml.nvmlDeviceRegisterEvents(gpu, pynvml.nvmlEventTypeXidCriticalError, events)
    >>> inject_nvml_event(tmp_path, pynvml.nvmlDeviceGetUUID(gpu), xid=48)
    >>> pynvml.nvmlEventSetWait_v2(events, 1000).eventData
    48
    >>> pynvml.nvmlShutdown()
    >>> env = dict(os.environ)
    >>> shim = install_fake_nvml(tmp_path / "child", 2, environ=env)   # a child started with env
    >>> env["PYTHONPATH"].split(os.pathsep)[0] == str(shim)
    True
"""

from __future__ import annotations

import json
import os
import sys
import time
from collections.abc import MutableMapping, Sequence
from pathlib import Path
from typing import Any

from accelflow.resources.gpu import GPU_DISCOVERY_ENV_VAR
from accelflow.testing import fake_pynvml
from accelflow.testing._nvidia_smi import (
    EnvPatcher,
    FakeComputeApp,
    FakeGPU,
    install_fake_nvidia_smi,
    use_fake_nvidia_smi,
)

SHIM_FOLDER = "nvml"
_SHIM = (
    '"""pynvml: the fake of accelflow.testing (written by install_fake_nvml)."""\n'
    "import sys\n"
    "import accelflow.testing.fake_pynvml as _fake\n"
    "sys.modules[__name__] = _fake\n"
)
_DOUBLE_BIT_ECC = fake_pynvml.nvmlEventTypeDoubleBitEccError
_XID = fake_pynvml.nvmlEventTypeXidCriticalError


def install_fake_nvml(
    directory: str | os.PathLike[str],
    gpus: int | Sequence[FakeGPU],
    *,
    compute_apps: Sequence[FakeComputeApp] = (),
    environ: MutableMapping[str, str] | None = None,
) -> Path:
    """Write the fake GPUs (and the fake ``nvidia-smi``) into ``directory`` and a ``pynvml``
    module that is the fake into ``directory/nvml``; returns that folder.

    With ``environ`` (a copy of ``os.environ`` for a child process), it is updated so that the
    child imports the fake as ``pynvml`` (the folder first on ``PYTHONPATH``), reads these GPUs
    (``ACCELFLOW_FAKE_NVML``) and discovers through NVML (``ACCELFLOW_GPU_DISCOVERY=nvml``);
    ``nvidia-smi`` on its ``PATH`` is the fake too.
    """
    folder = Path(directory)
    install_fake_nvidia_smi(folder, gpus, compute_apps=compute_apps, environ=environ)
    shim = folder / SHIM_FOLDER
    shim.mkdir(exist_ok=True)
    (shim / "pynvml.py").write_text(_SHIM)
    if environ is not None:
        path = environ.get("PYTHONPATH", "")
        environ["PYTHONPATH"] = os.pathsep.join(p for p in (str(shim), path) if p)
        environ[fake_pynvml.STATE_ENV_VAR] = str(folder)
        environ[GPU_DISCOVERY_ENV_VAR] = "nvml"
    return shim


class ModulePatcher(EnvPatcher):
    """What :func:`use_fake_nvml` needs of pytest's ``monkeypatch``."""

    def setitem(self, mapping: Any, name: str, value: Any) -> None: ...


def use_fake_nvml(
    monkeypatch: ModulePatcher,
    directory: str | os.PathLike[str],
    gpus: int | Sequence[FakeGPU],
    *,
    compute_apps: Sequence[FakeComputeApp] = (),
) -> Path:
    """Make the fake this process's ``pynvml`` (and ``nvidia-smi``), over ``gpus``, until the
    test ends; returns the fake ``nvidia-smi``."""
    executable = use_fake_nvidia_smi(monkeypatch, directory, gpus)
    if compute_apps:
        install_fake_nvidia_smi(directory, gpus, compute_apps=compute_apps)
    monkeypatch.setitem(sys.modules, "pynvml", fake_pynvml)
    monkeypatch.setenv(fake_pynvml.STATE_ENV_VAR, str(directory))
    monkeypatch.setenv(GPU_DISCOVERY_ENV_VAR, "nvml")
    return executable


def inject_nvml_event(
    directory: str | os.PathLike[str], uuid: str, *, xid: int | None = None, double_bit_ecc: bool = False
) -> None:
    """Make the fake NVML report an Xid (``xid=79``) or a double-bit ECC error of GPU ``uuid``
    to every event set registered for it (in any process using ``directory``)."""
    if (xid is None) == (not double_bit_ecc):
        raise ValueError("inject either an xid or a double-bit ECC error")
    event = {"uuid": uuid, "type": _XID if xid is not None else _DOUBLE_BIT_ECC,
             "data": xid or 0, "at": time.time()}
    with open(Path(directory) / fake_pynvml.EVENTS_FILE_NAME, "a") as f:
        f.write(json.dumps(event) + "\n")
