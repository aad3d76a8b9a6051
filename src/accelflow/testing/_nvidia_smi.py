"""An honest fake ``nvidia-smi`` for machines without a GPU.

:func:`install_fake_nvidia_smi` writes an executable ``nvidia-smi`` (a Python script) into a
directory; put that directory first on ``PATH`` and every ``nvidia-smi`` call (from accelflow,
a discovery script or a shell) reaches it as a real program. It answers the parts of the real
command that discovery uses, with the real formats:

* ``--query-gpu=<fields> --format=csv[,noheader][,nounits]`` with the fields ``index``,
  ``uuid``, ``name``, ``memory.total``, ``memory.used``, ``memory.free``, ``pci.bus_id``,
  ``count``, ``mig.mode.current``, ``temperature.gpu``, ``retired_pages.pending`` (unknown
  fields: exit 2 with nvidia-smi's message; ``-i``/``--id`` selects GPUs);
* ``--query-remapped-rows=<fields>`` (``gpu_uuid``, ``gpu_bus_id``, ``remapped_rows.pending``,
  ``remapped_rows.failure``, ``remapped_rows.correctable``, ``remapped_rows.uncorrectable``);
* ``--query-compute-apps=<fields>`` (``pid``, ``used_memory``, ``gpu_uuid``, ``gpu_bus_id``,
  ``process_name``): the :class:`FakeComputeApp` values given;
* ``-L`` (GPUs and their MIG units);
* no GPUs: ``No devices were found`` and exit code 6, like the real one; a GPU that is
  ``lost`` (fallen off the bus): a line ``Unable to determine the device handle for GPU
  <bus id>: GPU is lost...`` in place of its row, and exit code 15 (NVML's "GPU is lost").

The GPU list lives in ``nvidia-smi.json`` next to the executable and is read on every call, so a
test can change it (call :func:`install_fake_nvidia_smi` again, e.g. with a GPU ``lost`` or too
hot) while processes run; :mod:`accelflow.testing.fake_pynvml` reads the same file. Every call
appends its argv as one JSON line to ``nvidia-smi.calls``.

On a host with a real GPU, the real driver would win: NVML is asked before ``nvidia-smi`` and
``CUDA_VISIBLE_DEVICES`` may already be set. So the environment that makes the fake *the* GPU
source (:func:`fake_nvidia_smi_env`) also sets ``ACCELFLOW_GPU_DISCOVERY=nvidia-smi`` (the GPU
driver then never loads NVML) and unsets ``CUDA_VISIBLE_DEVICES`` and ``CUDA_DEVICE_ORDER``.
Pass ``environ=`` to :func:`install_fake_nvidia_smi` (a dict for a subprocess), or use
:func:`use_fake_nvidia_smi` with pytest's ``monkeypatch`` for this process and its children.

Example:
    >>> import subprocess
    >>> env = dict(os.environ)
    >>> executable = install_fake_nvidia_smi(tmp_path, 2, environ=env)
    >>> found = subprocess.run([sys.executable, "-m", "accelflow", "resources",
    ...     "-D", "external-resources=gpu", "-D", "external-resource.gpu.amount=2",
    ...     "-D", "external-resource.gpu.driver-factory.class=gpu"],
    ...     env=env, capture_output=True, text=True, check=True).stdout
    >>> found.count("NVIDIA A100-SXM4-80GB")
    2
    >>> executable = use_fake_nvidia_smi(monkeypatch, tmp_path, 2)
"""

from __future__ import annotations

import json
import os
import stat
import sys
import tempfile
from collections.abc import MutableMapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Protocol

from accelflow.resources.gpu import GPU_DISCOVERY_ENV_VAR

EXECUTABLE_NAME = "nvidia-smi"
STATE_FILE_NAME = "nvidia-smi.json"
CALLS_FILE_NAME = "nvidia-smi.calls"
#: variables a fake GPU environment removes: the host's own GPU selection must not apply
HOST_GPU_ENV_VARS = ("CUDA_VISIBLE_DEVICES", "CUDA_DEVICE_ORDER")


