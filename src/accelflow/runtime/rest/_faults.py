"""``POST /v1/taskexecutors/{id}/faults``: the fault drill (``accelflow cluster inject-fault``).

The body names the device and the Xid: ``{"device": "0", "xid": 79}``, and ``"resource"``
when the TaskExecutor watches more than one. The device is its index (address) or its UUID
(``GPU-…``, a MIG unit's ``MIG-…``), as ``nvidia-smi -i`` takes them; the answer names its
address. ``{id}`` is percent-decoded. The Xid is fed to the device's health on its
TaskExecutor as a real NVML event would be (as DCGM's ``dcgmi test --inject`` does): a
hardware Xid quarantines the device and fails its subtasks with a ``HardwareFailure``, an
application Xid fails them with a ``DeviceFault`` and leaves the device in service. The same
checks as every write guard it (Host, Origin, the token: see :mod:`._rest`).

Answers: 202 ``{"taskexecutor", "resource", "device", "xid", "kind", "description"}``; 400 for
a body that is not such an object, an unknown device or an Xid that is not in NVIDIA's catalogue
(the message lists the known ones); 404 for an unknown TaskExecutor.
"""

from __future__ import annotations

import json
import re
import urllib.parse
from http import HTTPStatus
from typing import TYPE_CHECKING, Any

from accelflow._errors import ConfigError
from accelflow.runtime.rest._http import HttpError

if TYPE_CHECKING:
    from accelflow.runtime.jobmanager import JobManager

FAULTS = re.compile(r"^/v1/taskexecutors/(?P<id>[^/]+)/faults$")
_WHERE = "POST /v1/taskexecutors/{id}/faults"
_FIELDS = {"device": (str, int), "xid": (int, str), "resource": (str,)}


def inject_fault(jobmanager: JobManager, te_id: str, body: bytes) -> tuple[HTTPStatus, bytes]:
    """Check the drill's body and send it (see the module's description).

    Raises:
        HttpError: 400 or 404, naming what is wrong.
    """
    from accelflow.resources.gpu import classify

    fields = _fields(body)
    te_id = urllib.parse.unquote(te_id)  # the client escapes it (``accelflow cluster inject-fault``)
    try:
        sent = jobmanager.inject_fault(te_id, str(fields["device"]), fields["xid"], fields.get("resource"))
    except KeyError as exc:
        raise HttpError(HTTPStatus.NOT_FOUND, str(exc.args[0])) from None
    except ConfigError as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{_WHERE}: {exc}") from None
    xid = classify(sent.xid)
    answer = {"taskexecutor": te_id, "resource": sent.resource, "device": sent.address, "xid": sent.xid,
              "kind": xid.kind, "description": xid.description}
    return HTTPStatus.ACCEPTED, json.dumps(answer, indent=1).encode()


def _fields(body: bytes) -> dict[str, Any]:
    try:
        fields = json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{_WHERE}: the body is not JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{_WHERE}: the body must be a JSON object such as "
                        '{"device": "0", "xid": 79}')
    for name, value in fields.items():
        kinds = _FIELDS.get(name)
        if kinds is None:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{_WHERE}: unknown field {name!r}; expected "
                            "'device', 'xid' and, optionally, 'resource'")
        if not isinstance(value, kinds) or isinstance(value, bool):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{_WHERE}: {name!r} must be "
                            f"{' or '.join('text' if k is str else 'a number' for k in kinds)}, got {value!r}")
    missing = [name for name in ("device", "xid") if name not in fields]
    if missing:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{_WHERE}: {' and '.join(map(repr, missing))} missing; "
                        'e.g. {"device": "0", "xid": 79}')
    return fields
