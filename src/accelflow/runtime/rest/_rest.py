"""The JobManager's REST API and web UI (HTTP server: :mod:`accelflow.runtime.rest._http`).

Routes (JSON unless noted; errors are ``{"error": message}``):

=======  ==============================  ==============================================
GET      ``/``                           the web UI (``ui/index.html``, ``app.js``, ``style.css``)
GET      ``/v1/overview``                TaskExecutors, slots, jobs by state, resources
GET      ``/v1/taskexecutors``           devices with properties, free share and holders
GET      ``/v1/jobs``                    every job, short
GET      ``/v1/jobs/{id}``               operators, subtasks, devices, record counts
GET      ``/v1/jobs/{id}/pending``       why a waiting job waits, per TaskExecutor/device
POST     ``/v1/jobs/{id}/cancel``        cancel a job (202; 409 when it has ended)
POST     ``/v1/taskexecutors/{id}/faults``  fault drill (``device``, ``xid``, ``resource``): 202
GET      ``/v1/jobs/{id}/checkpoints``   checkpoint counts, latest, history, last restore
POST     ``/v1/jobs/{id}/savepoints``    savepoint (``target-directory``, ``cancel-job``): 202
POST     ``/v1/jobs/{id}/stop``          stop with savepoint (``targetDirectory``): 202
GET      ``/v1/jobs/{id}/savepoints/R``  request R: IN_PROGRESS, COMPLETED or FAILED
GET      ``/metrics``                    Prometheus text format
=======  ==============================  ==============================================

The savepoint routes are Flink's asynchronous operations (:mod:`._savepoints`): the POST
answers ``{"request-id": R}``; ``GET .../savepoints/R`` answers ``{"status": {"id": ...},
"operation": {"location": path} | {"failure-cause": why}}``.

Threat model (docs/observability.md, "Safety"): any local user and any web page the user
visits can reach a loopback port. So, in this order and before any route runs:

1. the ``Host`` header must name the bound address (``localhost`` too on loopback), else 403:
   a DNS-rebound page (``evil.example`` resolving to 127.0.0.1) is refused;
2. a state-changing request (anything but GET/HEAD) whose ``Origin`` is not this server's own
   is refused with 403: a form on another site cannot cancel a job;
3. every ``/v1`` and ``/metrics`` request needs ``Authorization: Bearer <token>`` (401). The
   token is ``rest.token`` or, when unset, a random one made at start; the session cluster
   keeps it in its 0600 state file (``accelflow cluster start|status`` print it and the UI
   link ``/?token=...``), an embedded job prints the link on its standard error (the 401
   says where: :attr:`RestServer.unauthorized`). Job ids are sequential (``job-1``): the
   token, not the id, guards them, and job errors (user exception text, which may hold
   secrets) are only served with it.

The UI's static files hold no cluster data and are served without the token; the UI takes it
from ``?token=`` (kept in the tab's ``sessionStorage``, sent as the bearer header, so no
cookie rides along with cross-site requests). No route runs code, reads a file named by the
request, or changes anything but a job's cancel flag, its savepoints and a drill's Xid (fed to one
device's health as an NVML event: the device may be quarantined, its subtasks fail and restart;
the token's holder could stop the cluster anyway): a savepoint is
written only into a new ``savepoint-<job>-<random>`` directory under an absolute target
directory (or URL) or the configured ``execution.checkpointing.savepoint-dir``, as the
cluster's user (the token's holder could run ``accelflow savepoint`` anyway).
"""

from __future__ import annotations

import hmac
import ipaddress
import json
import re
import secrets
import sys
import threading
from collections.abc import Callable
from email.message import Message
from http import HTTPStatus
from importlib import resources
from typing import TYPE_CHECKING, Any

from accelflow._errors import AccelflowError, ConfigError
from accelflow.config import Configuration
from accelflow.config import keys as k
from accelflow._errors import CheckpointError
from accelflow.runtime.rest._faults import FAULTS, inject_fault
from accelflow.runtime.rest._http import (
    MAX_BODY,
    SAFE_HEADERS,
    BoundedHTTPServer,
    BoundedHTTPServer6,
    HttpError,
    RequestHandler,
    content_length,
    log_dropped,
)
from accelflow.runtime.rest._metrics import CONTENT_TYPE, render_metrics
from accelflow.runtime.rest._savepoints import JobNotRunning, Operations, UnknownJob
from accelflow.runtime.rest._snapshot import View, cluster_view, job_summary, pending_view

