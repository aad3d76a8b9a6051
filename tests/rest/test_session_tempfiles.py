"""A session cluster started with ``accelflow cluster start`` keeps its temporary files in
work directories of its own in ``$TMPDIR`` (its submission socket's, its TaskExecutors'),
and when the whole cluster is SIGKILLed (the OOM killer, a host's ``kill -9``), the next
``accelflow cluster`` command removes them. Before, the TaskExecutors' work directory
(configuration, sockets, the forkserver's socket) stayed for ever."""

from __future__ import annotations

import signal
from pathlib import Path

import psutil
from rest_support import Session, _environment, cli, gpu_definitions


def test_a_sigkilled_session_cluster_leaves_nothing_in_tmpdir_after_the_next_command(tmp_path: Path) -> None:
    tmpdir = tmp_path / "tmp"
    tmpdir.mkdir()
    env = {**_environment(tmp_path, 2), "TMPDIR": str(tmpdir)}
    session = Session(env, tmp_path, gpu_definitions(tmp_path))
    running = sorted(p.name[:-8] for p in tmpdir.iterdir())  # less mkdtemp's 8 random characters
    assert running == ["accelflow-", "accelflow-session-"]  # the TaskExecutors', the submission socket's
    processes = session.processes()
    for p in processes:
        p.send_signal(signal.SIGKILL)
    psutil.wait_procs(processes, timeout=10)
    assert len(list(tmpdir.iterdir())) == 2  # what SIGKILL leaves
    out = cli(env, "cluster", "status")
    assert out.returncode == 1 and "no session cluster is running" in out.stderr, out.stderr
    assert list(tmpdir.iterdir()) == []
