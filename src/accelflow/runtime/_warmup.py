"""A device framework made ready ahead of its first use, and its memory: shared by the warm
subtask processes, the device hosts and every subtask that holds a share of a device.

:func:`warm_device` imports torch or CuPy, creates the CUDA context on device 0 (under
``CUDA_VISIBLE_DEVICES`` isolation: the one device the process was started for) and loads
cuBLAS (and cuDNN for torch), the 1-4 s a fresh process pays before its first batch. Without a framework or a GPU it says why and the
process goes on (its imports are still done ahead).

:func:`device_memory` reads what the frameworks this process imported hold on the device
(torch's caching allocator, CuPy's memory pool); a subtask is bounded to its part of the
device's memory by ``runtime/subtask/_memory_limit.py``.

Example:
    >>> warm_device("none")
    ('none', 'no device framework (warm.framework: none)')
"""

from __future__ import annotations

import importlib
import importlib.util
import logging
import sys
from collections.abc import Callable, Sequence
from fractions import Fraction
from typing import Any

_log = logging.getLogger("accelflow.runtime")
FRAMEWORKS = ("torch", "cupy")


def resolve_framework(framework: str) -> str:
    """``auto``: torch where it is installed, else CuPy, else ``none`` (nothing is imported)."""
    if framework != "auto":
        return framework
    return next((f for f in FRAMEWORKS if importlib.util.find_spec(f) is not None), "none")


def warm_device(framework: str) -> tuple[str, str]:
    """Import ``framework`` (``torch``, ``cupy``, ``auto`` or ``none``), create its CUDA
    context on device 0 and load the libraries a model's first batch would (cuBLAS, and cuDNN
    for torch); what was used and a note for the log, e.g. ``('cupy', 'CUDA context on device
    0 (cupy 13.1), cuBLAS loaded')`` or ``('none', 'CUDA not initialised: torch: not
    installed')``."""
    used = resolve_framework(framework)
    if used == "none":
        why = "nothing to import" if framework == "none" else "neither torch nor cupy is installed"
        return used, f"no device framework (warm.framework: {framework}{'' if framework == 'none' else ': ' + why})"
    try:
        module = importlib.import_module(used)
        libraries = _torch_context(module) if used == "torch" else _cupy_context(module)
    except Exception as exc:  # no driver, a broken install: the process still serves
        return used, f"CUDA not initialised: {used}: {type(exc).__name__}: {exc}".splitlines()[0]
    version = getattr(module, "__version__", "?")
    return used, (f"CUDA context on device 0 ({used} {version}){libraries}" if libraries is not None
                  else f"CUDA not initialised: {used} {version} sees no CUDA device")


def _torch_context(torch: Any) -> str | None:
    if not torch.cuda.is_available():
        return None
    torch.cuda.init()
    torch.zeros(1, device="cuda")
    torch.cuda.synchronize()
    return _libraries(lambda: _torch_libraries(torch), "cuBLAS and cuDNN")


def _torch_libraries(torch: Any) -> None:
    """A first convolution and matrix product load cuDNN and cuBLAS and make their handles
    (0.2-1 s that a model's first batch pays otherwise); their memory is given back."""
    with torch.inference_mode():
        x = torch.ones(1, 1, 8, 8, device="cuda")
        torch.nn.functional.conv2d(x, torch.ones(1, 1, 3, 3, device="cuda"))
        torch.ones(8, 8, device="cuda") @ torch.ones(8, 8, device="cuda")
    torch.cuda.synchronize()
    clear = getattr(torch._C, "_cuda_clearCublasWorkspaces", None)  # held per stream otherwise
    if clear is not None:
        clear()
    torch.cuda.empty_cache()


def _cupy_context(cupy: Any) -> str | None:
    if int(cupy.cuda.runtime.getDeviceCount()) < 1:
        return None
    cupy.cuda.Device(0).use()
    cupy.zeros(1)
    return _libraries(lambda: cupy.ones((8, 8), dtype=cupy.float32) @ cupy.ones((8, 8), dtype=cupy.float32),
                      "cuBLAS")


def _libraries(load: Callable[[], object], names: str) -> str:
    """What loading the libraries a model's first batch uses left to say (they are a speed-up:
    a framework that cannot load them here still serves)."""
    try:
        load()
    except Exception as exc:
        return f"; {names} not loaded ahead: {type(exc).__name__}: {exc}".splitlines()[0]
    return f", {names} loaded"


def preload(modules: Sequence[str], key: str) -> None:
    """Import ``modules`` (``key``: the config key that named them, for the log); a module that
    fails to import is logged, and left for the subtask that needs it to fail on."""
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception as exc:
            _log.warning("%s: cannot import %r ahead: %s: %s", key, name, type(exc).__name__, exc)


def device_memory() -> int | None:
    """Bytes the device frameworks imported here hold on the device; None without one."""
    used = None
    torch = sys.modules.get("torch")
    if torch is not None and _torch_ready(torch):
        used = int(torch.cuda.memory_allocated())
    cupy = sys.modules.get("cupy")
    if cupy is not None:
        try:  # a CuPy without CUDA, or a stand-in, cannot say
            used = (used or 0) + int(cupy.get_default_memory_pool().used_bytes())
        except Exception as exc:
            _log.debug("CuPy's memory in use unknown: %s", exc)
    return used


def _torch_ready(torch: object) -> bool:
    cuda = getattr(torch, "cuda", None)
    try:
        return bool(cuda is not None and cuda.is_available())
    except Exception:
        return False


def is_out_of_memory(exc: BaseException) -> bool:
    """Whether ``exc`` (or what caused it) is a device framework's out-of-memory error
    (``torch.cuda.OutOfMemoryError``, ``cupy.cuda.memory.OutOfMemoryError``)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        seen.add(id(current))
        cls = type(current)
        if cls.__name__ == "OutOfMemoryError" and cls.__module__.split(".")[0] in FRAMEWORKS:
            return True
        current = current.__cause__ or current.__context__
    return False


def memory_text(n: int | None) -> str:
    """``41943040`` → ``'40 MiB'`` (:func:`accelflow.scheduling.format_bytes`); ``None`` →
    ``'an unknown amount'``."""
    from accelflow.scheduling import format_bytes

    return "an unknown amount" if n is None else format_bytes(n)


def share_for(used: int, total: int | None) -> str:
    """The smallest of 1/4, 1/2, 3/4 and 1 of ``total`` bytes that holds ``used``, as an
    amount to ask for (``'0.75'``)."""
    for share in ("0.25", "0.5", "0.75"):
        if total and used <= Fraction(share) * total:
            return share
    return "1"
