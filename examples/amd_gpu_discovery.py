#!/usr/bin/env python3
"""A discovery script for AMD GPUs, for accelflow's GPU driver (and Flink's, and Spark's).

Use it as the GPU driver's discovery script::

    external-resources: gpu
    external-resource.gpu.amount: 2
    external-resource.gpu.driver-factory.class: gpu
    external-resource.gpu.kubernetes.config-key: amd.com/gpu
    external-resource.gpu.param.discovery-script.path: /opt/accelflow/examples/amd_gpu_discovery.py
    external-resource.gpu.param.discovery-script.args: --enable-coordination-mode

Usage::

    amd_gpu_discovery.py <amount> [--tool amd-smi|rocm-smi]
                         [--enable-coordination-mode] [--coordination-file PATH]

It follows the discovery-script contract: the amount comes first; it prints the first
``amount`` GPU indexes, comma-separated, on stdout; it exits 1 with a message on stderr when
there are too few, and 2 on a usage error.

Where the GPUs come from: ``amd-smi list --json`` (ROCm 6 and later), else
``rocm-smi --showuniqueid --showbus --json`` (older ROCm); ``--tool`` picks one. The GPUs a
process may use are further restricted by ``HIP_VISIBLE_DEVICES`` or, if that is unset,
``ROCR_VISIBLE_DEVICES`` (indexes or UUIDs; set but empty means none).

``--enable-coordination-mode`` shares GPUs between TaskExecutors on one host through
accelflow's host coordination (``accelflow.resources.coordination``, which any driver of any
vendor can use: the NVIDIA GPU plugin is not imported), for resource ``gpu``: the file is
the GPU driver's own (``gpu-coordination.json``). Only this option needs accelflow importable
by the Python that runs this script. The owner of the GPUs is the process named by
``$ACCELFLOW_GPU_OWNER``, which accelflow's GPU driver sets to the TaskExecutor (so a wrapper
script in between, which exits at once, does not become the owner); where it is unset, the
owner is this script's parent, as in Flink. An owner that has already exited is refused (its
GPUs would be free again at once). The GPUs are reclaimed after the owner dies. (The driver
releases eagerly only for ``accelflow-gpu-discovery``.)
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Any

TOOLS = ("amd-smi", "rocm-smi")
TOOL_ARGS = {
    "amd-smi": ["list", "--json"],
    "rocm-smi": ["--showuniqueid", "--showbus", "--json"],
}
VISIBLE_ENV_VARS = ("HIP_VISIBLE_DEVICES", "ROCR_VISIBLE_DEVICES")
TIMEOUT_S = 10
#: the resource this script discovers for (accelflow's GPU driver runs it): it names the
#: coordination file (gpu-coordination.json) and the owner variable (ACCELFLOW_GPU_OWNER)
RESOURCE = "gpu"


class DiscoveryFailed(Exception):
    """Discovery failed; the message goes to stderr and the exit code is 1."""


@dataclass(frozen=True)
class AmdGpu:
    index: int
    uuid: str | None = None
    bus_id: str | None = None


def parse_amd_smi(output: str) -> list[AmdGpu]:
    """``amd-smi list --json``: a list of ``{"gpu": 0, "bdf": ..., "uuid": ...}`` objects
    (some versions wrap them in an object)."""
    document = json.loads(output)
    entries = document if isinstance(document, list) else list(document.values())
    gpus = []
    for entry in entries:
        if isinstance(entry, dict) and "gpu" in entry:
            gpus.append(
                AmdGpu(int(entry["gpu"]), _text(entry.get("uuid")), _text(entry.get("bdf")))
            )
    return sorted(gpus, key=lambda g: g.index)


def parse_rocm_smi(output: str) -> list[AmdGpu]:
    """``rocm-smi --showuniqueid --showbus --json``: ``{"card0": {"Unique ID": ..., "PCI Bus": ...}}``."""
    document = json.loads(output)
    gpus = []
    for name, fields in document.items():
        if name.startswith("card") and name[4:].isdigit() and isinstance(fields, dict):
            gpus.append(
                AmdGpu(int(name[4:]), _text(fields.get("Unique ID")), _text(fields.get("PCI Bus")))
            )
    return sorted(gpus, key=lambda g: g.index)


def _text(value: Any) -> str | None:
    text = str(value).strip() if value is not None else ""
    return text if text and text.upper() not in ("N/A", "NONE") else None


PARSERS = {"amd-smi": parse_amd_smi, "rocm-smi": parse_rocm_smi}


def list_gpus(tools: tuple[str, ...]) -> list[AmdGpu]:
    """The GPUs from the first tool that is installed and answers."""
    failures = []
    for tool in tools:
        path = shutil.which(tool)
        if path is None:
            failures.append(f"{tool} is not on PATH")
            continue
        try:
            done = subprocess.run(
                [path, *TOOL_ARGS[tool]],
                capture_output=True,
                text=True,
                timeout=TIMEOUT_S,
                stdin=subprocess.DEVNULL,
                check=False,
            )
        except subprocess.TimeoutExpired:
            failures.append(f"{tool} did not answer within {TIMEOUT_S} s")
            continue
        if done.returncode != 0:
            failures.append(f"{tool} exited with {done.returncode}: {done.stderr.strip()[-500:]}")
            continue
        try:
            return PARSERS[tool](done.stdout)
        except (ValueError, TypeError, AttributeError) as exc:
            failures.append(f"{tool} printed something unexpected ({exc}): {done.stdout[:200]!r}")
    raise DiscoveryFailed("cannot list AMD GPUs: " + "; ".join(failures) + ". Install ROCm.")


def visible(gpus: list[AmdGpu], environ: dict[str, str]) -> list[AmdGpu]:
    """Restrict ``gpus`` by HIP_VISIBLE_DEVICES or ROCR_VISIBLE_DEVICES (unset: all)."""
    for name in VISIBLE_ENV_VARS:
        if name in environ:
            wanted = [w.strip() for w in environ[name].split(",") if w.strip()]
            return [g for w in wanted for g in gpus if w in (str(g.index), g.uuid)]
    return gpus


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(
        description="Print <amount> AMD GPU indexes.", allow_abbrev=False
    )
    parser.add_argument("amount", type=int)
    parser.add_argument("--tool", choices=TOOLS, help="use only this tool")
    parser.add_argument(
        "--enable-coordination-mode",
        "--enable-coordination",
        dest="coordination",
        action="store_true",
    )
    parser.add_argument("--coordination-file", type=Path)
    args = parser.parse_args(argv)
    if args.amount < 0:
        parser.error(f"amount must be >= 0, got {args.amount}")
    return args


def choose(args: argparse.Namespace, gpus: list[AmdGpu]) -> list[int]:
    if not args.coordination:
        if len(gpus) < args.amount:
            raise DiscoveryFailed(
                f"need {args.amount} AMD GPU(s), found {len(gpus)}: {[g.index for g in gpus]}"
            )
        return [g.index for g in gpus[: args.amount]]
    try:  # accelflow's host coordination: exact matching, crash-safe, PID-reuse safe
        from accelflow import AccelflowError
        from accelflow.resources.coordination import CoordinationFile, Device
    except ImportError as exc:
        raise DiscoveryFailed(
            f"--enable-coordination-mode needs accelflow importable ({exc})"
        ) from exc
    devices = [Device(index=str(g.index), uuid=g.uuid, kind="GPU") for g in gpus]
    path = args.coordination_file.expanduser().absolute() if args.coordination_file else None
    try:
        taken = CoordinationFile(path, resource=RESOURCE).allocate(devices, args.amount, owner())
    except AccelflowError as exc:
        raise DiscoveryFailed(str(exc)) from exc
    return [int(d.index) for d in taken]


def owner() -> Any:
    """Who holds the GPUs: ``$ACCELFLOW_GPU_OWNER`` (set by accelflow's GPU driver), else the
    parent; never a process that has exited."""
    import psutil

    from accelflow.resources.coordination import Owner, owner_env_var, owner_from_env

    named = os.environ.get(owner_env_var(RESOURCE))
    try:
        return owner_from_env(named, RESOURCE) if named is not None else Owner.of_process(os.getppid())
    except (ValueError, psutil.NoSuchProcess) as exc:
        raise DiscoveryFailed(f"refusing to record the owner of the GPUs: {exc}") from exc


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    if args.amount == 0:
        return 0
    try:
        gpus = visible(list_gpus((args.tool,) if args.tool else TOOLS), dict(os.environ))
        indexes = choose(args, gpus)
    except DiscoveryFailed as exc:
        print(f"amd_gpu_discovery: {exc}", file=sys.stderr)
        return 1
    print(",".join(str(i) for i in indexes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
