"""``c4p fabric discover``: ask the switches, write what they said, compare with the design.

Why a command: before a fabric carries jobs, an operator wants one command that reads the
targets file, talks to every switch (gNMI or SNMP, concurrently, with the deadlines and
retries of the targets file), writes the discovered fabric and, given the declared fabric,
lists every difference: missing, extra and miswired links, hosts on the wrong leaf, speed and
status mismatches. The declared fabric also fills what switches cannot tell (NIC addresses
when hosts do not advertise them, roles, hash profiles) unless ``--no-hints``; the report
says how many addresses came from LLDP, the declared fabric or the address plan.

Exit status: 0 when every target answered and nothing is in doubt; 1 when a target did not
answer, when the discovery has *findings* (a target that answered with no interfaces or no
LLDP neighbors, two target entries that are one switch, a switch under two names, a link seen
from one end only) or the comparison found differences (the report says which); 2 for
unusable input (``error: <file>: <field>: <reason>``), as every c4p command. An empty or
silently wrong fabric is the worst answer a controller can give, so doubt is never exit 0.

The targets file may also be gnmic's target file (``targets:`` a mapping), read as gnmic
reads it and as ``c4p serve`` reads it (:mod:`southbound.gnmic`).

Registered by :mod:`c4p.cli` as ``fabric discover``; :data:`discover_app` runs it on its own.
"""

from __future__ import annotations

from pathlib import Path
from typing import Annotated, Any

import typer
from rich.console import Console

from c4p.cli.common import guarded, progress
from c4p.cli.outputs import DATA_SUFFIXES, check_outputs
from c4p.files import load_fabric, load_model, save_fabric, write_json
from southbound.discovery import DiscoveryResult
from southbound.events import TargetHealth
from southbound.fleet import Fleet, TargetStatus
from southbound.targets import TargetsFile
from topology.compare import FabricComparison, compare_fabrics
from topology.generators.common import AddressPlan

PROBLEMS_SHOWN = 20

discover_app = typer.Typer(add_completion=False, pretty_exceptions_enable=False)
console = Console()


def report_json(
    result: DiscoveryResult,
    status: dict[str, TargetStatus],
    comparison: FabricComparison | None,
    output: Path | None,
) -> dict[str, Any]:
    """The machine-readable report (``--json``)."""
    fabric = result.fabric
    return {
        "fabric": {
            "name": fabric.name,
            "switches": len(fabric.switches),
            "hosts": len(fabric.hosts),
            "nic_ports": sum(1 for _ in fabric.nic_ports()),
            "links": len(fabric.links),
            "links_down": sum(1 for link in fabric.links if not link.usable),
        },
        "targets": {
            n: {"health": s.health.value, "error": s.last_error, "problems": s.problems}
            for n, s in sorted(status.items())
        },
        "problems": [p.model_dump() for p in result.problems],
        "findings": [p.model_dump() for p in result.findings],
        "address_sources": result.address_sources,
        "role_sources": result.role_sources,
        "kept_links": result.kept_links,
        "comparison": None
        if comparison is None
        else {"clean": comparison.clean, **comparison.model_dump(mode="json")},
        "output": None if output is None else str(output),
    }


