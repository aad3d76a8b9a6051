"""In-process discovery of the host's NVIDIA GPUs: NVML first, ``nvidia-smi`` second.

The result is the TaskExecutor's universe: what NVML (or ``nvidia-smi``) lists, restricted by
``CUDA_VISIBLE_DEVICES`` (see :mod:`._visible`). Used by the default (no script) mode of the
driver and by the ``accelflow-gpu-discovery`` command.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Mapping

from accelflow._errors import DiscoveryError
from accelflow.resources.gpu import _nvml, _smi
from accelflow.resources.gpu._device import GPUDevice
from accelflow.resources.gpu._params import GPU_DISCOVERY_ENV_VAR, discovery_source
from accelflow.resources.gpu._visible import restrict_to_visible

log = logging.getLogger("accelflow.resources.gpu")


def discover_gpus(environ: Mapping[str, str] | None = None) -> list[GPUDevice]:
    """The GPUs (or MIG units) this process may use, in ``CUDA_VISIBLE_DEVICES`` order.

    Example:
        >>> [d.index for d in discover_gpus()]  # on a host with two GPUs
        ['0', '1']

    Raises:
        DiscoveryError: neither NVML nor ``nvidia-smi`` works, or the one found fails.
    """
    env = os.environ if environ is None else environ
    return restrict_to_visible(list_host_gpus(), env)


def list_host_gpus() -> list[GPUDevice]:
    """Every GPU of the host, from NVML when it loads, else from ``nvidia-smi``
    (``ACCELFLOW_GPU_DISCOVERY=nvml`` or ``nvidia-smi`` pins one, see :mod:`._params`)."""
    source = discovery_source()
    nvml_reason = f"{GPU_DISCOVERY_ENV_VAR}=nvidia-smi"
    try:
        if source != "nvidia-smi":
            with _nvml.open_nvml() as nvml:
                return _nvml.query_gpus(nvml)
    except _nvml.NvmlUnavailable as exc:
        if source == "nvml":
            raise DiscoveryError(f"{exc} (and {GPU_DISCOVERY_ENV_VAR}=nvml)") from exc
        nvml_reason = str(exc)
    smi = _smi.find_nvidia_smi()
    if smi is None:
        raise DiscoveryError(
            "cannot discover NVIDIA GPUs: NVML is not usable "
            f"({nvml_reason}) and nvidia-smi is not on PATH. Install the NVIDIA driver "
            "(it provides both), pip install 'accelflow[nvml]', or set "
            "external-resource.<name>.param.discovery-script.path to a discovery script"
        )
    log.debug("NVML not usable (%s); asking %s", nvml_reason, smi)
    return _smi.query_gpus(smi)