if TYPE_CHECKING:
    from accelflow.runtime.jobmanager import JobManager

_STATIC = {
    "/": ("index.html", "text/html; charset=utf-8"),
    "/index.html": ("index.html", "text/html; charset=utf-8"),
    "/ui/app.js": ("app.js", "text/javascript; charset=utf-8"),
    "/ui/style.css": ("style.css", "text/css; charset=utf-8"),
}
_JOB = re.compile(r"^/v1/jobs/(?P<id>[^/]+)(?P<rest>/pending|/cancel|/checkpoints|/savepoints|/stop)?$")
_SAVEPOINT = re.compile(r"^/v1/jobs/(?P<id>[^/]+)/savepoints/(?P<rid>[^/]+)$")
_POSTS = ("/cancel", "/savepoints", "/stop")
_GET_ROUTES = ("/v1/overview", "/v1/taskexecutors", "/v1/jobs", "/metrics")
_SAFE_METHODS = ("GET", "HEAD")
_WILDCARDS = ("", "0.0.0.0", "::")
#: the 401 text of a session cluster
UNAUTHORIZED = (
    "this cluster requires its REST token: open the web UI with the link that 'accelflow cluster "
    "start' printed (.../?token=...), or send 'Authorization: Bearer <token>' ('accelflow cluster "
    "status' shows it; rest.token sets it)"
)
#: the 401 text of an embedded job's REST server (``rest.enabled``) with a token made at start
UNAUTHORIZED_EMBEDDED = (
    "this job requires its REST token: open the web UI with the link the job printed on its "
    "standard error when its REST server started ('accelflow: REST API and web UI at "
    "{url}?token=...'), or send 'Authorization: Bearer <token>' (the JobClient's rest.token "
    "holds it in the job's script; set rest.token to choose one)"
)
#: the same with a configured ``rest.token``
UNAUTHORIZED_CONFIGURED = (
    "this job requires its REST token, the value of rest.token in the job's configuration: "
    "open the web UI at {url}?token=<rest.token>, or send 'Authorization: Bearer <rest.token>'"
)


