"""Connecting to Ray: a new local instance when ``ray.address`` is unset, or the cluster at
``ray.address`` within ``ray.connect-timeout``.

Ray's own ``ray.init`` reads ``RAY_ADDRESS`` and the address of the last cluster started on
this host when no address is given, and retries an unreachable GCS for minutes, printing
warnings and ignoring SIGINT. So: an unset ``ray.address`` starts a local instance
(``address="local"``, with ``RAY_ADDRESS`` hidden from it), and a set one is first probed with a
plain TCP connection and then joined in a thread the client abandons after the timeout.
"""

from __future__ import annotations

import importlib
import logging
import os
import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from accelflow._errors import DeploymentError, MissingDependencyError

RAY_ADDRESS_ENV_VAR = "RAY_ADDRESS"
CLIENT_SCHEME = "ray://"
_JOIN_POLL_S = 0.2
_NOT_RESOURCES = ("memory", "object_store_memory")


@contextmanager
def without_ray_address() -> Iterator[None]:
    """``RAY_ADDRESS`` unset inside the block (a local instance must not inherit it)."""
    saved = os.environ.pop(RAY_ADDRESS_ENV_VAR, None)
    try:
        yield
    finally:
        if saved is not None:
            os.environ[RAY_ADDRESS_ENV_VAR] = saved


def gcs_host_port(address: str) -> tuple[str, int] | None:
    """The host and port ``address`` stands for, or ``None`` when it cannot be told here
    (``auto`` with no cluster known on this host: ``ray.init`` then says so itself).

    Example:
        >>> gcs_host_port("ray://10.0.0.5:10001"), gcs_host_port("[::1]:6379")
        (('10.0.0.5', 10001), ('::1', 6379))
    """
    if address == "auto":
        try:
            from ray._private import services

            address = services.canonicalize_bootstrap_address(address) or ""
        except Exception:  # no cluster found, or a private API that changed
            return None
    address = address.split("://", 1)[-1].rstrip("/")
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit():
        return None
    return host.strip("[]"), int(port)


def probe(address: str, timeout: float) -> None:
    """Fail unless something accepts a TCP connection at ``address``'s host and port.

    Raises:
        DeploymentError: naming the address, the reason and ``ray.connect-timeout``.
    """
    target = gcs_host_port(address)
    if target is None:
        return
    try:
        with socket.create_connection(target, timeout=max(timeout, 0.1)):
            pass
    except OSError as exc:
        reason = "timed out" if isinstance(exc, TimeoutError) else (exc.strerror or str(exc))
        raise DeploymentError(
            f"ray.address {address!r}: no Ray cluster answers at {target[0]}:{target[1]} "
            f"({reason}, ray.connect-timeout {timeout:g} s). Start one (ray start --head), fix "
            "ray.address, or leave it unset to start a local Ray instance"
        ) from exc


def is_client_address(address: str | None) -> bool:
    """Whether ``address`` is a Ray client address (``ray://host:port``)."""
    return bool(address) and str(address).startswith(CLIENT_SCHEME)


def in_client_mode(ray: Any, address: str | None = None) -> bool:
    """Whether this process is connected to Ray as a Ray client (over ``ray://``)."""
    try:
        from ray.util.client import ray as client_ray

        return bool(client_ray.is_connected())  # type: ignore[no-untyped-call]
    except Exception:  # an API that moved: the address tells
        return is_client_address(address)


def check_client_dependencies(address: str) -> None:
    """Fail unless what Ray's client mode imports (``grpcio``, the ``ray[client]`` extra) is
    installed, when ``address`` is a ``ray://`` one.

    Raises:
        MissingDependencyError: naming the address and accelflow's ``ray`` extra.
    """
    if not is_client_address(address):
        return
    try:
        importlib.import_module("grpc")  # what ray.util.client needs: the ray[client] extra
    except ImportError as exc:
        raise MissingDependencyError(f"ray.address {address!r} (Ray client mode, grpcio)",
                                     extra="ray") from exc


class _QuietSigterm(logging.Filter):
    def filter(self, record: logging.LogRecord) -> bool:
        return "not the main thread" not in record.getMessage()


def join_cluster(ray: Any, address: str, timeout: float, **options: Any) -> None:
    """``ray.init(address=address)``, failing after ``timeout`` s instead of hanging.

    Raises:
        MissingDependencyError: a ``ray://`` address without what Ray's client mode needs.
        DeploymentError: the address is unreachable, or the cluster did not answer in time
            (the connecting thread is then abandoned), or ``ray.init`` refused it.
    """
    started = time.monotonic()
    check_client_dependencies(address)
    probe(address, timeout)
    failure: list[BaseException] = []

    def connect() -> None:
        try:
            ray.init(address=address, **options)
        except BaseException as exc:  # reported by the waiting thread
            failure.append(exc)

    quiet = _QuietSigterm()
    worker_log = logging.getLogger("ray._private.worker")
    worker_log.addFilter(quiet)
    try:
        thread = threading.Thread(target=connect, daemon=True, name="accelflow-ray-connect")
        thread.start()
        while thread.is_alive() and time.monotonic() - started < timeout:
            thread.join(_JOIN_POLL_S)  # short waits: SIGINT still interrupts the client
    finally:
        worker_log.removeFilter(quiet)
    if thread.is_alive():
        raise DeploymentError(
            f"ray.address {address!r}: the Ray cluster did not answer within {timeout:g} s "
            "(ray.connect-timeout). Check that it is a Ray head's GCS address (ray status "
            "prints it) and that this host can reach it, or raise ray.connect-timeout"
        )
    if failure:
        exc = failure[0]
        first = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
        raise DeploymentError(f"ray.address {address!r}: Ray could not connect: {first}") from exc


def ray_view_of_free_resources(ray: Any, *, client: bool = False) -> list[str]:
    """One line per alive node: free/total of every resource Ray schedules by. Free amounts
    Ray does not tell (``client``: over ``ray://``, or a private API that changed) are
    written ``unknown``, never 0."""
    free_by_node: dict[str, dict[str, float]] | None = None
    if not client:
        from ray._private import state

        try:
            free_by_node = state.available_resources_per_node()  # type: ignore[no-untyped-call]
        except Exception:  # a private API: totals only
            free_by_node = None
    lines = []
    for node in ray.nodes():
        if not node.get("Alive"):
            continue
        total: dict[str, float] = node.get("Resources", {})
        free = None if free_by_node is None else free_by_node.get(node["NodeID"], {})
        parts = [
            f"{name} {'unknown' if free is None else num(free.get(name, 0.0))}/{num(amount)}"
            for name, amount in sorted(total.items())
            if name not in _NOT_RESOURCES and not name.startswith("node:")
            and not name.startswith("accelerator_type:")
        ]
        lines.append(f"node {node.get('NodeManagerAddress', '?')} ({node['NodeID'][:8]}): "
                     + (", ".join(parts) or "no resources"))
    return lines


def num(x: float) -> str:
    """``x`` as Ray prints amounts: ``2``, ``0.5``."""
    return f"{x:g}"
