"""Test helpers: an honest fake ``nvidia-smi`` and a static-list driver.

Example:
    >>> install_fake_nvidia_smi(tmp_path, 4)   # then put tmp_path first on PATH
"""

from accelflow.testing._static import StaticDriver, StaticDriverFactory

try:
    from accelflow.testing._nvidia_smi import FakeGPU, install_fake_nvidia_smi
except ImportError:  # pragma: no cover - written by the GPU plugin
    pass

__all__ = ["FakeGPU", "StaticDriver", "StaticDriverFactory", "install_fake_nvidia_smi"]
