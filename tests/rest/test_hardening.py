"""The REST API and the session cluster under attack (issue 16, items 1, 6 and 11; issue 25,
item 22): a hostile web page, DNS rebinding, idle and half-open connections, slow-loris
requests, chunked and oversized requests, clients that vanish mid-response, a SIGKILLed
cluster's leftovers."""

from __future__ import annotations

import json
import os
import resource
import select
import signal
import socket
import struct
import threading
import urllib.parse
from pathlib import Path
from typing import Any

import psutil
import pytest
from rest_jobs import Slowly, discard, identity
from rest_support import Session, cli, start_session, start_session_with, stop_and_check, wait_until

from accelflow import Environment, JobCancelledError
from accelflow.runtime.rest._rest import UNAUTHORIZED


def _running_job() -> Any:
    env = Environment()
    env.from_source(Slowly()).map(identity, name="classify").add_sink(discard)
    return env.execute_async("target")


def _state(session: Session) -> Path:
    (path,) = (session.tmp / "state").glob("session-*.json")
    return path


def test_a_hostile_page_cannot_cancel_a_job_or_read_its_errors(session: Session) -> None:
    client = _running_job()
    job = client.job_id
    port = urllib.parse.urlsplit(session.url).port
    own = f"http://127.0.0.1:{port}"
    cancel = f"/v1/jobs/{job}/cancel"
    form = {"Content-Type": "text/plain"}  # what a plain <form enctype="text/plain"> sends
    try:
        # a form on another site: refused for its Origin, before the token is even looked at
        status, body = session.raw(cancel, "POST", {**form, "Origin": "http://evil.example"}, b"x=1")
        assert status == 403 and body["error"].startswith("cross-origin POST from 'http://evil.example' refused")
        status, body = session.raw(cancel, "POST", {**form, "Sec-Fetch-Site": "cross-site"}, b"x=1")
        assert status == 403 and body["error"].startswith("cross-site POST refused")
        # the token does not make a foreign origin acceptable
        bearer = {"Authorization": f"Bearer {session.token}"}
        assert session.raw(cancel, "POST", {**bearer, "Origin": "http://evil.example"})[0] == 403
        # no Origin (curl, another local user) and no token: 401
        assert session.raw(cancel, "POST", form, b"x=1") == (401, {"error": UNAUTHORIZED})
        # DNS rebinding: evil.example resolves to 127.0.0.1, the page is same-origin with itself
        rebound = {"Host": f"evil.example:{port}", "Origin": f"http://evil.example:{port}"}
        status, body = session.raw(cancel, "POST", {**rebound, **bearer})
        assert status == 403 and body["error"].startswith(f"Host 'evil.example:{port}' is not this server")
        # refused before any lookup: an unknown job is 403, not 404
        assert session.raw("/v1/jobs/job-999", headers={"Host": f"evil.example:{port}"})[0] == 403
        assert session.raw("/v1/overview", headers={"Host": f"evil.example:{port}"})[0] == 403
        # nothing was cancelled
        assert session.get(f"/v1/jobs/{job}")["state"] == "RUNNING"
        # job data, and the user's error text in it, needs the token; the UI shell does not
        for path in ("/v1/jobs", f"/v1/jobs/{job}", f"/v1/jobs/{job}/pending", "/metrics", "/v1/overview"):
            assert session.raw(path)[0] == 401, path
            assert session.raw(path, headers={"Authorization": "Bearer wrong"})[0] == 401, path
        status, page = session.raw("/")
        assert status == 200 and "<title>accelflow</title>" in page
        # the cluster's own UI (same origin, with the token) may cancel; localhost names it too
        ui = {**bearer, "Origin": own, "Sec-Fetch-Site": "same-origin"}
        assert session.raw(f"/v1/jobs/{job}", headers={**bearer, "Host": f"localhost:{port}"})[0] == 200
        assert session.raw(cancel, "POST", ui) == (202, {"job": job, "cancel_requested": True})
    finally:
        client.cancel()
        with pytest.raises(JobCancelledError):
            client.wait(30)