class RestServer:
    """Serves one JobManager until :meth:`stop`; ``embedded`` for a job's own cluster
    (``rest.enabled``), whose 401 says where that job printed its token.

    Example (skipped in the doctest run: it needs a running JobManager; tests/rest runs one):
        >>> server = RestServer(jobmanager, config)  # doctest: +SKIP
        >>> server.start()  # also logs the UI link with its token  # doctest: +SKIP
        'http://127.0.0.1:8081/'
        >>> server.ui_url           # the UI link with the token  # doctest: +SKIP
        'http://127.0.0.1:8081/?token=...'

    Raises (from the constructor):
        ConfigError: ``rest.token`` is set but empty.
    """

    def __init__(self, jobmanager: JobManager, config: Configuration, *, embedded: bool = False) -> None:
        self.jobmanager = jobmanager
        self.embedded = embedded
        self.address = config.get(k.REST_ADDRESS)
        self.port = config.get(k.REST_PORT)
        configured = config.get_optional(k.REST_TOKEN)
        if configured is not None and not configured.strip():
            raise ConfigError("rest.token is empty; set a secret value or leave it unset for a "
                              "random token made at start", key="rest.token")
        #: the bearer token every ``/v1`` and ``/metrics`` request needs
        self.token: str = configured.strip() if configured is not None else secrets.token_urlsafe(24)
        self.token_generated = configured is None
        self._hosts: frozenset[str] | None = None  # None: any Host (a wildcard bind)
        self.savepoints = Operations(jobmanager)
        self._httpd: BoundedHTTPServer | None = None
        self._thread: threading.Thread | None = None

    @property
    def url(self) -> str:
        if self._httpd is None:
            raise AccelflowError("the REST server is not running")
        host, port = self._httpd.server_address[:2]
        host = str(host)
        return f"http://{'[' + host + ']' if ':' in host else host}:{port}/"

    @property
    def ui_url(self) -> str:
        """The web UI's link, with the token (as Jupyter prints it)."""
        return f"{self.url}?token={self.token}"

    @property
    def unauthorized(self) -> str:
        """The 401's text: where this server's token is to be found (:data:`UNAUTHORIZED`,
        :data:`UNAUTHORIZED_EMBEDDED` or :data:`UNAUTHORIZED_CONFIGURED`)."""
        if not self.embedded:
            return UNAUTHORIZED
        text = UNAUTHORIZED_EMBEDDED if self.token_generated else UNAUTHORIZED_CONFIGURED
        return text.format(url=self.url)

    def start(self, *, announce: Callable[[str], None] | None = None) -> str:
        """Bind and serve in a daemon thread; returns (and announces) the URL.

        Raises:
            ConfigError: the address/port cannot be bound (names ``rest.port``/``rest.address``).
        """
        handler = type("Handler", (_Handler,), {"server_ref": self})
        server = BoundedHTTPServer6 if ":" in self.address else BoundedHTTPServer
        try:
            self._httpd = server((self.address, self.port), handler)
        except OSError as exc:
            key = "rest.port" if exc.errno in (98, 13) else "rest.address"
            raise ConfigError(
                f"cannot listen on {self.address}:{self.port}: {exc.strerror or exc}; choose "
                "another rest.port (0 picks a free one) or rest.address", key=key,
            ) from exc
        self._hosts = _allowed_hosts(self.address, str(self._httpd.server_address[0]),
                                     int(self._httpd.server_address[1]))
        self._thread = threading.Thread(target=self._httpd.serve_forever, kwargs={"poll_interval": 0.2},
                                        daemon=True, name="accelflow-rest")
        self._thread.start()
        say = announce or (lambda line: print(line, file=sys.stderr, flush=True))
        if not _is_loopback(self.address):
            say(f"accelflow: warning: the REST API listens on {self.address} (rest.address), "
                "reachable from other machines; it is plain HTTP: put it behind TLS or use an SSH tunnel")
        # a token the user did not choose is shown once, in the link (the session cluster's log
        # sits in the 0700 state directory); a configured one is not repeated
        say(f"accelflow: REST API and web UI at {self.ui_url if self.token_generated else self.url}")
        return self.url

    def stop(self) -> None:
        if self._httpd is not None:
            self._httpd.shutdown()
            self._httpd.server_close()
        if self._thread is not None:
            self._thread.join(5)

    # -- checks, in order, before any route ------------------------------------------------
    def check(self, method: str, path: str, headers: Message) -> None:
        """Refuse a foreign ``Host`` (403), a foreign ``Origin`` on a write (403), a missing or
        wrong token (401); nothing is looked up before these pass."""
        host = (headers.get("Host") or "").strip().lower()
        if self._hosts is not None and host not in self._hosts:
            raise HttpError(HTTPStatus.FORBIDDEN, f"Host {host or '(none)'!r} is not this server "
                            f"(expected one of {', '.join(sorted(self._hosts))}); open the URL the "
                            "cluster printed")
        if method not in _SAFE_METHODS:
            origin = headers.get("Origin")
            if origin is not None and origin.strip().lower() != f"http://{host}":
                raise HttpError(HTTPStatus.FORBIDDEN, f"cross-origin {method} from {origin!r} "
                                "refused: only this server's own web UI may change jobs")
            if (headers.get("Sec-Fetch-Site") or "same-origin").lower() not in ("same-origin", "none"):
                raise HttpError(HTTPStatus.FORBIDDEN, f"cross-site {method} refused: only this "
                                "server's own web UI may change jobs")
        if path in _STATIC and method in _SAFE_METHODS:
            return
        scheme, _, given = (headers.get("Authorization") or "").partition(" ")
        if scheme.lower() != "bearer" or not hmac.compare_digest(given.strip().encode(), self.token.encode()):
            raise HttpError(HTTPStatus.UNAUTHORIZED, self.unauthorized,
                            {"WWW-Authenticate": 'Bearer realm="accelflow"'})

    # -- routes --------------------------------------------------------------------------------
    def get(self, path: str) -> tuple[bytes, str]:
        if path in _STATIC:
            name, ctype = _STATIC[path]
            return resources.files(__package__).joinpath("ui", name).read_bytes(), ctype
        view = cluster_view(self.jobmanager)
        if path == "/metrics":
            return render_metrics(view), CONTENT_TYPE
        if path == "/v1/overview":
            return _json(view["overview"])
        if path == "/v1/taskexecutors":
            return _json({"taskexecutors": view["taskexecutors"]})
        if path == "/v1/jobs":
            return _json({"jobs": [job_summary(j) for j in view["jobs"]]})
        match = _JOB.match(path)
        if match and match["rest"] not in _POSTS:
            job = _find_job(view, match["id"])
            if match["rest"] == "/checkpoints":
                return _json(job["checkpoints"])
            return _json(pending_view(job) if match["rest"] == "/pending" else job)
        savepoint = _SAVEPOINT.match(path)
        if savepoint:
            _find_job(view, savepoint["id"])
            try:
                return _json(self.savepoints.status(savepoint["id"], savepoint["rid"]))
            except KeyError:
                raise HttpError(HTTPStatus.NOT_FOUND, f"no savepoint request {savepoint['rid']} "
                                f"of {savepoint['id']}") from None
        if match or FAULTS.match(path):
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{path} accepts POST only", {"Allow": "POST"})
        raise HttpError(HTTPStatus.NOT_FOUND, f"no such path: {path}")

    def post(self, path: str, body: bytes = b"") -> tuple[HTTPStatus, bytes]:
        match = _JOB.match(path)
        if match and match["rest"] in ("/savepoints", "/stop"):
            return self._savepoint(match["id"], match["rest"] == "/stop", body)
        if match and match["rest"] == "/cancel":
            try:
                accepted = self.jobmanager.cancel(match["id"])
            except KeyError:
                raise HttpError(HTTPStatus.NOT_FOUND, f"no such job: {match['id']}") from None
            if not accepted:
                state = self.jobmanager.jobs[match["id"]].state
                raise HttpError(HTTPStatus.CONFLICT, f"{match['id']} has already ended ({state})")
            return HTTPStatus.ACCEPTED, _json({"job": match["id"], "cancel_requested": True})[0]
        fault = FAULTS.match(path)
        if fault:
            return inject_fault(self.jobmanager, fault["id"], body)
        if path in _STATIC or path in _GET_ROUTES or match or _SAVEPOINT.match(path):
            raise HttpError(HTTPStatus.METHOD_NOT_ALLOWED, f"{path} accepts GET only", {"Allow": "GET"})
        raise HttpError(HTTPStatus.NOT_FOUND, f"no such path: {path}")


    def _savepoint(self, job_id: str, stop: bool, body: bytes) -> tuple[HTTPStatus, bytes]:
        """Flink's ``POST /jobs/:id/savepoints`` and ``/jobs/:id/stop``: 202 and a request id."""
        fields = _savepoint_request(body, stop)
        target = fields.get("targetDirectory" if stop else "target-directory")
        kind = "stop" if stop else ("cancel" if fields.get("cancel-job") else "savepoint")
        try:
            request_id = self.savepoints.trigger(job_id, target, kind=kind)
        except UnknownJob as exc:
            raise HttpError(HTTPStatus.NOT_FOUND, str(exc)) from None
        except JobNotRunning as exc:
            raise HttpError(HTTPStatus.CONFLICT, str(exc)) from None
        except CheckpointError as exc:
            raise HttpError(HTTPStatus.BAD_REQUEST, str(exc)) from None
        return HTTPStatus.ACCEPTED, _json({"request-id": request_id, "job": job_id, "kind": kind})[0]


