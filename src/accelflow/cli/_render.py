"""``accelflow render kubernetes|yarn``: print what a cluster manager needs to run a job.

Everything is rendered and checked before anything is written; ``-o FILE`` replaces the
file atomically (temp file in the same directory, then ``os.replace``).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import sys
import tempfile
from pathlib import Path
from typing import Any

from accelflow._errors import ConfigError
from accelflow.cli._common import add_config_options, load_cli_config
from accelflow.deploy import (
    DEFAULT_IMAGE,
    DEFAULT_JOB_PATH,
    dump_yaml,
    render_kubernetes,
    render_yarn,
)

_MANAGERS = {
    "kubernetes": (
        "print a ConfigMap and a batch/v1 Job, or a KubeRay RayCluster (YAML), for Kubernetes",
        "Render the config as Kubernetes manifests: a ConfigMap holding the config and a Job "
        "whose pod runs 'accelflow run --conf /etc/accelflow/accelflow-conf.yaml JOB' with the "
        "embedded local cluster, asking for cpu, memory and every external resource that has a "
        "kubernetes.config-key (or vendor), times local.number-taskmanager, in both requests "
        "and limits. With -D execution.target=ray: a KubeRay RayCluster instead of the Job "
        "(docs/ray.md). Apply with: accelflow render kubernetes ... | kubectl apply -f -",
    ),
    "yarn": (
        "print a YARN Services API spec (JSON) that runs the job on YARN",
        "Render the config as the JSON body of POST /app/v1/services (or for "
        "'yarn app -launch NAME FILE'): one container running 'accelflow run --conf "
        "conf/accelflow-conf.yaml JOB' with the "
        "embedded local cluster, asking for vcores, memory and every resource type that has a "
        "yarn.config-key, times local.number-taskmanager.",
    ),
}


_IMAGE_HELP = {
    "kubernetes": "container image with accelflow and the job installed; wins over "
    f"kubernetes.container.image (default: {DEFAULT_IMAGE})",
    "yarn": "Docker image with accelflow and the job installed (default: none; the command "
    "runs on the NodeManager host)",
}


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "render",
        help="print Kubernetes manifests or a YARN service spec that run a job",
        description="Render cluster-manager requests from the config. See docs/deployment.md.",
    )
    managers = parser.add_subparsers(dest="manager", metavar="MANAGER", required=True)
    for name, (help_text, description) in _MANAGERS.items():
        child = managers.add_parser(name, help=help_text, description=description)
        add_config_options(child)
        child.add_argument(
            "--job",
            metavar="SCRIPT",
            help=f"the job script's path inside the container (default: {DEFAULT_JOB_PATH})",
        )
        child.add_argument("--image", metavar="IMAGE", help=_IMAGE_HELP[name])
        child.add_argument(
            "-o", "--output", metavar="FILE", help="write to FILE (atomically) instead of stdout"
        )
        child.set_defaults(func=run_kubernetes if name == "kubernetes" else run_yarn)


def run_kubernetes(args: argparse.Namespace) -> int:
    config = load_cli_config(args)
    _check_output(args.output)
    text = dump_yaml(render_kubernetes(config, job=args.job, image=args.image))
    _emit(text, args.output)
    return 0


def run_yarn(args: argparse.Namespace) -> int:
    config = load_cli_config(args)
    _check_output(args.output)
    text = json.dumps(render_yarn(config, job=args.job, image=args.image), indent=2) + "\n"
    _emit(text, args.output)
    return 0


def _emit(text: str, output: str | None) -> None:
    if output is None:
        sys.stdout.write(text)
        sys.stdout.flush()
        return
    write_atomically(Path(output), text)


def _check_output(output: str | Path | None) -> None:
    """Refuse an unusable ``-o`` (checked before rendering too, so it is named, exit 2,
    whatever the renderer would have said).

    Raises:
        ConfigError: (key ``--output``) the directory is missing or ``output`` is a directory.
    """
    if output is None:
        return
    path = Path(output)
    if not path.parent.is_dir():
        raise ConfigError(
            f"directory {str(path.parent)!r} does not exist; create it first", key="--output"
        )
    if path.is_dir():
        raise ConfigError(f"{str(path)!r} is a directory; give a file name", key="--output")


def write_atomically(path: Path, text: str) -> None:
    """Replace ``path`` with ``text`` all at once: readers see the old file or the new one.

    Raises:
        ConfigError: (key ``--output``) the directory is missing or the file cannot be written.
    """
    _check_output(path)
    directory = path.parent
    try:
        fd, temp = tempfile.mkstemp(dir=directory, prefix=f".{path.name}.", suffix=".tmp")
    except OSError as exc:
        raise ConfigError(
            f"cannot write in {str(directory)!r}: {exc.strerror}", key="--output"
        ) from exc
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.chmod(temp, 0o666 & ~_umask())
        os.replace(temp, path)
    except BaseException as exc:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(temp)
        if isinstance(exc, OSError):
            raise ConfigError(
                f"cannot write {str(path)!r}: {exc.strerror}", key="--output"
            ) from exc
        raise


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask
