"""One error codec (``accelflow._errors.encode_error``/``decode_error``): every
``AccelflowError`` subclass survives a trip between processes with its class and attributes."""

from __future__ import annotations

import inspect
import pickle

import pytest

import accelflow
from accelflow import _errors
from accelflow._errors import (
    AccelflowError, AllocationError, CheckpointError, ConfigError, ConfigProblem, CoordinationError, DataFormatError,
    DiscoveryError, DriverLoadError, JobError, MissingDependencyError, decode_error, encode_error,
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
    assert {k: v for k, v in vars(back).items() if k != "__notes__"} == vars(error)


def test_context_prefixes_the_message_and_keeps_the_attributes() -> None:
    back = decode_error(encode_error(DataFormatError("bad magic", path="/d/x")), context="subtask m (1/2) failed")
    assert isinstance(back, DataFormatError)
    assert back.path == "/d/x"
    assert str(back) == "subtask m (1/2) failed: /d/x: bad magic"


def test_user_errors_become_job_errors_with_the_remote_traceback() -> None:
    try:
        raise ValueError("bad record 7")
    except ValueError as exc:
        wire = encode_error(exc, with_traceback=True)
    back = decode_error(wire, context="subtask map (1/1) on taskexecutor-1 failed")
    assert type(back) is JobError
    assert "ValueError: bad record 7" in str(back)
    assert "Traceback" in str(back)


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