def _savepoint_request(body: bytes, stop: bool) -> dict[str, Any]:
    """The checked JSON body of a savepoint or stop request (empty: all defaults).

    Raises:
        HttpError: 400 naming the field at fault.
    """
    where = "POST /v1/jobs/{id}/" + ("stop" if stop else "savepoints")
    allowed = {"targetDirectory": str, "drain": bool} if stop else {"target-directory": str, "cancel-job": bool}
    try:
        fields = json.loads(body.decode("utf-8")) if body.strip() else {}
    except (UnicodeDecodeError, ValueError) as exc:
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{where}: the body is not JSON ({exc})") from None
    if not isinstance(fields, dict):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{where}: the body must be a JSON object")
    for name, value in fields.items():
        if name not in allowed:
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{where}: unknown field {name!r}; expected "
                            + " and ".join(repr(a) for a in allowed))
        if value is not None and not isinstance(value, allowed[name]):
            raise HttpError(HTTPStatus.BAD_REQUEST, f"{where}: {name!r} must be "
                            f"{'text' if allowed[name] is str else 'true or false'}, got {value!r}")
    if fields.get("drain"):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{where}: 'drain' is not supported (accelflow has "
                        "no event time to advance); leave it out or false")
    target = fields.get("targetDirectory" if stop else "target-directory")
    if target is not None and ("://" not in target and not target.startswith("/")):
        raise HttpError(HTTPStatus.BAD_REQUEST, f"{where}: the target directory {target!r} must "
                        "be an absolute path or a URL (the cluster's working directory is not yours)")
    return fields