def test_every_cluster_gets_a_random_token_kept_in_its_private_state_file(session: Session) -> None:
    state = _state(session)
    assert oct(state.stat().st_mode & 0o777) == "0o600"
    info = json.loads(state.read_text(encoding="utf-8"))
    assert info["token"] == session.token and len(session.token) >= 32
    assert oct(session.log.stat().st_mode & 0o777) == "0o600"  # the log shows the UI link
    assert session.ui_url in session.log.read_text(encoding="utf-8")
    out = cli(session.env, "cluster", "status")
    assert out.returncode == 0, out.stderr
    assert f"  web UI: {session.url}?token={session.token}\n" in out.stdout


def _rlimit_256() -> None:  # runs in the CLI child; the session cluster inherits it
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    resource.setrlimit(resource.RLIMIT_NOFILE, (256, hard))


def _reset(sock: socket.socket) -> None:
    """Close with RST (SO_LINGER 0): the client vanishes."""
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
    sock.close()


def test_idle_connections_do_not_starve_the_api_and_dropped_clients_log_one_line(tmp_path: Path) -> None:
    session = start_session_with(tmp_path, _rlimit_256)  # 256 fds: 300 connections would exhaust it
    port = urllib.parse.urlsplit(session.url).port
    idle: list[socket.socket] = []
    try:
        for _ in range(300):  # half-open: connected, never a byte
            idle.append(socket.create_connection(("127.0.0.1", port), timeout=10))
        assert session.get("/v1/overview")["taskexecutors"] == 1
        assert session.get("/v1/jobs") == {"jobs": []}
        for sock in idle:
            sock.close()
        idle.clear()
        for i in range(10):  # gone mid-request (headers never finished) and mid-response
            partial = socket.create_connection(("127.0.0.1", port), timeout=10)
            partial.sendall(b"GET /ui/app.js HTTP/1.0\r\n")
            _reset(partial)
            whole = socket.create_connection(("127.0.0.1", port), timeout=10)
            whole.sendall(f"GET /ui/app.js HTTP/1.0\r\nHost: 127.0.0.1:{port}\r\n\r\n".encode())
            _reset(whole)
        def dropped() -> list[str]:
            return [ln for ln in session.log.read_text(encoding="utf-8").splitlines()
                    if "dropped the connection" in ln]

        lines = wait_until(lambda: len(dropped()) >= 10 and dropped(), "a line per dropped connection")
        assert all(ln.split("REST: ")[1].startswith("127.0.0.1:") for ln in lines), lines
        assert session.get("/v1/overview")["taskexecutors"] == 1
        log = session.log.read_text(encoding="utf-8")
        assert "Traceback" not in log and "BrokenPipeError:" not in log, log
    finally:
        for sock in idle:
            sock.close()
        stop_and_check(session)


def test_a_sigkilled_cluster_leaves_nothing_after_the_next_status(tmp_path: Path) -> None:
    session = start_session(tmp_path)
    state = _state(session)
    socket_dir = Path(json.loads(state.read_text(encoding="utf-8"))["socket"]).parent
    assert socket_dir.name.startswith("accelflow-session-")
    assert (socket_dir / "owner").read_text(encoding="ascii").startswith(f"{session.pid} ")
    processes = session.processes()
    for p in processes:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(processes, timeout=10)
    assert socket_dir.exists() and state.exists()  # what SIGKILL leaves
    out = cli(session.env, "cluster", "status")
    assert out.returncode == 1
    assert f"accelflow: removed the stale state file {state}: its session cluster at {session.url} is gone " \
           f"(pid {session.pid} has exited); nothing was signalled\n" in out.stderr
    assert f"accelflow: removed the socket directory {socket_dir} of a session cluster that died " \
           f"(pid {session.pid})\n" in out.stderr
    assert not socket_dir.exists() and not state.exists()
    assert "no session cluster is running" in out.stderr


def test_the_sweep_leaves_a_live_cluster_alone(session: Session) -> None:
    state = _state(session)
    socket_dir = Path(json.loads(state.read_text(encoding="utf-8"))["socket"]).parent
    out = cli(session.env, "cluster", "status")
    assert out.returncode == 0 and "removed" not in out.stderr, out.stderr
    assert socket_dir.is_dir() and state.exists()
    assert os.stat(socket_dir).st_mode & 0o777 == 0o700


def _exchange(port: int, data: bytes) -> tuple[int, bytes]:
    """Send ``data`` as is on a new connection; the response's status and everything after
    its status line, read until the server closes."""
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(data)
        return _response(sock)


