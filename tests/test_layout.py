"""The package layout holds (issue 15): one-way layers between subpackages, imports through
package facades, small modules, and typed messages across process boundaries."""

from __future__ import annotations

import ast
import pickle
from pathlib import Path

import cloudpickle
import msgspec
import msgspec.structs
import pytest

import accelflow
import accelflow.runtime
from accelflow._errors import DataFormatError, RemoteError, encode_error
from accelflow.runtime import _device_messages, _messages, _session_messages

SRC = Path(accelflow.__file__).parent
MAX_MODULE_LINES = 450
#: modules every package may import by their private path (the root's shared internals)
ROOT_INTERNALS = {"accelflow._errors", "accelflow._exports", "accelflow._loops", "accelflow._names", "accelflow._parent",
                  "accelflow._warn"}


def _module_name(path: Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts = parts[:-1]
    return ".".join(parts)


def _package_of(path: Path) -> str:
    name = _module_name(path)
    return name if path.name == "__init__.py" else name.rsplit(".", 1)[0]


def _imports(path: Path) -> list[tuple[int, str]]:
    """Every ``accelflow`` module imported by ``path``, lazily or not, with its line."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("accelflow"):
            found.append((node.lineno, node.module))
            found += [(node.lineno, f"{node.module}.{a.name}") for a in node.names
                      if (SRC.parent / f"{node.module}.{a.name}".replace(".", "/")).is_dir()]
        elif isinstance(node, ast.Import):
            found += [(node.lineno, a.name) for a in node.names if a.name.startswith("accelflow")]
    return found


def _unit(module: str) -> str:
    """The layer a module belongs to: ``accelflow.<pkg>``, or ``accelflow.runtime.<pkg>``."""
    parts = module.split(".")
    if len(parts) >= 3 and parts[1] == "runtime" and not parts[2].startswith("_"):
        return ".".join(parts[:3])
    if len(parts) >= 2 and not parts[1].startswith("_"):
        return ".".join(parts[:2])
    return "accelflow"


def _sources() -> list[Path]:
    return sorted(SRC.rglob("*.py"))


def test_no_import_cycle_between_subpackages() -> None:
    graph: dict[str, set[str]] = {}
    for path in _sources():
        here = _unit(_module_name(path))
        for _, target in _imports(path):
            there = _unit(target)
            if there != here and there != "accelflow" and here != "accelflow":
                graph.setdefault(here, set()).add(there)

    def reaches(start: str, goal: str, seen: set[str]) -> bool:
        for nxt in graph.get(start, ()):
            if nxt == goal or (nxt not in seen and reaches(nxt, goal, seen | {nxt})):
                return True
        return False

    cycles = sorted(f"{a} <-> {b}" for a, targets in graph.items() for b in targets if reaches(b, a, {b}))
    assert not cycles, "import cycles between subpackages: " + ", ".join(cycles)


def test_dataflow_imports_neither_api_nor_runtime() -> None:
    bad = [f"{p.name}:{line} {m}" for p in (SRC / "dataflow").glob("*.py") for line, m in _imports(p)
           if _unit(m) in ("accelflow.api",) or m.startswith("accelflow.runtime")]
    assert not bad


#: what describing a job never needs: shared memory, memory maps, files and locks, other
#: processes' memory (issue 26.2: sharing arrays with subtasks is the runtime's)
OS_LEVEL_MODULES = {"mmap", "ctypes", "fcntl", "multiprocessing", "socket", "tempfile", "shutil", "signal"}
OS_LEVEL_CALLS = {"memfd_create", "process_vm_readv", "memmap", "mkstemp", "ftruncate", "flock", "getpid"}


def _os_level_uses(path: Path) -> list[str]:
    """The OS-level modules ``path`` imports and the OS-level calls it names, with their lines."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.Import):
            found += [f"{node.lineno}: import {a.name}" for a in node.names
                      if a.name.split(".")[0] in OS_LEVEL_MODULES]
        elif isinstance(node, ast.ImportFrom) and node.module and node.module.split(".")[0] in OS_LEVEL_MODULES:
            found.append(f"{node.lineno}: from {node.module} import ...")
        elif isinstance(node, ast.Attribute | ast.Name):
            name = node.attr if isinstance(node, ast.Attribute) else node.id
            if name in OS_LEVEL_CALLS:
                found.append(f"{node.lineno}: {name}")
    return found


def test_dataflow_holds_no_os_level_sharing() -> None:
    bad = [f"dataflow/{p.name}:{use}" for p in sorted((SRC / "dataflow").glob("*.py")) for use in _os_level_uses(p)]
    assert not bad, "dataflow/ describes jobs; move this to the runtime:\n" + "\n".join(bad)


def test_the_os_level_check_sees_what_the_array_data_plane_uses() -> None:
    uses = " ".join(_os_level_uses(SRC / "runtime" / "_arrays.py") + _os_level_uses(SRC / "runtime" / "_process_memory.py"))
    assert all(word in uses for word in ("import mmap", "import ctypes", "memfd_create", "process_vm_readv", "memmap"))


def _source_classes(path: Path) -> list[str]:
    """The classes ``path`` defines on ``Source`` (``class X(Source[Any])``, ``(..., Source)``)."""
    found = []
    for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
        if isinstance(node, ast.ClassDef):
            bases = [b.value if isinstance(b, ast.Subscript) else b for b in node.bases]
            if any(isinstance(b, ast.Name) and b.id == "Source" for b in bases):
                found.append(node.name)
    return found


def test_sources_have_one_home() -> None:
    """Issue 26.7: the contracts in dataflow/, every built-in or connector source in connectors/."""
    homes = {str(p.relative_to(SRC)): _source_classes(p) for p in _sources() if _source_classes(p)}
    assert all(path.startswith("connectors/") for path in homes), homes
    assert {"CollectionSource", "SequenceSource", "ArraySource", "IdxSource", "KafkaSource"} <= {
        name for names in homes.values() for name in names}
    import accelflow.connectors

    assert accelflow.IdxSource is accelflow.connectors.IdxSource  # the public path users have


def test_runtime_never_imports_the_api() -> None:
    bad = [f"{p}:{line}" for p in (SRC / "runtime").rglob("*.py") for line, m in _imports(p)
           if m.startswith("accelflow.api")]
    assert not bad


def test_packages_import_each_other_through_their_facades() -> None:
    bad = []
    for path in _sources():
        mine = _package_of(path)
        for line, target in _imports(path):
            last = target.rsplit(".", 1)[-1]
            if not last.startswith("_") or target in ROOT_INTERNALS:
                continue
            owner = target.rsplit(".", 1)[0]
            if owner != mine and not (path.name == "__init__.py" and owner == mine):
                bad.append(f"{path.relative_to(SRC)}:{line} imports {target}")
    assert not bad, "\n".join(bad)


#: Which runtime folder may import which. A folder is a kind of process (docs/architecture.md),
#: so an import across folders means code of one process running in another: only these are
#: meant. The runtime's own top-level modules (``runtime/_*.py``: messages, channel addresses,
#: state files, process hygiene) are shared by every process and import no folder.
RUNTIME_IMPORTS: dict[str, set[str]] = {
    # the user's process: the embedded cluster runs its JobManager, launcher and REST server here
    "client": {"jobmanager", "launchers", "rest"},
    # the session cluster's process: a JobManager, its launcher and its REST server
    "service": {"jobmanager", "launchers", "rest"},
    # runs wherever a JobManager runs, and reads it under its lock
    "rest": {"jobmanager"},
    # talks to TaskExecutors only through the launcher boundary
    "jobmanager": {"launchers"},
    # starts TaskExecutors: by module name, forked by the zygote, or as the Ray actor class
    "launchers": {"taskexecutor"},
    # forks subtasks by module name (``_early.SubtaskEntry``), never imports them; spawns warm
    # subtask processes and device hosts by module name too
    "taskexecutor": set(),
    "subtask": set(),
    # a device host (issue 27): its resident instances run the device stage of ``map_batches``
    # (``subtask/_device.py``) and join chunks as a subtask does, in the host's process
    "devicehost": {"subtask"},
}


def _runtime_folder(module: str) -> str | None:
    """``client`` for ``accelflow.runtime.client._remote``; ``""`` for the runtime's shared
    top-level modules; None outside the runtime."""
    parts = module.split(".")
    if parts[:2] != ["accelflow", "runtime"]:
        return None
    if len(parts) == 2 or parts[2].startswith("_"):
        return ""
    return parts[2]


def test_runtime_folders_import_only_what_their_process_runs() -> None:
    runtime = SRC / "runtime"
    folders = {p.name for p in runtime.iterdir() if p.is_dir() and (p / "__init__.py").exists()}
    assert folders == set(RUNTIME_IMPORTS), "a runtime folder without a row in RUNTIME_IMPORTS (or a row without a folder)"
    bad = []
    for path in runtime.rglob("*.py"):
        here = _runtime_folder(_module_name(path) if path.name != "__init__.py" or path.parent != runtime
                               else "accelflow.runtime")
        for line, target in _imports(path):
            there = _runtime_folder(target)
            if there is None or there == "" or there == here:
                continue
            if here == "" or there not in RUNTIME_IMPORTS[here]:
                bad.append(f"{path.relative_to(SRC)}:{line} ({here or 'shared'}) imports {target} ({there})")
    assert not bad, "imports across runtime processes:\n" + "\n".join(bad)


def test_no_module_is_over_the_size_budget() -> None:
    big = [f"{p.relative_to(SRC)}: {n} lines" for p in _sources()
           if (n := len(p.read_text(encoding="utf-8").splitlines())) > MAX_MODULE_LINES]
    assert not big


def test_module_paths_are_not_spelled_as_strings() -> None:
    """Processes are started by module objects' names, so a move cannot break them."""
    bad = [f"{p.relative_to(SRC)}" for p in _sources()
           if '"accelflow.runtime.' in p.read_text(encoding="utf-8")]
    assert not bad


def _message_classes() -> list[type]:
    return [obj for module in (_messages, _device_messages, _session_messages) for name, obj in vars(module).items()
            if isinstance(obj, type) and issubclass(obj, msgspec.Struct) and obj.__module__ == module.__name__
            and not obj.__name__.startswith("_")]


def _example(cls: type) -> object:
    key = _messages.SubtaskKey("job-1", 0, 1, 2)
    error = encode_error(DataFormatError("bad header", path="/data/x.idx"))
    values = {
        "key": key, "sender": key, "error": error, "descriptor": None, "job_id": "job-1",
        "taskexecutor_id": "taskexecutor-1", "pid": 42, "exitcode": 3, "slots": 2,
        "counts": [(0, 5)], "chunk": [1, 2], "name": "c", "reason": "gone",
        "graph_blob": b"x", "config": {"a": 1}, "url": "http://127.0.0.1:1", "snapshot": {"records": 1},
        "result": None, "overview": {}, "partitioning": "rebalance", "key_fn": None,
        "addresses": ("a",), "nodes": [], "outputs": (), "rolling": False,
        "checkpoint_id": 3, "states": {"map": b"state"}, "path": "/tmp/savepoint-1",
        "new_key": _messages.SubtaskKey("job-1", 1, 1, 2), "restored": {"map": [b"state"]},
        "timestamp": 1_700_000_000_000, "idle": True, "input_index": 1,  # data-channel messages
    }
    device = _messages.RegisteredDevice("0", {"index": "0", "uuid": "GPU-1"})
    values.update({  # devices: a registration's and a SubtaskDescriptor's
        "address": "0", "properties": {"index": "0"}, "amount": 2, "numerator": 1, "denominator": 2,
        "resources": (_messages.RegisteredResource("gpu", 1, "gpu", "ok", None, (device,)),
                      _messages.RegisteredResource("fpga", 2, status="no-driver")),
    })
    values.update({  # a SubtaskDescriptor's own fields
        "parallelism": 2, "chain_blob": b"plan", "listen_address": "/tmp/c.sock",
        "expected_senders": 1, "splits": [(0, 5)],
        "assigned": {"gpu": (_messages.DeviceShare({"index": "0"}, 1, 2),)},
        "taskexecutor_infos": {"gpu": (device,)}, "isolate": True, "authkey": b"k",
    })
    values.update({  # device health and memory
        "resource": "gpu", "uuid": "GPU-1", "health": {"state": "quarantined", "xid_counts": {79: 1}},
        "change": _device_messages.DeviceChange("quarantined", "Xid 79", 79, True),
        "kind": "quarantined", "xid": 79, "used": 2**30,
        "usage": (_device_messages.SubtaskMemory(key, "gpu", "0", 2**30),),
    })
    instance = _device_messages.ResidentInstance("gpu", "0", "classify", "3f2a", 2**20, 2, 1.5)
    values.update({  # warm devices' (runtime/_device_messages.py)
        "framework": "torch", "note": "CUDA context on device 0", "env": {"A": "1"}, "address": "/tmp/h.sock",
        "instances": (instance,), "resource": "gpu", "blob": b"fn", "operator": "classify",
        "options": _device_messages.ResidentOptions("map_batches", "map_batch", 64), "subtask": "classify (1/2)",
        "kind": "map", "seq": 3, "records": 64, "resident": (instance,),
        "pools": (_device_messages.DevicePool("gpu", "0", 1, 1),), "opened": True, "memory": 2**20,
        "ready": 1, "size": 1, "users": 2, "since": 1.5,
    })
    fields = {f.name: values[f.name] for f in msgspec.structs.fields(cls)
              if f.name in values}
    return cls(**fields)


@pytest.mark.parametrize("cls", _message_classes(), ids=lambda c: c.__name__)
def test_every_message_is_frozen_and_survives_pickling(cls: type) -> None:
    message = _example(cls)
    assert cls.__struct_config__.frozen  # type: ignore[attr-defined]
    field = msgspec.structs.fields(cls)[0].name if msgspec.structs.fields(cls) else "anything"
    with pytest.raises(AttributeError):
        setattr(message, field, None)
    assert pickle.loads(pickle.dumps(message)) == message
    assert cloudpickle.loads(cloudpickle.dumps(message)) == message


def test_every_message_class_is_reexported_by_the_runtime_facade() -> None:
    missing = [c.__name__ for c in _message_classes() if getattr(accelflow.runtime, c.__name__, None) is not c]
    assert not missing


def test_remote_error_is_the_only_error_format_on_the_wire() -> None:
    failed = _messages.SubtaskFailed(_messages.SubtaskKey("j", 0, 0, 0), encode_error(ValueError("x")))
    assert isinstance(failed.error, RemoteError)
