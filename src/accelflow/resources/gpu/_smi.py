"""Discovery through the ``nvidia-smi`` command (when NVML cannot be loaded).

Two calls, both with an argv list and a timeout:

* ``nvidia-smi --query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv,noheader,nounits``
  lists the physical GPUs;
* ``nvidia-smi -L`` lists the MIG units of GPUs that have MIG on (best effort: if it fails, the
  whole GPUs are reported and a warning is logged).
"""

from __future__ import annotations

import csv
import logging
import re
import shutil
import subprocess
from dataclasses import replace

from accelflow._errors import DiscoveryError
from accelflow.resources.gpu._device import GPUDevice, normalize_index

log = logging.getLogger("accelflow.resources.gpu")

NVIDIA_SMI = "nvidia-smi"
QUERY_FIELDS = ("index", "uuid", "name", "memory.total", "pci.bus_id")
QUERY_ARGS = (f"--query-gpu={','.join(QUERY_FIELDS)}", "--format=csv,noheader,nounits")
DEFAULT_TIMEOUT_S = 10.0
_NO_DEVICES_EXIT_CODE = 6  # nvidia-smi: "No devices were found"
_UNKNOWN = ("", "[N/A]", "N/A", "[Not Supported]", "[Unknown Error]")
_GPU_LINE = re.compile(r"GPU (\d+): (.*?) \(UUID: (GPU-[^)]+)\)")
_MIG_LINE = re.compile(r"\s+MIG (\S+)\s+Device\s+(\d+): \(UUID: (MIG-[^)]+)\)")
_MEMORY = re.compile(r"(\d+)(?:\s*MiB)?")


def find_nvidia_smi() -> str | None:
    """The path of ``nvidia-smi`` on ``PATH``, or ``None``."""
    return shutil.which(NVIDIA_SMI)


def query_gpus(executable: str, timeout: float = DEFAULT_TIMEOUT_S) -> list[GPUDevice]:
    """Every GPU ``nvidia-smi`` lists, with MIG units in place of GPUs that have MIG on.

    Raises:
        DiscoveryError: nvidia-smi fails, times out or prints something unparseable.
    """
    output = _run(executable, QUERY_ARGS, timeout)
    gpus = parse_query_output(output, executable=executable)
    if not gpus:
        return []
    try:
        listing = _run(executable, ("-L",), timeout)
    except DiscoveryError as exc:
        log.warning("cannot list MIG units, reporting whole GPUs: %s", exc)
        return gpus
    return expand_mig_units(gpus, listing)


def parse_query_output(output: str, *, executable: str = NVIDIA_SMI) -> list[GPUDevice]:
    """Parse ``--query-gpu=index,uuid,name,memory.total,pci.bus_id --format=csv,noheader``.

    Accepts values with or without units (``81920`` or ``81920 MiB``); ``[N/A]`` means unknown.

    Example:
        >>> parse_query_output("0, GPU-8f6c, NVIDIA H100, 81559, 00000000:17:00.0")[0].uuid
        'GPU-8f6c'
    """
    devices = []
    for row in csv.reader(output.splitlines(), skipinitialspace=True):
        if not row or not "".join(row).strip():
            continue
        if len(row) != len(QUERY_FIELDS):
            raise DiscoveryError(
                f"{executable} printed a line with {len(row)} fields where "
                f"{len(QUERY_FIELDS)} ({', '.join(QUERY_FIELDS)}) were asked for: "
                f"{', '.join(row)!r}"
            )
        devices.append(_parse_row([v.strip() for v in row], executable))
    return devices


def _parse_row(row: list[str], executable: str) -> GPUDevice:
    raw_index, uuid, name, memory, bus_id = (None if v in _UNKNOWN else v for v in row)
    index = normalize_index(raw_index) if raw_index is not None else None
    if index is None or ":" in index:
        raise DiscoveryError(
            f"{executable} printed a GPU index that is not a number of at most a few digits: "
            f"{', '.join(row)[:200]!r}"
        )
    memory_match = _MEMORY.fullmatch(memory) if memory else None
    return GPUDevice(
        index=index,
        uuid=uuid,
        name=name,
        memory_total_mib=int(memory_match.group(1)) if memory_match else None,
        pci_bus_id=bus_id,
    )


def expand_mig_units(gpus: list[GPUDevice], listing: str) -> list[GPUDevice]:
    """Replace every GPU that ``nvidia-smi -L`` shows with MIG units by those units."""
    units: dict[str, list[GPUDevice]] = {}
    parent: GPUDevice | None = None
    by_index = {g.index: g for g in gpus}
    for line in listing.splitlines():
        gpu = _GPU_LINE.match(line)
        if gpu:
            parent = by_index.get(gpu.group(1))
            continue
        mig = _MIG_LINE.match(line)
        if mig and parent is not None:
            units.setdefault(parent.index, []).append(
                replace(
                    parent,
                    index=f"{parent.index}:{mig.group(2)}",
                    uuid=mig.group(3),
                    memory_total_mib=None,
                    parent_index=parent.index,
                    parent_uuid=parent.uuid,
                    mig_profile=mig.group(1),
                )
            )
    result: list[GPUDevice] = []
    for gpu_device in gpus:
        result.extend(units.get(gpu_device.index, [gpu_device]))
    return result


def _run(executable: str, args: tuple[str, ...], timeout: float) -> str:
    argv = [executable, *args]
    try:
        done = subprocess.run(
            argv,
            capture_output=True,
            text=True,
            errors="replace",
            timeout=timeout,
            stdin=subprocess.DEVNULL,
            check=False,
        )
    except subprocess.TimeoutExpired:
        raise DiscoveryError(f"{' '.join(argv)} did not answer within {timeout:g} s") from None
    except OSError as exc:
        raise DiscoveryError(f"cannot run {executable}: {exc}") from exc
    if done.returncode == _NO_DEVICES_EXIT_CODE and "No devices were found" in done.stdout:
        return ""
    if done.returncode != 0:
        detail = (done.stderr.strip() or done.stdout.strip() or "no output")[-2000:]
        raise DiscoveryError(
            f"{' '.join(argv)} failed with exit code {done.returncode}: {detail} "
            "(is the NVIDIA driver installed and loaded?)"
        )
    return done.stdout
