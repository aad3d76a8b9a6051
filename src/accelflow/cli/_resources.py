"""``accelflow resources``: validate the config and run the drivers as a TaskExecutor would.

Values people copy (UUIDs, PCI bus ids, factory paths) are never cut: a table wider than the
terminal (or than 80 columns when stdout is a pipe) is printed at its full width, and the
summary lines are not wrapped. Warnings go to stderr, ``accelflow: warning: ...``.
"""

from __future__ import annotations

import argparse
import json
from typing import Any

from rich.console import Console
from rich.markup import escape
from rich.measure import Measurement
from rich.table import Table
from rich.text import Text

from accelflow.cli._common import StdoutConsole, add_config_options, load_cli_config
from accelflow.resources import ExternalResourceInfoProvider, ResourceStatus
from accelflow.resources import list_driver_entry_points


def register(sub: Any) -> None:
    parser: argparse.ArgumentParser = sub.add_parser(
        "resources",
        help="validate the config and discover external resources as a TaskExecutor would",
        description="Validate the config, run each configured driver with its amount, and show "
        "what a TaskExecutor would see. Exits non-zero on a config error or, under "
        "on-discovery-failure: fail, a discovery failure.",
    )
    add_config_options(parser)
    parser.add_argument("--json", action="store_true", help="print JSON instead of a table")
    parser.add_argument(
        "--drivers", action="store_true", help="list the installed driver entry points and exit"
    )
    parser.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    if args.drivers:
        return _list_drivers(args.json)
    config = load_cli_config(args)
    with ExternalResourceInfoProvider.from_config(config) as provider:
        statuses = list(provider.statuses.values())
        if args.json:
            print(json.dumps({"resources": [s.to_dict() for s in statuses]}, indent=2))
        else:
            _print_table(statuses)
    return 0


def _list_drivers(as_json: bool) -> int:
    entries = list_driver_entry_points()
    if as_json:
        print(json.dumps([_ep(e) for e in entries], indent=2))
        return 0
    table = _table("name", "factory", "package")
    for e in entries:  # Text: names come from installed packages, not from our markup
        package = f"{e.distribution or '?'} {e.version or ''}".strip()
        table.add_row(Text(e.name), Text(e.value), Text(package))
    print_uncut(table)
    return 0


def _ep(e: Any) -> dict[str, Any]:
    return {"name": e.name, "value": e.value, "distribution": e.distribution, "version": e.version}


def _print_table(statuses: list[ResourceStatus]) -> None:
    console = StdoutConsole()
    if not statuses:
        console.print("No external resources configured (external-resources is empty or 'none').")
        return
    for status in statuses:
        spec = status.spec
        color = {"ok": "green", "no-driver": "yellow", "degraded": "red"}[status.status]
        console.print(
            f"[bold]{escape(spec.name)}[/]  amount {spec.amount}  "
            f"driver {escape(spec.driver_factory or '-')}  status [{color}]{status.status}[/]"
            f"  kubernetes {escape(spec.kubernetes_config_key or '-')}"
            f"  yarn {escape(spec.yarn_config_key or '-')}",
            highlight=False, soft_wrap=True,
        )
        # driver messages and properties are printed as plain text, never as rich markup
        # status.warnings were logged on stderr (accelflow: warning: ...) when discovered
        if status.message:
            console.print(Text(f"  {status.message}", style=color), soft_wrap=True)
        if status.infos:
            keys = sorted({key for info in status.infos for key in info.get_keys()})
            table = _table(*keys)
            for info in status.infos:
                table.add_row(*(Text(info.get_property(key) or "") for key in keys))
            print_uncut(table)


def _table(*headers: str) -> Table:
    """A table whose cells are never wrapped or cut (headers as plain text, not markup)."""
    table = Table()
    for header in headers:
        table.add_column(Text(header), no_wrap=True, overflow="ignore")
    return table


def print_uncut(table: Table, console: Console | None = None) -> None:
    """Print ``table`` at its natural width, wider than the terminal if need be, so no value
    (a UUID, a factory path) is ever truncated or ellipsized."""
    console = console or StdoutConsole()
    needed = Measurement.get(console, console.options.update_width(1 << 20), table).maximum
    if needed > console.width:
        console = StdoutConsole(file=console.file, width=needed, force_terminal=console.is_terminal)
    console.print(table)
