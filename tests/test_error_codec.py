"""One error codec (``accelflow._errors.encode_error``/``decode_error``): every
``AccelflowError`` subclass survives a trip between processes with its class and attributes."""

from __future__ import annotations

import inspect
import pickle
from pathlib import Path
from typing import Any

import pytest

import accelflow
from accelflow import _errors
from accelflow._errors import (
    AccelflowError, AllocationError, CheckpointError, ConfigError, ConfigProblem, CoordinationError, DataFormatError,
    DiscoveryError, DriverLoadError, JobError, MissingDependencyError, RemoteError, decode_error, encode_error,
    remote_traceback,
)

EXAMPLES: list[AccelflowError] = [
    ConfigError([ConfigProblem("external-resource.gpu.amount", "expected a positive integer, got '0'")]),
    DriverLoadError("cannot import org.example.someinvalidclass", resource="gpu",
                    key="external-resource.gpu.driver-factory.class"),
    DiscoveryError("asked for 3 GPUs, found 2", resource="gpu"),
    CoordinationError("corrupt state", path="/tmp/coord.json"),
    AllocationError("no TaskExecutor can host map (1/1)", ["taskexecutor-1: gpu 0 has 1/2 free"]),
    DataFormatError("bad magic number", path="/data/t10k-images-idx3-ubyte.gz"),
    CheckpointError("corrupt JSON", path="/ckpt/job/chk-3/_metadata"),
    MissingDependencyError("NVML discovery", extra="nvml"),
    accelflow.NotSupportedError("accelflow runs no JVM", key="StreamExecutionEnvironment.add_jars()"),
    accelflow.DeviceMemoryExceeded("operator 'm' ran out of device memory", operator="m", requested=2**30,
                                   used=2**30 + 1),
    accelflow.DeviceFault("gpu 0 faulted: Xid 13", device="gpu 0", uuid="GPU-1", xid=13),
    accelflow.HardwareFailure("gpu 0 failed: Xid 79; quarantined", device="gpu 0", uuid="GPU-1", xid=79),
    accelflow.ChannelClosed("the downstream subtask closed its data channel"),
    accelflow.RingError("cannot take the shared-memory ring of a data channel (32 MiB): Too many open files"),
    accelflow.SubtaskHung("subtask map (2/4) is hung and was killed", subtask="map (2/4)", timeout_s=30.0,
                          stack='Thread 0x01 (most recent call first):\n  File "job.py", line 3 in map'),
]


def test_every_error_class_has_an_example() -> None:
    classes = {obj for obj in vars(_errors).values()
               if inspect.isclass(obj) and issubclass(obj, AccelflowError)}
    covered = {type(e) for e in EXAMPLES} | {AccelflowError, JobError, accelflow.JobCancelledError,
                                            accelflow.TransportError, accelflow.DeploymentError,
                                            accelflow.AccelflowInternalError}
    assert classes <= covered, classes - covered


@pytest.mark.parametrize("error", EXAMPLES, ids=lambda e: type(e).__name__)
def test_a_pickled_trip_keeps_class_attributes_and_message(error: AccelflowError) -> None:
    wire = pickle.loads(pickle.dumps(encode_error(error)))
    back = decode_error(wire)
    assert type(back) is type(error)
    assert str(back) == str(error)
    assert {k: v for k, v in vars(back).items() if k not in ("__notes__", "_remote")} == vars(error)


def test_context_prefixes_the_message_and_keeps_the_attributes() -> None:
    back = decode_error(encode_error(DataFormatError("bad magic", path="/d/x")), context="subtask m (1/2) failed")
    assert isinstance(back, DataFormatError)
    assert back.path == "/d/x"
    assert str(back) == "subtask m (1/2) failed: /d/x: bad magic"


def test_a_third_party_error_subclass_survives_too() -> None:
    back = decode_error(encode_error(_VendorError("fpga 3 fell off the bus", slot=3)))
    assert isinstance(back, _VendorError)
    assert back.slot == 3


def test_an_unknown_class_path_is_a_job_error_not_a_crash() -> None:
    wire = _errors.RemoteError("no.such.module:Boom", "it broke")
    back = decode_error(wire)
    assert type(back) is JobError
    assert "Boom: it broke" in str(back)


class _VendorError(DiscoveryError):
    def __init__(self, message: str, *, slot: int) -> None:
        self.slot = slot
        super().__init__(message, resource="fpga")


# --- user exceptions: their own class and JobError at once (issue 25.3) -----------------------

_CONTEXT = "subtask map (1/2) on taskexecutor-1 failed"
#: a file inside the accelflow package: its frames are accelflow's, dropped from the message
_RUNTIME_FILE = str(Path(_errors.__file__).parent / "runtime" / "_calls_user_code.py")


def _raised_through_the_runtime(error: BaseException) -> RemoteError:
    """``error`` raised by user code that accelflow's runtime called, encoded as a subtask does
    (the runtime's code is compiled as a file of the accelflow package)."""
    runtime = "def run(fn):\n    try:\n        fn()\n    except BaseException as exc:\n        return encode(exc)\n"
    namespace: dict[str, Any] = {"encode": lambda exc: encode_error(exc, with_traceback=True)}
    exec(compile(runtime, _RUNTIME_FILE, "exec"), namespace)

    def users_map() -> None:
        raise error

    return pickle.loads(pickle.dumps(namespace["run"](users_map)))


def test_a_user_error_is_its_own_class_and_a_job_error() -> None:
    back = decode_error(_raised_through_the_runtime(ValueError("bad record 7")), context=_CONTEXT)
    assert isinstance(back, ValueError) and isinstance(back, JobError)
    assert type(back).__name__ == "JobError(ValueError)"
    assert back.args == ("bad record 7",)
    assert type(back.__cause__) is ValueError and back.__cause__.args == ("bad record 7",)
    assert type(decode_error(_raised_through_the_runtime(ValueError("again")))) is type(back)  # one class


def test_the_message_is_the_context_then_the_users_frames_without_the_runtimes() -> None:
    back = decode_error(_raised_through_the_runtime(ValueError("bad record 7")), context=_CONTEXT)
    lines = str(back).splitlines()
    assert lines[0] == _CONTEXT
    assert lines[1] == "Traceback (most recent call last):"
    assert lines[2].startswith(f'  File "{__file__}", line ') and lines[2].endswith("in users_map")
    assert lines[3].strip() == "raise error"
    assert lines[-1] == "ValueError: bad record 7"
    assert _RUNTIME_FILE not in str(back)
    assert _RUNTIME_FILE in (remote_traceback(back) or "")  # the whole traceback (accelflow -v)


def test_attributes_and_what_c_keeps_survive() -> None:
    back = decode_error(_raised_through_the_runtime(BadRecord("no label", record=7)))
    assert isinstance(back, BadRecord) and back.record == 7 and back.args == ("no label",)
    assert isinstance(back.__cause__, BadRecord) and back.__cause__.record == 7
    missing = decode_error(_raised_through_the_runtime(FileNotFoundError(2, "No such file", "/d/x.csv")))
    assert isinstance(missing, FileNotFoundError)
    assert (missing.errno, missing.filename) == (2, "/d/x.csv")


def test_a_class_that_refuses_subclasses_is_a_job_error_caused_by_the_original() -> None:
    back = decode_error(_raised_through_the_runtime(Sealed("sealed")), context=_CONTEXT)
    assert type(back) is JobError
    assert type(back.__cause__) is Sealed and back.__cause__.args == ("sealed",)
    assert str(back).splitlines()[0] == _CONTEXT and str(back).endswith("Sealed: sealed")


def test_a_class_that_cannot_be_made_here_is_a_job_error_naming_it() -> None:
    class Local(Exception):  # <locals>: no other process can import it
        pass

    back = decode_error(_raised_through_the_runtime(Local("it broke")), context=_CONTEXT)
    assert type(back) is JobError and back.__cause__ is None
    assert str(back).endswith("Local: it broke")


def test_a_base_exception_that_is_no_exception_does_not_become_one() -> None:
    back = decode_error(_raised_through_the_runtime(KeyboardInterrupt()), context=_CONTEXT)
    assert type(back) is JobError and not isinstance(back, KeyboardInterrupt)
    assert type(back.__cause__) is KeyboardInterrupt


def test_a_forwarded_error_keeps_its_class_context_and_traceback() -> None:
    """The session cluster's JobManager decodes, the session encodes again, the client decodes."""
    at_session = decode_error(_raised_through_the_runtime(BadRecord("no label", record=3)), context=_CONTEXT)
    at_client = decode_error(pickle.loads(pickle.dumps(encode_error(at_session))))
    assert type(at_client) is type(at_session) and at_client.record == 3
    assert str(at_client) == str(at_session)
    assert remote_traceback(at_client) == remote_traceback(at_session) is not None
    typed = decode_error(encode_error(decode_error(_raised_through_the_runtime(
        DataFormatError("bad magic", path="/d/x")), context=_CONTEXT)))
    assert str(typed) == f"{_CONTEXT}: /d/x: bad magic" and len(typed.__notes__) == 1


def test_a_job_error_of_a_user_class_pickles() -> None:
    back = decode_error(_raised_through_the_runtime(BadRecord("no label", record=5)), context=_CONTEXT)
    again = pickle.loads(pickle.dumps(back))
    assert type(again) is type(back) and again.record == 5 and str(again) == str(back)


class BadRecord(ValueError):
    def __init__(self, message: str, *, record: int) -> None:  # keyword-only: pickle cannot remake it
        super().__init__(message)
        self.record = record


class Sealed(Exception):
    def __init_subclass__(cls, **kwargs: Any) -> None:
        raise TypeError("Sealed cannot be subclassed")
