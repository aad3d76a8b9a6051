"""A stand-in TaskExecutor for the multi-process tests: allocates GPUs, then stays alive.

    python owner_process.py cli COORDINATION_FILE AMOUNT [EXTRA CLI ARGS...]
        runs `python -m accelflow.resources.gpu._discovery_cli` as its child (so this process
        is the owner, as a TaskExecutor is when it runs a discovery script)
    python owner_process.py driver COORDINATION_FILE AMOUNT
        allocates in process through GPUDriver (coordination on)
    python owner_process.py script COORDINATION_FILE AMOUNT SCRIPT
        allocates through GPUDriver with SCRIPT as discovery script, given the arguments
        "--enable-coordination-mode --coordination-file COORDINATION_FILE"

It prints one JSON line: {"pid": ..., "gpus": ["3"], "error": null}, then waits for a line on
stdin: "release" releases cleanly (driver mode) and exits; EOF or anything else just exits.
"""

from __future__ import annotations

import json
import shlex
import subprocess
import sys


def allocate_cli(
    coordination_file: str, amount: str, extra: list[str]
) -> tuple[list[str], str | None]:
    argv = [
        sys.executable,
        "-m",
        "accelflow.resources.gpu._discovery_cli",
        amount,
        "--enable-coordination-mode",
        "--coordination-file",
        coordination_file,
        *extra,
    ]
    done = subprocess.run(argv, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        return [], f"exit {done.returncode}: {done.stderr.strip()}"
    return [i for i in done.stdout.strip().split(",") if i], None


def main() -> None:
    mode, coordination_file, amount, *extra = sys.argv[1:]
    driver = None
    if mode == "cli":
        gpus, error = allocate_cli(coordination_file, amount, extra)
    else:
        from accelflow import AccelflowError
        from accelflow.resources.gpu import GPUDriverFactory

        params = (
            {
                "discovery-script.path": extra[0],
                "discovery-script.args": "--enable-coordination-mode --coordination-file "
                + shlex.quote(coordination_file),
            }
            if mode == "script"
            else {"coordination-file": coordination_file}
        )
        driver = GPUDriverFactory().create_external_resource_driver(params)
        try:
            gpus, error = (
                sorted(i["index"] for i in driver.retrieve_resource_info(int(amount))),
                None,
            )
        except AccelflowError as exc:
            gpus, error = [], str(exc)
    print(json.dumps({"pid": __import__("os").getpid(), "gpus": gpus, "error": error}), flush=True)
    command = sys.stdin.readline().strip()
    if command == "release" and driver is not None:
        driver.close()


if __name__ == "__main__":
    main()