def fake_gpu_uuid(index: int) -> str:
    """The deterministic UUID of fake GPU ``index``: ``GPU-00000000-0000-4000-8000-00000000000<i>``."""
    return f"GPU-00000000-0000-4000-8000-{index:012d}"


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeMIGDevice:
    """A MIG unit of a fake GPU, listed by ``nvidia-smi -L``.

    Attributes:
        uuid: ``MIG-…``.
        profile: e.g. ``1g.10gb``.
    """

    uuid: str
    profile: str = "1g.10gb"


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeGPU:
    """One fake GPU.

    Example:
        >>> FakeGPU(index=3).uuid
        'GPU-00000000-0000-4000-8000-000000000003'

    Attributes:
        index: the nvidia-smi index.
        uuid: ``GPU-…``; default :func:`fake_gpu_uuid` of the index.
        name: product name.
        memory_total: MiB.
        pci_bus_id: e.g. ``00000000:17:00.0``; default derived from the index.
        mig_devices: MIG units (MIG mode is on when there are any).
        temperature: degrees Celsius (``None``: the GPU does not report it, ``[N/A]``).
        retired_pages_pending: pages wait for a reset to be retired (``None``: not supported).
        remapped_rows_pending: rows wait for a reset to be remapped (``None``: not supported).
        lost: fallen off the bus: every query about it fails.
        memory_used: MiB used besides the compute apps' (which add theirs).
    """

    index: int
    uuid: str = ""
    name: str = "NVIDIA A100-SXM4-80GB"
    memory_total: int = 81920
    pci_bus_id: str = ""
    mig_devices: tuple[FakeMIGDevice, ...] = field(default=())
    temperature: int | None = 35
    retired_pages_pending: bool | None = False
    remapped_rows_pending: bool | None = False
    lost: bool = False
    memory_used: int = 0

    def __post_init__(self) -> None:
        if not self.uuid:
            object.__setattr__(self, "uuid", fake_gpu_uuid(self.index))
        if not self.pci_bus_id:
            object.__setattr__(self, "pci_bus_id", f"00000000:{0x10 + self.index:02X}:00.0")


@dataclass(frozen=True, slots=True, kw_only=True)
class FakeComputeApp:
    """A process computing on a fake GPU (``--query-compute-apps``, NVML's compute processes).

    Attributes:
        pid: its process id (a real one, for tests that kill leftovers).
        gpu_uuid: the GPU it runs on.
        used_memory: MiB it holds (``None``: not reported, as in containers without rights).
        name: the process name.
        while_alive: listed only while process ``pid`` lives (not a zombie), as the driver
            lists a real one: its memory comes back when it dies.
    """

    pid: int
    gpu_uuid: str
    used_memory: int | None = 1024
    name: str = "python"
    while_alive: bool = False


def install_fake_nvidia_smi(
    directory: str | os.PathLike[str],
    gpus: int | Sequence[FakeGPU],
    *,
    compute_apps: Sequence[FakeComputeApp] = (),
    exit_code: int = 0,
    stderr: str = "",
    environ: MutableMapping[str, str] | None = None,
) -> Path:
    """Write (or update) a fake ``nvidia-smi`` in ``directory``; returns its path.

    Args:
        directory: where to put it (created if missing); put it first on ``PATH``.
        gpus: a number of fake GPUs ``0..n-1`` or the GPUs themselves.
        compute_apps: the processes computing on them.
        exit_code: non-zero makes every call print ``stderr`` and exit with this code.
        stderr: what a failing call prints on stderr.
        environ: if given (e.g. a copy of ``os.environ`` for a subprocess), updated in place
            with :func:`fake_nvidia_smi_env`, so processes started with it see the fake GPUs
            and nothing else, even on a host with real GPUs.

    Returns:
        The path of the executable.
    """
    folder = Path(directory)
    folder.mkdir(parents=True, exist_ok=True)
    listing = [FakeGPU(index=i) for i in range(gpus)] if isinstance(gpus, int) else list(gpus)
    state = {
        "gpus": [asdict(g) for g in listing],
        "compute_apps": [asdict(a) for a in compute_apps],
        "exit_code": exit_code,
        "stderr": stderr,
    }
    _write_atomically(folder / STATE_FILE_NAME, json.dumps(state, indent=2))
    executable = folder / EXECUTABLE_NAME
    _write_atomically(executable, f"#!{sys.executable} -IS\n{_PROGRAM}")  # -IS: stdlib only, fast
    executable.chmod(executable.stat().st_mode | stat.S_IXUSR | stat.S_IXGRP | stat.S_IXOTH)
    if environ is not None:
        changes = fake_nvidia_smi_env(executable, environ)
        for name, value in changes.items():
            if value is None:
                environ.pop(name, None)
            else:
                environ[name] = value
    return executable


def fake_nvidia_smi_env(
    executable: str | os.PathLike[str], environ: MutableMapping[str, str] | None = None
) -> dict[str, str | None]:
    """The environment changes that make the fake at ``executable`` the only GPU source.

    Returns ``{name: value}``, ``None`` meaning "unset": its folder first on ``PATH`` (once),
    ``ACCELFLOW_GPU_DISCOVERY=nvidia-smi`` (no NVML, whatever the host has) and no
    ``CUDA_VISIBLE_DEVICES``/``CUDA_DEVICE_ORDER``.

    Example:
        >>> fake_nvidia_smi_env("/t/bin/nvidia-smi", {"PATH": "/usr/bin"})["PATH"]
        '/t/bin:/usr/bin'
    """
    env = os.environ if environ is None else environ
    folder = str(Path(executable).parent)
    path = env.get("PATH", os.defpath)
    if path.split(os.pathsep)[0] != folder:
        path = f"{folder}{os.pathsep}{path}"
    changes: dict[str, str | None] = {"PATH": path, GPU_DISCOVERY_ENV_VAR: "nvidia-smi"}
    changes.update(dict.fromkeys(HOST_GPU_ENV_VARS))
    return changes


class EnvPatcher(Protocol):
    """What :func:`use_fake_nvidia_smi` needs of pytest's ``monkeypatch``."""

    def setenv(self, name: str, value: str, prepend: str | None = None) -> None: ...

    def delenv(self, name: str, raising: bool = True) -> None: ...


def use_fake_nvidia_smi(
    monkeypatch: EnvPatcher,
    directory: str | os.PathLike[str],
    gpus: int | Sequence[FakeGPU],
    *,
    exit_code: int = 0,
    stderr: str = "",
) -> Path:
    """Install the fake and make it this process's (and its children's) only GPU source.

    Like :func:`install_fake_nvidia_smi`, then applies :func:`fake_nvidia_smi_env` to
    ``os.environ`` through ``monkeypatch``, so the test undoes it.
    """
    executable = install_fake_nvidia_smi(directory, gpus, exit_code=exit_code, stderr=stderr)
    for name, value in fake_nvidia_smi_env(executable).items():
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
    return executable


def _write_atomically(path: Path, text: str) -> None:
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.replace(temp, path)


