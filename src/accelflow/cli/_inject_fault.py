"""``accelflow cluster inject-fault``: a fault drill on one device of a session cluster, as
DCGM's ``dcgmi test --inject`` is for real GPUs.

It posts ``{"device": INDEX, "xid": N}`` (or the device's UUID, as ``nvidia-smi -i`` takes it)
to the cluster's ``POST /v1/taskexecutors/{id}/faults`` (the id escaped: one path segment,
whatever it holds) with the cluster's REST token (from its state file), and the
TaskExecutor feeds the Xid to the device's health as an NVML event: a hardware Xid quarantines
the device and fails its subtasks (``HardwareFailure``), which restart from the latest
checkpoint on healthy devices; an application Xid fails them (``DeviceFault``) and the device
stays. An Xid that is not in NVIDIA's catalogue is refused here (exit code 2), listing the
known ones.
"""

from __future__ import annotations

import argparse
import json
import urllib.error
import urllib.parse
import urllib.request
from typing import Any

from accelflow._errors import AccelflowError, ConfigError

HELP = "inject an Xid into one device of a session cluster (a fault drill)"
DESCRIPTION = """\
Rehearse a GPU failure: feed Xid N to one device of one TaskExecutor of a running session
cluster, as an NVML event of that device would be. A hardware Xid (e.g. 79, fallen off the bus)
quarantines the device (no new shares) and fails the subtasks on it with a HardwareFailure; they
restart from the latest checkpoint on healthy devices, and the device rejoins once its probes
pass after a reset. An application Xid (e.g. 13) fails its subtasks, which restart; the device
stays in service. The web UI and /v1/taskexecutors show the device's health and Xid history."""
EPILOG = """\
examples:
  accelflow cluster inject-fault --taskexecutor taskexecutor-1 --device 0 --xid 79
  accelflow cluster inject-fault --taskexecutor taskexecutor-1 --device GPU-5c4f7e0a-8d1b-4e4f-9a55-0c1d2e3f4a5b --xid 79
  accelflow cluster inject-fault --cluster http://127.0.0.1:8081 --taskexecutor taskexecutor-2 --device 1 --xid 13"""
_TIMEOUT_S = 30.0


def add_parser(actions: Any) -> None:
    """``inject-fault`` under ``accelflow cluster``."""
    p = actions.add_parser("inject-fault", help=HELP, description=DESCRIPTION, epilog=EPILOG,
                           formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--cluster", metavar="URL", help="which session (default: the only one)")
    p.add_argument("--taskexecutor", metavar="ID", required=True, help="e.g. taskexecutor-1 (see the web UI)")
    p.add_argument("--device", metavar="INDEX|UUID", required=True,
                   help="the device's index or UUID, as nvidia-smi -i takes them: e.g. 0, "
                   "GPU-5c4f7e0a-..., or a MIG unit's MIG-...")
    p.add_argument("--xid", metavar="N", required=True, help="an Xid of NVIDIA's catalogue, e.g. 79")
    p.add_argument("--resource", metavar="NAME",
                   help="the resource (default: the only one the TaskExecutor watches)")
    p.set_defaults(func=inject_fault)


def inject_fault(args: argparse.Namespace) -> int:
    from accelflow.resources.gpu import drill_xid
    from accelflow.runtime.client import find_session

    xid = drill_xid(args.xid, key="--xid")  # ConfigError (exit 2) before any connection
    info = find_session(args.cluster)
    body: dict[str, Any] = {"device": args.device, "xid": xid.code}
    if args.resource:
        body["resource"] = args.resource
    te_id = urllib.parse.quote(args.taskexecutor, safe="")  # one path segment, whatever it holds
    url = f"{info.url.rstrip('/')}/v1/taskexecutors/{te_id}/faults"
    request = urllib.request.Request(url, data=json.dumps(body).encode(), method="POST", headers={
        "Authorization": f"Bearer {info.token}", "Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=_TIMEOUT_S) as response:
            answer = json.loads(response.read())
    except urllib.error.HTTPError as exc:
        raise _refused(exc) from None
    except (urllib.error.URLError, OSError) as exc:
        raise AccelflowError(f"the session cluster at {info.url} does not answer: {exc}") from None
    print(f"injected Xid {answer['xid']} ({answer['description']}, {answer['kind']}) into "
          f"{answer['taskexecutor']}: {answer['resource']} {answer['device']}")
    return 0


def _refused(exc: urllib.error.HTTPError) -> AccelflowError:
    try:
        message = json.loads(exc.read()).get("error", exc.reason)
    except ValueError:
        message = exc.reason
    text = str(message).removeprefix("POST /v1/taskexecutors/{id}/faults: ")
    key, _, rest = text.partition(": ")
    if exc.code == 400 and key in ("device", "resource", "--xid"):
        return ConfigError(rest, key=key if key.startswith("--") else f"--{key}")
    if exc.code == 404 and text.startswith("no TaskExecutor"):
        return ConfigError(text, key="--taskexecutor")
    return AccelflowError(f"the session cluster refused the drill ({exc.code}): {text}")