def print_report(
    out: Console,
    result: DiscoveryResult,
    status: dict[str, TargetStatus],
    comparison: FabricComparison | None,
) -> None:
    fabric = result.fabric
    live = sum(1 for s in status.values() if s.health is TargetHealth.LIVE)
    out.print(f"[bold]discovered {fabric.name}[/]: {live}/{len(status)} targets answered")
    for name, s in sorted(status.items()):
        if s.health is not TargetHealth.LIVE:
            out.print(f"  [red]{s.health.value}[/] {name}: {s.last_error}", highlight=False)
    down = sum(1 for link in fabric.links if not link.usable)
    ports = sum(1 for _ in fabric.nic_ports())
    out.print(
        f"  switches: {len(fabric.switches)}   hosts: {len(fabric.hosts)}   NIC ports: {ports}"
        f"   links: {len(fabric.links)} ({down} not up)"
    )
    sources = ", ".join(f"{n} from {k}" for k, n in sorted(result.address_sources.items()))
    out.print(f"  NIC addresses: {sources or 'none'}", highlight=False)
    roles = ", ".join(f"{n} {k}" for k, n in sorted(result.role_sources.items()))
    out.print(f"  switch roles: {roles or 'none'}", highlight=False)
    if result.kept_links:
        out.print(f"  {result.kept_links} link(s) kept from the previous/declared fabric")
    if result.findings:
        out.print(f"[red]{len(result.findings)} finding(s) that make this fabric doubtful:[/]")
        for p in result.findings[:PROBLEMS_SHOWN]:
            out.print(f"  {p}", highlight=False)
        if len(result.findings) > PROBLEMS_SHOWN:
            out.print(f"  ... and {len(result.findings) - PROBLEMS_SHOWN} more (see --json)")
    others = [p for p in result.problems if p not in result.findings]
    if others:
        out.print(f"[yellow]{len(others)} problem(s) in what the switches answered:[/]")
        for p in others[:PROBLEMS_SHOWN]:
            out.print(f"  {p}", highlight=False)
        if len(others) > PROBLEMS_SHOWN:
            out.print(f"  ... and {len(others) - PROBLEMS_SHOWN} more (see --json)")
    if comparison is not None:
        if comparison.clean:
            out.print("[green]matches the declared fabric[/]")
        else:
            out.print(f"[red]{comparison.differences} difference(s) from the declared fabric:[/]")
            for line in comparison.lines():
                out.print(f"  {line}", highlight=False)


@discover_app.command("discover")
def fabric_discover(
    targets: Annotated[Path, typer.Option("--targets", help="Targets file (.yaml or .json).")],
    output: Annotated[
        Path | None, typer.Option("-o", "--output", help="Write the discovered fabric here.")
    ] = None,
    compare: Annotated[
        Path | None,
        typer.Option("--compare", help="Declared fabric file to compare the discovery with."),
    ] = None,
    hints: Annotated[
        bool,
        typer.Option(
            "--hints/--no-hints",
            help="Fill what switches cannot tell (addresses, roles) from the --compare file.",
        ),
    ] = True,
    nic_network: Annotated[
        str | None,
        typer.Option("--nic-network", help="Address plan for NIC ports nobody gives an address."),
    ] = None,
    name: Annotated[str | None, typer.Option("--name", help="Name of the fabric.")] = None,
    attempts: Annotated[int, typer.Option(min=1, max=10, help="Tries per target.")] = 2,
    statuses: Annotated[
        bool, typer.Option("--statuses/--no-statuses", help="Compare link status too.")
    ] = True,
    json_path: Annotated[
        Path | None,
        typer.Option("--json", help="Also write the report as JSON to this file ('-': stdout)."),
    ] = None,
) -> None:
    """Discover the fabric from the switches of a targets file (gNMI or SNMP)."""

    def body() -> int:
        check_outputs(("-o", output, DATA_SUFFIXES), ("--json", json_path, None))
        targets_file = load_model(TargetsFile, targets).anchored(targets.parent)
        declared = load_fabric(compare) if compare is not None else None
        plan = AddressPlan.model_validate({"nic_network": nic_network}) if nic_network else None
        fleet = Fleet(
            targets_file,
            declared=declared if hints else None,
            address_plan=plan,
            name=name,
        )
        with progress(f"asking {len(targets_file.targets)} switches"):
            result = fleet.discover(attempts=attempts)
        status = fleet.status()
        if output is not None:
            save_fabric(result.fabric, output)
        comparison = None
        if declared is not None:
            comparison = compare_fabrics(declared, result.fabric, statuses=statuses)
        if json_path is None or str(json_path) != "-":
            print_report(console, result, status, comparison)
            if output is not None:
                console.print(f"wrote {output}")
        if json_path is not None:
            write_json(report_json(result, status, comparison, output), json_path)
        unanswered = any(s.health is not TargetHealth.LIVE for s in status.values())
        differs = comparison is not None and not comparison.clean
        return 1 if unanswered or result.findings or differs else 0

    code = guarded(body)
    if code:
        raise typer.Exit(code=code)
