"""The GPU driver: discovers the TaskExecutor's GPUs by script or in process.

Two modes, picked by ``param.discovery-script.path`` (and a third on Ray: inside a
TaskExecutor actor the driver reports the GPUs Ray assigned, see :mod:`._ray`):

* **script**: run the script (Flink's contract, :mod:`._script`) with this process named in
  ``$ACCELFLOW_GPU_OWNER`` (so ``accelflow-gpu-discovery`` behind a wrapper script records the
  TaskExecutor, not the wrapper, as the owner), then add what NVML or ``nvidia-smi`` knows
  about the returned indexes (UUID, name, memory, PCI bus id). When they list GPUs, an index
  they do not list is a :class:`DiscoveryError`; when they are missing or fail, the indexes
  are taken as they are.
* **in process** (no script): NVML, else ``nvidia-smi``, restricted by
  ``CUDA_VISIBLE_DEVICES``; with ``param.coordination`` (default true) the GPUs are taken
  through the host coordination file, so TaskExecutors on one host never share a GPU.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Collection, Mapping

from accelflow._errors import DiscoveryError
from accelflow.resources import DeviceWatch, ExternalResourceDriver, ExternalResourceInfo
from accelflow.resources.gpu import _discovery, _script
from accelflow.resources.gpu._cli_args import (
    COMMAND_NAME,
    coordination_file_of,
    parse_flags,
)
from accelflow.resources.coordination import DEFAULT_LOCK_TIMEOUT_S, Owner
from accelflow.resources.gpu._coordination import OWNER_ENV_VAR, CoordinationFile
from accelflow.resources.gpu._device import GPUDevice
from accelflow.resources.gpu._params import GPUDriverConfig, ScriptConfig
from accelflow.resources.gpu._ray import ray_assigned_ids
from accelflow.resources.gpu._visible import (
    CUDA_DEVICE_ORDER_ENV_VAR,
    CUDA_VISIBLE_DEVICES_ENV_VAR,
)

log = logging.getLogger("accelflow.resources.gpu")


class GPUDriver(ExternalResourceDriver):
    """Discovers NVIDIA GPUs (or any GPUs, through a script) for one TaskExecutor.

    Build it with :class:`GPUDriverFactory`, which checks the parameters.

    Example:
        >>> driver = GPUDriver(GPUDriverConfig(coordination=False))
        >>> infos = driver.retrieve_resource_info(2)
        >>> sorted(i.get_property("index") for i in infos)
        ['0', '1']
        >>> driver.isolation_env(infos)
        {'CUDA_VISIBLE_DEVICES': 'GPU-...,GPU-...', 'CUDA_DEVICE_ORDER': 'PCI_BUS_ID'}

    Args:
        config: the checked parameters.
    """

    def __init__(self, config: GPUDriverConfig | None = None) -> None:
        self.config = config or GPUDriverConfig()
        self._ledger: CoordinationFile | None = None
        self._owner: Owner | None = None
        self._held: list[GPUDevice] = []
        self._closed = False

    def __repr__(self) -> str:
        return f"GPUDriver({self.config!r})"

    def retrieve_resource_info(self, amount: int) -> frozenset[ExternalResourceInfo]:
        """Discover ``amount`` GPUs; returns exactly ``amount`` infos.

        Raises:
            ValueError: ``amount`` is not a positive integer.
            DiscoveryError: too few GPUs, the script failed, or no discovery source works.
            CoordinationError: the coordination file is unusable.
        """
        if isinstance(amount, bool) or not isinstance(amount, int) or amount < 1:
            raise ValueError(f"the GPU amount must be a positive integer, got {amount!r}")
        if self._closed:
            raise RuntimeError("this GPUDriver is closed")
        ray_ids = ray_assigned_ids(os.environ, amount)
        if ray_ids is not None:  # inside a Ray actor: Ray already chose (no coordination)
            return frozenset(d.to_info() for d in _enrich(ray_ids))
        script = self.config.script
        devices = self._run_script(script, amount) if script else self._in_process(amount)
        return frozenset(d.to_info() for d in devices)

    def isolation_env(self, infos: Collection[ExternalResourceInfo]) -> Mapping[str, str]:
        """``CUDA_VISIBLE_DEVICES`` (UUIDs when every device has one, else indexes) and
        ``CUDA_DEVICE_ORDER=PCI_BUS_ID`` so CUDA numbers devices like ``nvidia-smi``."""
        ordered = sorted(infos)
        uuids = [i.get_property("uuid") for i in ordered]
        if ordered and all(uuids):
            visible = ",".join(str(u) for u in uuids)
        else:
            visible = ",".join(i["index"] for i in ordered)
        return {CUDA_VISIBLE_DEVICES_ENV_VAR: visible, CUDA_DEVICE_ORDER_ENV_VAR: "PCI_BUS_ID"}

    def release(self, infos: Collection[ExternalResourceInfo]) -> None:
        """Drop this process's coordination records of ``infos`` (no-op without coordination)."""
        wanted = set(infos)
        self._release([d for d in self._held if d.to_info() in wanted])

    def device_watch(self, infos: Collection[ExternalResourceInfo]) -> DeviceWatch | None:
        """NVML's fault events and probes, else ``nvidia-smi``'s probes (see
        :mod:`._device_watch`); ``None`` when neither is there."""
        from accelflow.resources.gpu._device_watch import GPUWatch

        return GPUWatch.open(infos)

    def close(self) -> None:
        """Release every GPU this driver still holds in the coordination file."""
        if not self._closed:
            self._release(list(self._held))
            self._closed = True

    # -- modes ---------------------------------------------------------------------------

    def _in_process(self, amount: int) -> list[GPUDevice]:
        universe = _discovery.discover_gpus()
        if not self.config.coordination:
            if len(universe) < amount:
                raise DiscoveryError(_too_few(universe, amount))
            return universe[:amount]
        ledger = CoordinationFile(
            self.config.coordination_file, lock_timeout=self.config.lock_timeout
        )
        return self._allocate(ledger, universe, amount)

    def _run_script(self, script: ScriptConfig, amount: int) -> list[GPUDevice]:
        me = Owner.of_process()
        environ = {**os.environ, OWNER_ENV_VAR: me.to_env()}
        indexes = _script.run_discovery_script(
            script.path, amount, script.args, script.timeout, environ=environ
        )
        devices = _enrich(indexes, check_source=str(script.path))
        ledger = _our_command_ledger(script)
        if ledger is not None:
            # accelflow-gpu-discovery recorded these GPUs for this process (its parent):
            # remember them so release() gives them back eagerly
            self._ledger, self._owner = ledger, me
            self._held.extend(devices)
        return devices

    def _allocate(
        self, ledger: CoordinationFile, universe: list[GPUDevice], amount: int
    ) -> list[GPUDevice]:
        owner = Owner.of_process()
        taken = ledger.allocate(universe, amount, owner)
        self._ledger, self._owner = ledger, owner
        self._held.extend(taken)
        return taken

    def _release(self, devices: list[GPUDevice]) -> None:
        if not devices or self._ledger is None or self._owner is None:
            return
        if self._owner.pid != os.getpid():
            return  # a forked child: the parent process owns these records
        released = self._ledger.release(devices, self._owner)
        self._held = [d for d in self._held if d not in devices]
        log.debug("released %s from %s", [r.device_id for r in released], self._ledger.path)