_PROGRAM = r'''"""Fake nvidia-smi written by accelflow.testing.install_fake_nvidia_smi."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
with open(os.path.join(HERE, "nvidia-smi.calls"), "a") as log:
    log.write(json.dumps(sys.argv[1:]) + "\n")
with open(os.path.join(HERE, "nvidia-smi.json")) as f:
    STATE = json.load(f)
GPUS = STATE["gpus"]
def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except (OSError, IndexError):
        return False


APPS = [a for a in STATE.get("compute_apps", []) if not a.get("while_alive") or alive(a["pid"])]
LOST_EXIT_CODE = 15  # NVML_ERROR_GPU_IS_LOST


def na(value):
    return "[N/A]" if value is None else str(value)


def yes_no(value):
    return "[N/A]" if value is None else ("Yes" if value else "No")


def mib(value, units):
    return na(value) + ("" if value is None or not units else " MiB")


def used(g):
    return g["memory_used"] + sum(a["used_memory"] or 0 for a in APPS if a["gpu_uuid"] == g["uuid"])


FIELDS = {
    "index": lambda g, units: str(g["index"]),
    "uuid": lambda g, units: g["uuid"],
    "gpu_uuid": lambda g, units: g["uuid"],
    "name": lambda g, units: g["name"],
    "gpu_name": lambda g, units: g["name"],
    "memory.total": lambda g, units: str(g["memory_total"]) + ("" if not units else " MiB"),
    "pci.bus_id": lambda g, units: g["pci_bus_id"],
    "gpu_bus_id": lambda g, units: g["pci_bus_id"],
    "count": lambda g, units: str(len(GPUS)),
    "mig.mode.current": lambda g, units: "Enabled" if g["mig_devices"] else "Disabled",
    "memory.used": lambda g, units: mib(used(g), units),
    "memory.free": lambda g, units: mib(g["memory_total"] - used(g), units),
    "temperature.gpu": lambda g, units: na(g["temperature"]),
    "retired_pages.pending": lambda g, units: yes_no(g["retired_pages_pending"]),
}
ROW_FIELDS = {
    "gpu_uuid": lambda g: g["uuid"],
    "gpu_bus_id": lambda g: g["pci_bus_id"],
    "remapped_rows.pending": lambda g: na(None if g["remapped_rows_pending"] is None else int(g["remapped_rows_pending"])),
    "remapped_rows.failure": lambda g: na(None if g["remapped_rows_pending"] is None else 0),
    "remapped_rows.correctable": lambda g: na(None if g["remapped_rows_pending"] is None else 0),
    "remapped_rows.uncorrectable": lambda g: na(None if g["remapped_rows_pending"] is None else int(g["remapped_rows_pending"])),
}
APP_FIELDS = {
    "pid": lambda a, g, units: str(a["pid"]),
    "used_memory": lambda a, g, units: mib(a["used_memory"], units),
    "used_gpu_memory": lambda a, g, units: mib(a["used_memory"], units),
    "gpu_uuid": lambda a, g, units: a["gpu_uuid"],
    "gpu_bus_id": lambda a, g, units: g["pci_bus_id"],
    "process_name": lambda a, g, units: a["name"],
    "name": lambda a, g, units: a["name"],
}
HEADERS = {"memory.total": "memory.total [MiB]", "memory.used": "memory.used [MiB]",
           "memory.free": "memory.free [MiB]", "used_memory": "used_gpu_memory [MiB]"}


def fail(message, code):
    sys.stderr.write(message + "\n")
    sys.exit(code)


def option_value(args, name):
    for i, arg in enumerate(args):
        if arg.startswith(name + "="):
            return arg.split("=", 1)[1]
        if arg == name and i + 1 < len(args):
            return args[i + 1]
    return None


def selected(args):
    wanted = option_value(args, "--id") or option_value(args, "-i")
    if wanted is None:
        return GPUS
    keys = [w.strip() for w in wanted.split(",")]
    chosen = [g for g in GPUS if str(g["index"]) in keys or g["uuid"] in keys]
    if len(chosen) != len(keys):
        fail("No devices were found", 6)
    return chosen


def fields_and_format(args, option, known):
    fields = [f.strip() for f in option_value(args, option).split(",")]
    for name in fields:
        if name not in known:
            fail('Field "%s" is not a valid field to query.' % name, 2)
    fmt = option_value(args, "--format")
    if fmt is None:
        fail("Please specify the output format with --format", 2)
    options = [o.strip() for o in fmt.split(",")]
    if "csv" not in options:
        fail('"%s" is not a valid format.' % fmt, 2)
    units = "nounits" not in options
    header = [] if "noheader" in options else [", ".join(HEADERS.get(f, f) if units else f for f in fields)]
    return fields, units, header


def lost_line(gpu):
    return ("Unable to determine the device handle for GPU %s: GPU is lost. Reboot the system "
            "to recover this GPU" % gpu["pci_bus_id"])


def emit(lines, lost):
    print("\n".join(lines))
    if lost:
        sys.exit(LOST_EXIT_CODE)


def query(args):
    fields, units, lines = fields_and_format(args, "--query-gpu", FIELDS)
    lost = False
    for gpu in selected(args):
        lost = lost or gpu["lost"]
        lines.append(lost_line(gpu) if gpu["lost"] else ", ".join(FIELDS[f](gpu, units) for f in fields))
    emit(lines, lost)


def remapped_rows(args):
    fields, units, lines = fields_and_format(args, "--query-remapped-rows", ROW_FIELDS)
    lost = False
    for gpu in selected(args):
        lost = lost or gpu["lost"]
        lines.append(lost_line(gpu) if gpu["lost"] else ", ".join(ROW_FIELDS[f](gpu) for f in fields))
    emit(lines, lost)


def compute_apps(args):
    fields, units, lines = fields_and_format(args, "--query-compute-apps", APP_FIELDS)
    by_uuid = {g["uuid"]: g for g in GPUS}
    for app in APPS:
        gpu = by_uuid.get(app["gpu_uuid"])
        if gpu is not None and not gpu["lost"]:
            lines.append(", ".join(APP_FIELDS[f](app, gpu, units) for f in fields))
    emit(lines, any(g["lost"] for g in GPUS))


def listing():
    for gpu in GPUS:
        print("GPU %d: %s (UUID: %s)" % (gpu["index"], gpu["name"], gpu["uuid"]))
        for n, mig in enumerate(gpu["mig_devices"]):
            print("  MIG %-11s Device %2d: (UUID: %s)" % (mig["profile"], n, mig["uuid"]))


def main(args):
    if STATE["exit_code"]:
        fail(STATE["stderr"], STATE["exit_code"])
    if not GPUS:
        print("No devices were found")
        sys.exit(6)
    if option_value(args, "--query-gpu") is not None:
        query(args)
    elif option_value(args, "--query-remapped-rows") is not None:
        remapped_rows(args)
    elif option_value(args, "--query-compute-apps") is not None:
        compute_apps(args)
    elif args == ["-L"] or args == ["--list-gpus"]:
        listing()
    else:
        fail("Invalid combination of input arguments. Please run 'nvidia-smi -h' for help.", 2)


main(sys.argv[1:])
'''