class _Handler(RequestHandler):
    server_ref: RestServer
    server_version = "accelflow"
    sys_version = ""

    def do_GET(self) -> None:  # noqa: N802 (http.server's naming)
        self._serve(lambda path: (HTTPStatus.OK, *self.server_ref.get(path)))

    def do_POST(self) -> None:  # noqa: N802
        self._serve(lambda path: (*self.server_ref.post(path, self._body()), "application/json"))

    def _body(self) -> bytes:
        """The request body (read after the checks; the waiting room has it whole), at most
        :data:`MAX_BODY` bytes, framed by ``Content-Length`` only."""
        if self.headers.get("Transfer-Encoding") is not None:
            raise HttpError(HTTPStatus.LENGTH_REQUIRED, "a request body must come with "
                            f"Content-Length (at most {MAX_BODY} bytes), not Transfer-Encoding: "
                            f"{self.headers['Transfer-Encoding']}")
        length = content_length(self.headers.get("Content-Length"))
        if length is None:
            raise HttpError(HTTPStatus.BAD_REQUEST, "Content-Length is not a number")
        if length > MAX_BODY:
            raise HttpError(HTTPStatus.REQUEST_ENTITY_TOO_LARGE,
                            f"the body may have at most {MAX_BODY} bytes, not {length}")
        return self.rfile.read(length) if length else b""

    def _other(self) -> None:
        self._serve(lambda path: _raise(HttpError(
            HTTPStatus.METHOD_NOT_ALLOWED, f"method {self.command} is not allowed",
            {"Allow": "GET, POST"},
        )))

    do_PUT = do_DELETE = do_PATCH = _other  # noqa: N815

    def _serve(self, route: Callable[[str], tuple[HTTPStatus, bytes, str]]) -> None:
        path = self.path.split("?", 1)[0]
        headers: dict[str, str] = {}
        try:
            self.server_ref.check(self.command, path, self.headers)
            status, body, ctype = route(path)
        except HttpError as exc:
            status, (body, ctype), headers = exc.status, _json({"error": exc.message}), exc.headers
        except AccelflowError as exc:
            status, (body, ctype) = HTTPStatus.INTERNAL_SERVER_ERROR, _json({"error": str(exc)})
        except Exception as exc:  # never take the server down; say what broke
            status, (body, ctype) = HTTPStatus.INTERNAL_SERVER_ERROR, _json(
                {"error": f"internal error: {type(exc).__name__}: {exc}"})
        self.send_response(status)
        self.send_header("Content-Type", ctype)
        self.send_header("Content-Length", str(len(body)))
        for name, value in {**SAFE_HEADERS, **headers}.items():
            self.send_header(name, value)
        self.end_headers()
        self.wfile.write(body)

    def handle_one_request(self) -> None:
        try:
            super().handle_one_request()
        except ConnectionError as exc:  # the client went away: one line, no traceback
            log_dropped(self.client_address, exc)
            self.close_connection = True

    def log_message(self, format: str, *args: Any) -> None:  # quiet: no line per poll
        pass


def _raise(exc: Exception) -> tuple[HTTPStatus, bytes, str]:
    raise exc


def _json(value: Any) -> tuple[bytes, str]:
    return json.dumps(value, indent=1).encode(), "application/json"


def _find_job(view: View, job_id: str) -> View:
    for job in view["jobs"]:
        if job["id"] == job_id:
            return dict(job)
    raise HttpError(HTTPStatus.NOT_FOUND, f"no such job: {job_id}")


def _allowed_hosts(configured: str, bound: str, port: int) -> frozenset[str] | None:
    """The ``Host`` values that name this server; None for a wildcard bind (any name: the token
    guards it)."""
    if configured in _WILDCARDS or bound in _WILDCARDS:
        return None
    names = {configured, bound}
    if _is_loopback(configured) or _is_loopback(bound):
        names |= {"localhost", "127.0.0.1", "::1"}
    hosts = set()
    for name in names:
        shown = f"[{name}]" if ":" in name else name
        hosts.add(f"{shown}:{port}".lower())
        if port == 80:
            hosts.add(shown.lower())
    return frozenset(hosts)


def _is_loopback(address: str) -> bool:
    if address == "localhost":
        return True
    try:
        return ipaddress.ip_address(address).is_loopback
    except ValueError:
        return False