def _enrich(indexes: list[str], *, check_source: str | None = None) -> list[GPUDevice]:
    """The devices of ``indexes``, described by NVML/``nvidia-smi`` where they know them.

    Raises:
        DiscoveryError: ``check_source`` is given, NVML or ``nvidia-smi`` list GPUs, and an
            index is none of them (nor the GPU of listed MIG units).
    """
    host: list[GPUDevice] = []
    try:
        host = _discovery.list_host_gpus()
    except (DiscoveryError, OSError) as exc:
        log.debug("cannot add GPU properties to the script's indexes: %s", exc)
    known = {d.index: d for d in host}
    listed = set(known) | {d.parent_index for d in host if d.parent_index is not None}
    unknown = [i for i in indexes if i not in listed]
    if check_source is not None and host and unknown:
        raise DiscoveryError(
            f"discovery script {check_source} printed GPU index(es) "
            f"{_script.brief(unknown)} that this host does not have: NVML/nvidia-smi list "
            f"{_script.brief(sorted(listed, key=_index_order))}. Fix the script (or, for "
            "GPUs of another vendor, run it where no NVIDIA GPU is listed)"
        )
    return [known.get(i, GPUDevice(index=i)) for i in indexes]


def _index_order(index: str) -> tuple[int, ...]:
    return tuple(int(part) for part in index.split(":"))


def _our_command_ledger(script: ScriptConfig) -> CoordinationFile | None:
    """The coordination file ``accelflow-gpu-discovery`` used, with its ``--lock-timeout``."""
    if script.path.name != COMMAND_NAME:
        return None
    path = coordination_file_of(script.args)
    if path is None:
        return None
    try:
        lock_timeout = parse_flags(script.args).lock_timeout or DEFAULT_LOCK_TIMEOUT_S
    except ValueError:
        lock_timeout = DEFAULT_LOCK_TIMEOUT_S
    return CoordinationFile(path, lock_timeout=lock_timeout)


def _too_few(universe: list[GPUDevice], amount: int) -> str:
    visible = os.environ.get(CUDA_VISIBLE_DEVICES_ENV_VAR)
    where = f" ({CUDA_VISIBLE_DEVICES_ENV_VAR}={visible!r})" if visible is not None else ""
    found = ", ".join(d.index for d in universe) or "none"
    return f"need {amount} GPU(s) but this TaskExecutor sees {len(universe)}{where}: {found}"
