"""Test helpers: an honest fake ``nvidia-smi`` and a fake NVML (``fake_pynvml``, with event
injection), a static-list driver and an embedded Kafka broker (librdkafka's mock cluster,
needs ``accelflow[kafka]`` when used).

Example:
    >>> executable = use_fake_nvidia_smi(monkeypatch, tmp_path, 4)   # in a pytest test

A fake GPU environment also sets ``ACCELFLOW_GPU_DISCOVERY=nvidia-smi`` and unsets
``CUDA_VISIBLE_DEVICES``, so the fake wins on a host with real GPUs too.
"""

from accelflow.testing._static import StaticDriver, StaticDriverFactory
from accelflow.connectors.kafka import EmbeddedKafkaBroker

try:
    from accelflow.testing._nvidia_smi import (
        FakeComputeApp,
        FakeGPU,
        fake_gpu_uuid,
        fake_nvidia_smi_env,
        install_fake_nvidia_smi,
        use_fake_nvidia_smi,
    )
    from accelflow.testing._real_gpu import NO_GPU, has_real_gpu
    from accelflow.testing._fake_nvml import inject_nvml_event, install_fake_nvml, use_fake_nvml
except ImportError:  # pragma: no cover - written by the GPU plugin
    pass

__all__ = [
    "NO_GPU",
    "EmbeddedKafkaBroker",
    "FakeComputeApp",
    "FakeGPU",
    "StaticDriver",
    "StaticDriverFactory",
    "fake_gpu_uuid",
    "fake_nvidia_smi_env",
    "has_real_gpu",
    "inject_nvml_event",
    "install_fake_nvidia_smi",
    "install_fake_nvml",
    "use_fake_nvidia_smi",
    "use_fake_nvml",
]
