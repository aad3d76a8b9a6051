"""Fixtures of the REST tests; the helpers live in :mod:`rest_support`."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from rest_support import Session, start_session, stop_and_check


@pytest.fixture(scope="module")
def session(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Session]:
    """One session cluster (1 TaskExecutor, 4 slots, 2 fake GPUs) shared by a module's tests;
    the test process submits to it through ``accelflow run --cluster``'s code path."""
    from accelflow.runtime.client import ExecutionContext, use_context

    tmp = tmp_path_factory.mktemp("session")
    cluster = start_session(tmp)
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("ACCELFLOW_STATE_DIR", cluster.env["ACCELFLOW_STATE_DIR"])
        try:
            with use_context(ExecutionContext(cluster_url=cluster.url)):
                yield cluster
        finally:
            stop_and_check(cluster)
