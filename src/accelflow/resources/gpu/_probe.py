"""Probing NVIDIA GPUs (reachable, pages or rows pending retirement, temperature) and listing
the processes computing on them, through ``nvidia-smi`` or NVML.

Both sources give :class:`~accelflow.resources.ProbeResult` values keyed by device address
(a MIG unit is probed through its GPU) and :class:`~accelflow.resources.ComputeProcess` values.
Parsing is lenient: a value the tool does not give (``[N/A]``, ``[Not Supported]``, a query
the driver refuses) is *unknown* (``None``), which the health state machine counts neither as
good nor as bad; a GPU the tool does not list, or that NVML reports lost, is unreachable.

``nvidia-smi`` calls (argv lists, with a timeout):

* ``--query-gpu=index,uuid,temperature.gpu,retired_pages.pending --format=csv,noheader,nounits``
* ``--query-remapped-rows=gpu_uuid,remapped_rows.pending --format=csv,noheader,nounits``
  (Ampere and newer; best effort)
* ``--query-compute-apps=pid,used_memory,gpu_uuid --format=csv,noheader,nounits``
"""

from __future__ import annotations

import csv
import subprocess
from collections.abc import Iterable, Sequence
from types import ModuleType
from typing import Any

from accelflow._errors import DiscoveryError
from accelflow.resources import ComputeProcess, ProbeResult
from accelflow.resources.gpu._device import GPUDevice, normalize_index

PROBE_ARGS = ("--query-gpu=index,uuid,temperature.gpu,retired_pages.pending", "--format=csv,noheader,nounits")
ROWS_ARGS = ("--query-remapped-rows=gpu_uuid,remapped_rows.pending", "--format=csv,noheader,nounits")
APPS_ARGS = ("--query-compute-apps=pid,used_memory,gpu_uuid", "--format=csv,noheader,nounits")
DEFAULT_TIMEOUT_S = 10.0
_UNKNOWN = {"", "[n/a]", "n/a", "[not supported]", "[unknown error]", "[gpu requires reset]", "[insufficient permissions]"}
_YES = {"yes", "true", "enabled", "pending"}
_NO = {"no", "false", "disabled", "0"}
_MIB = 1 << 20


# -- nvidia-smi ---------------------------------------------------------------------------------
def smi_probe(executable: str, devices: Sequence[GPUDevice], timeout: float = DEFAULT_TIMEOUT_S) -> dict[str, ProbeResult]:
    """Probe ``devices`` with one ``nvidia-smi`` query (plus one for remapped rows).

    A GPU without a row is unreachable (the tool's complaints are its detail); when
    ``nvidia-smi`` cannot run or times out, every device is unknown.
    """
    ran = _run(executable, PROBE_ARGS, timeout)
    if isinstance(ran, str):
        return {d.index: ProbeResult(detail=ran) for d in devices}
    code, out, err = ran
    rows, noise = _rows(out, 4)
    by_key: dict[str, ProbeResult] = {}
    for row_index, row_uuid, temperature, retired in rows:
        result = ProbeResult(True, _flag(retired), None, _number(temperature))
        by_key[row_uuid] = by_key[normalize_index(row_index) or row_index] = result
    pending = _remapped(executable, timeout) if rows else {}
    said = " ".join([*noise, err.strip()]).strip()
    complaint = f"nvidia-smi does not list it (exit code {code}{': ' + said if said else ''})"
    found = {}
    for device in devices:
        uuid, index = _physical(device)
        row = by_key.get(uuid or "") or by_key.get(index)
        found[device.index] = (ProbeResult(False, detail=complaint[:500]) if row is None else
                               ProbeResult(True, row.retired_pages_pending, pending.get(uuid or ""), row.temperature))
    return found