def _response(sock: socket.socket) -> tuple[int, bytes]:
    sock.settimeout(30)
    received = b""
    while chunk := sock.recv(65536):
        received += chunk
    assert received.startswith(b"HTTP/1.0 "), received
    return int(received.split()[1]), received


def _trickle(port: int, out: dict[str, Any]) -> None:
    """Send a request one byte at a time, 0.2 s apart, until the server answers: a per-read
    timeout never ends this; only a deadline on the whole request does. ``out`` gets how many
    bytes went out of how many, and the answer (or the error)."""
    header = f"GET /v1/overview HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nX-Slow: {'a' * 200}\r\n\r\n".encode()
    out["whole"], out["sent"] = len(header), 0
    try:
        with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
            while out["sent"] < len(header) and not select.select([sock], [], [], 0.2)[0]:
                sock.sendall(header[out["sent"]:out["sent"] + 1])
                out["sent"] += 1
            out["answer"] = _response(sock)
    except Exception as exc:  # reported by the test, not as a thread's warning
        out["answer"] = exc


def test_half_open_requests_cost_no_worker(session: Session) -> None:
    """Issue 25, item 22: 40 connections that send a request line and one header (or headers
    and part of a body) and then nothing, and one that trickles, stop no other client; each is
    answered 408 and closed when its one deadline passes."""
    port = urllib.parse.urlsplit(session.url).port
    assert port is not None
    host = f"Host: 127.0.0.1:{port}\r\n"
    trickled: dict[str, Any] = {}
    trickler = threading.Thread(target=_trickle, args=(port, trickled))
    trickler.start()
    half_open = []
    for i in range(40):
        sock = socket.create_connection(("127.0.0.1", port), timeout=30)
        sock.sendall((f"GET /v1/overview HTTP/1.1\r\n{host}" if i % 2 else
                      f"POST /v1/jobs/job-1/cancel HTTP/1.1\r\n{host}Content-Length: 100\r\n\r\n{{").encode())
        half_open.append(sock)
    try:
        assert session.get("/v1/overview")["taskexecutors"] == 1  # urllib gives up after 10 s
        status, page = session.raw("/")
        assert status == 200 and "<title>accelflow</title>" in page
        for sock in half_open:
            status, answer = _response(sock)
            assert status == 408 and b"did not arrive whole within 10 s" in answer, answer
        trickler.join(60)
        assert trickled["answer"][0] == 408 and trickled["sent"] < trickled["whole"], trickled
    finally:
        for sock in half_open:
            sock.close()


def test_request_framing_chunked_bodies_and_oversized_headers(session: Session) -> None:
    """A chunked body is refused with 411 (it ran as ``{}`` before), a bad Content-Length with
    400, a body over 64 KiB with 413 (unread), headers over 32 KiB with 431."""
    port = urllib.parse.urlsplit(session.url).port
    assert port is not None
    head = f"Host: 127.0.0.1:{port}\r\nAuthorization: Bearer {session.token}\r\n"
    body = b'{"target-directory": "/tmp/x"}'
    chunked = (f"POST /v1/jobs/job-999/savepoints HTTP/1.1\r\n{head}Transfer-Encoding: chunked\r\n\r\n"
               f"{len(body):x}\r\n").encode() + body + b"\r\n0\r\n\r\n"
    status, answer = _exchange(port, chunked)
    assert status == 411, answer
    assert answer.endswith(b'"a request body must come with Content-Length (at most 65536 bytes), '
                           b'not Transfer-Encoding: chunked"\n}'), answer
    post = f"POST /v1/jobs/job-999/savepoints HTTP/1.1\r\n{head}"
    assert _exchange(port, f"{post}Content-Length: 5_0\r\n\r\n{{}}".encode())[0] == 400
    status, answer = _exchange(port, f"{post}Content-Length: 100000\r\n\r\n".encode())
    assert status == 413 and b"at most 65536 bytes, not 100000" in answer
    status, answer = _exchange(port, f"GET /v1/overview HTTP/1.1\r\n{head}X-Big: {'a' * 40000}\r\n\r\n".encode())
    assert status == 431 and b"may have at most 32768 bytes" in answer, answer
    status, answer = _exchange(port, f"{post}Content-Length: {len(body)}\r\n\r\n".encode() + body)
    assert status == 404 and b"no such job: job-999" in answer  # the same request, framed: served
