"""Whether this host has a real NVIDIA GPU, for tests marked ``gpu``.

Such tests carry ``@pytest.mark.gpu`` (registered in ``pyproject.toml``) and skip themselves
where :func:`has_real_gpu` is false::

    pytestmark = [pytest.mark.gpu, pytest.mark.skipif(not has_real_gpu(), reason=NO_GPU)]
"""

from __future__ import annotations

import functools
import os
import shutil
import subprocess

from accelflow.testing._nvidia_smi import STATE_FILE_NAME

NO_GPU = "needs a real NVIDIA GPU (nvidia-smi -L lists none here)"
_TIMEOUT_S = 30.0


@functools.cache
def has_real_gpu() -> bool:
    """Whether the real ``nvidia-smi`` on ``PATH`` (not a fake from :mod:`accelflow.testing`)
    lists at least one GPU. Asked once per process."""
    executable = shutil.which("nvidia-smi")
    if executable is None:
        return False
    if os.path.exists(os.path.join(os.path.dirname(executable), STATE_FILE_NAME)):
        return False  # the fake nvidia-smi of accelflow.testing
    try:
        done = subprocess.run(
            [executable, "-L"], capture_output=True, text=True, timeout=_TIMEOUT_S, check=False
        )
    except (OSError, subprocess.TimeoutExpired):
        return False
    return done.returncode == 0 and any(
        line.startswith("GPU ") for line in done.stdout.splitlines()
    )