def smi_compute_processes(executable: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[ComputeProcess]:
    """Every process computing on a GPU, as ``nvidia-smi --query-compute-apps`` lists them.

    Raises:
        DiscoveryError: ``nvidia-smi`` cannot run, times out, or fails listing none.
    """
    ran = _run(executable, APPS_ARGS, timeout)
    if isinstance(ran, str):
        raise DiscoveryError(f"cannot list the GPUs' compute processes: {ran}")
    code, out, err = ran
    rows, noise = _rows(out, 3)
    if code != 0 and not rows:
        detail = (err.strip() or " ".join(noise) or "no output")[-500:]
        raise DiscoveryError(f"{executable} {APPS_ARGS[0]} failed with exit code {code}: {detail}")
    processes = []
    for pid, used, uuid in rows:
        if pid.isdigit():
            mib = _number(used)
            processes.append(ComputeProcess(int(pid), uuid, None if mib is None else int(mib) * _MIB))
    return processes


def _remapped(executable: str, timeout: float) -> dict[str, bool | None]:
    ran = _run(executable, ROWS_ARGS, timeout)
    if isinstance(ran, str):
        return {}
    rows, _ = _rows(ran[1], 2)
    return {uuid: _flag(pending) for uuid, pending in rows}


def _run(executable: str, args: tuple[str, ...], timeout: float) -> tuple[int, str, str] | str:
    """``(exit code, stdout, stderr)``, or why it did not run."""
    try:
        done = subprocess.run([executable, *args], capture_output=True, text=True, errors="replace",
                              timeout=timeout, stdin=subprocess.DEVNULL, check=False)
    except subprocess.TimeoutExpired:
        return f"{executable} did not answer within {timeout:g} s"
    except OSError as exc:
        return f"cannot run {executable}: {exc}"
    return done.returncode, done.stdout, done.stderr


def _rows(output: str, width: int) -> tuple[list[list[str]], list[str]]:
    """CSV rows of ``width`` fields, and the other non-empty lines (the tool's complaints)."""
    rows, noise = [], []
    for line in output.splitlines():
        fields = next(csv.reader([line], skipinitialspace=True), [])
        if len(fields) == width:
            rows.append([f.strip() for f in fields])
        elif line.strip():
            noise.append(line.strip())
    return rows, noise


def _flag(text: str) -> bool | None:
    value = text.strip().lower()
    if value in _YES:
        return True
    if value in _NO:
        return False
    return int(value) > 0 if value.isdigit() else None


def _number(text: str) -> float | None:
    value = text.strip().removesuffix("MiB").removesuffix("C").strip()
    if value.lower() in _UNKNOWN:
        return None
    try:
        return float(value)
    except ValueError:
        return None


def _physical(device: GPUDevice) -> tuple[str | None, str]:
    """The UUID and index of the GPU ``device`` is (or is a MIG unit of)."""
    if device.is_mig:
        return device.parent_uuid, device.parent_index or device.index
    return device.uuid, device.index


# -- NVML -------------------------------------------------------------------------------------
def nvml_probe(nvml: ModuleType, devices: Sequence[GPUDevice]) -> dict[str, ProbeResult]:
    """Probe ``devices`` through an initialised NVML (``nvmlDeviceGetTemperature``,
    ``nvmlDeviceGetRetiredPagesPendingStatus``, ``nvmlDeviceGetRemappedRows``). A GPU NVML
    cannot find or reports lost is unreachable."""
    found = {}
    for device in devices:
        try:
            handle = _handle(nvml, device)
            temperature = _optional(nvml, nvml.nvmlDeviceGetTemperature, handle, nvml.NVML_TEMPERATURE_GPU)
            retired = _optional(nvml, nvml.nvmlDeviceGetRetiredPagesPendingStatus, handle)
            rows = _optional(nvml, nvml.nvmlDeviceGetRemappedRows, handle)
        except nvml.NVMLError as exc:
            found[device.index] = ProbeResult(False, detail=f"NVML: {exc}")
            continue
        found[device.index] = ProbeResult(
            True,
            None if retired is None else retired == nvml.NVML_FEATURE_ENABLED,
            None if rows is None else bool(rows[2]),
            None if temperature is None else float(temperature),
        )
    return found


def nvml_compute_processes(nvml: ModuleType, devices: Iterable[GPUDevice]) -> list[ComputeProcess]:
    """The processes computing on ``devices``' GPUs (``nvmlDeviceGetComputeRunningProcesses``).

    Raises:
        DiscoveryError: NVML failed to list them.
    """
    processes = []
    seen: set[str] = set()
    for device in devices:
        uuid, _ = _physical(device)
        if uuid is None or uuid in seen:
            continue
        seen.add(uuid)
        try:
            running = nvml.nvmlDeviceGetComputeRunningProcesses(_handle(nvml, device))
        except nvml.NVMLError as exc:
            raise DiscoveryError(f"NVML cannot list the processes on GPU {uuid}: {exc}") from exc
        processes += [ComputeProcess(int(p.pid), uuid, p.usedGpuMemory) for p in running]
    return processes


def _handle(nvml: ModuleType, device: GPUDevice) -> Any:
    uuid, index = _physical(device)
    if uuid is not None:
        return nvml.nvmlDeviceGetHandleByUUID(uuid)
    return nvml.nvmlDeviceGetHandleByIndex(int(index))


def _optional(nvml: ModuleType, call: Any, *args: Any) -> Any:
    """``call(*args)``, or ``None`` when NVML does not say (not supported, no permission, an
    unknown error); a lost GPU raises."""
    try:
        return call(*args)
    except nvml.NVMLError as exc:
        if getattr(exc, "value", None) == nvml.NVML_ERROR_GPU_IS_LOST:
            raise
        return None
