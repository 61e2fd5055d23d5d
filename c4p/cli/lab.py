"""``c4p lab``: a real Linux fabric in network namespaces (``up``, ``down``, ``demo``).

Why a command: the lab is how a user sees c4p's plans realized by a real kernel, and how the
tests get a data plane that c4p did not write. ``up`` builds it from a fabric file and leaves
it running (namespaces ``c4p-<token>-<device>``, state in ``<state-dir>/<token>/lab.json``);
``down`` removes the labs ``up`` made (all of them, or one token); ``demo`` builds a lab, runs
``c4p serve`` on its gNMI faces and a ``c4p agent`` in every host namespace, runs the learned /
link-failure / predicted / verified phases (:mod:`c4p.lab.demo`) and removes it all, also on
Ctrl-C or SIGTERM. Needs root
(network namespaces) and, for ``--routing bgp``, Debian's ``frr``; without them it says so and
exits 2.
"""

from __future__ import annotations

import tempfile
from pathlib import Path
from typing import Annotated, Any

import typer
from rich.table import Table

from c4p.cli.common import JsonOption, console, emit, fail, guarded

lab_app = typer.Typer(
    help="A Linux leaf-spine fabric in network namespaces: up, down, demo.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)

DEFAULT_STATE = Path(tempfile.gettempdir()) / "c4p-labs"
StateOption = Annotated[
    Path, typer.Option("--state-dir", help="Where `lab up` keeps each lab's state.")
]
RoutingOption = Annotated[
    str, typer.Option("--routing", help="static (multipath routes) or bgp (FRR eBGP).")
]


HashPolicyOption = Annotated[
    int,
    typer.Option(
        "--hash-policy",
        help="The routers' net.ipv4.fib_multipath_hash_policy: 0 (addresses only), 1 (L4 "
        "5-tuple; reuses a connected socket's hash: the kernel's realistic case), 3 (chosen "
        "fields: the 5-tuple).",
    ),
]


def _hash_policy(value: int) -> int:
    from c4p.lab.build import HASH_POLICIES

    if value not in HASH_POLICIES:
        fail(f"--hash-policy: {value} is not one of {', '.join(map(str, HASH_POLICIES))}")
    return value


def _routing(value: str) -> Any:
    if value not in ("static", "bgp"):
        fail(f"--routing: {value!r} is not one of static, bgp")
    return value


@lab_app.command("up")
def lab_up(
    fabric: Annotated[Path, typer.Argument(help="Fabric file (YAML or JSON).")],
    routing: RoutingOption = "static",
    icmp_from: Annotated[
        str, typer.Option("--icmp-from", help="Routers answer from: loopback or interface.")
    ] = "loopback",
    state_dir: StateOption = DEFAULT_STATE,
    hash_policy: HashPolicyOption = 1,
    family: Annotated[
        int,
        typer.Option(
            "--family",
            help="4, or 6: IPv6 only (2001:2::/48; static routing, no gNMI faces).",
        ),
    ] = 4,
    gnmi_targets: Annotated[
        Path | None,
        typer.Option(
            "--gnmi-targets",
            help="Also run lldpd and gNMI faces (from the kernels) on 127.0.0.1, write their "
            "targets file here, and stay in the foreground until Ctrl-C, then tear down.",
        ),
    ] = None,
) -> None:
    """Build the lab and leave it running; prints its token and namespaces."""
    from c4p.files import load_fabric
    from c4p.lab.addressing import new_token
    from c4p.lab.build import Lab

    mode = _routing(routing)
    policy = _hash_policy(hash_policy)
    if family not in (4, 6):
        fail(f"--family: {family} is not 4 or 6")
    if family == 6 and (mode != "static" or gnmi_targets is not None or icmp_from != "loopback"):
        fail("--family: 6 is built with static routing, loopback answers and no gNMI faces")
    if icmp_from not in ("loopback", "interface"):
        fail(f"--icmp-from: {icmp_from!r} is not one of loopback, interface")

    def body() -> Lab:
        token = new_token()
        lab = Lab(
            load_fabric(fabric),
            routing=mode,
            icmp_from=icmp_from,  # type: ignore[arg-type]
            hash_policy=policy,
            family=family,
            token=token,
            workdir=state_dir / token,
        )
        lab.up()
        return lab

    lab = guarded(body)
    console.print(
        f"lab [bold]{lab.token}[/] up ({routing}, IPv{family}, hash policy {policy}): "
        f"{len(lab.plan.namespaces)} namespaces"
    )
    for device, ns in sorted(lab.plan.namespaces.items()):
        console.print(f"  {device:<16} {ns}", highlight=False)
    console.print(f"the lab's fabric (its addresses): {lab.workdir / 'fabric.json'}")
    if gnmi_targets is None:
        console.print(f"state: {lab.workdir / 'lab.json'}   remove with: c4p lab down {lab.token}")
        return
    guarded(lambda: _serve_gnmi(lab, gnmi_targets))


def _serve_gnmi(lab: Any, path: Path) -> None:
    """lldpd + gNMI faces until SIGINT/SIGTERM; the lab is torn down on the way out."""
    import signal
    import threading

    from c4p.files import save_model
    from c4p.lab.gnmi_faces import LabGnmi

    stop = threading.Event()
    for sig in (signal.SIGINT, signal.SIGTERM):
        signal.signal(sig, lambda *_: stop.set())
    try:
        with LabGnmi(lab) as servers:
            save_model(servers.targets_file(), path)
            console.print(f"gNMI targets of the lab's switches: {path} (Ctrl-C to stop)")
            stop.wait()
    finally:
        lab.down()
        console.print(f"lab {lab.token} down")


@lab_app.command("down")
def lab_down(
    token: Annotated[str | None, typer.Argument(help="Lab token (default: every lab).")] = None,
    state_dir: StateOption = DEFAULT_STATE,
) -> None:
    """Remove labs that `c4p lab up` built: their namespaces, daemons and state."""
    from c4p.lab.build import down_from_state

    folders = [state_dir / token] if token else sorted(p for p in state_dir.glob("*") if p.is_dir())
    if token and not (state_dir / token / "lab.json").exists():
        fail(f"token: no lab {token!r} in {state_dir}")
    for folder in folders:
        names = guarded(lambda f=folder: down_from_state(f))  # type: ignore[misc]
        console.print(f"lab {folder.name} down: {len(names)} namespaces removed")
    if not folders:
        console.print(f"no labs in {state_dir}")


@lab_app.command("demo")
def lab_demo(
    fabric: Annotated[
        Path | None,
        typer.Option("--fabric", help="Fabric file (default: 2 leaves x 4 spines x 4 hosts)."),
    ] = None,
    routing: Annotated[str, typer.Option("--routing", help="static, bgp, or both.")] = "both",
    qps: Annotated[int, typer.Option("--qps", help="QPs per connection (1-16).")] = 4,
    hash_policy: HashPolicyOption = 1,
    json_path: JsonOption = None,
) -> None:
    """Lab up, serve + agents, two jobs, traffic, link down, again, then predicted/verified."""
    import signal

    from c4p.files import load_fabric
    from c4p.lab.demo import render, run_demo

    if routing not in ("static", "bgp", "both"):
        fail(f"--routing: {routing!r} is not one of static, bgp, both")
    if not 1 <= qps <= 16:
        fail(f"--qps: {qps} is not between 1 and 16")
    policy = _hash_policy(hash_policy)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # unwinds every context: agents, service, faces, namespaces

    signal.signal(signal.SIGTERM, interrupted)
    modes = ["static", "bgp"] if routing == "both" else [routing]
    results = []
    try:
        for mode in modes:
            results.append(
                guarded(
                    lambda m=mode: run_demo(  # type: ignore[misc]
                        load_fabric(fabric) if fabric else None,
                        routing=m,
                        qps=qps,
                        hash_policy=policy,
                    )
                )
            )
    except KeyboardInterrupt:
        console.print("interrupted: the lab, its agents and the controller were torn down")
        raise typer.Exit(130) from None

    def show() -> None:
        for result in results:
            table = Table(
                title=f"c4p lab demo: {result['fabric']}, routing {result['routing']}, "
                f"hash policy {result['hash_policy']}"
            )
            for column in ("phase", "QPs on plan", "max QPs/link plan/meas", "probes", "lost", "s"):
                table.add_column(column)
            for row in render(result):
                table.add_row(*row)
            console.print(table)

    emit(json_path, {"runs": results}, show)


@lab_app.command("detect")
def lab_detect(
    routing: Annotated[str, typer.Option("--routing", help="static or bgp.")] = "static",
    hash_policy: HashPolicyOption = 1,
    scenario: Annotated[
        list[str] | None,
        typer.Option("--scenario", help="Run only these (repeatable; default: all, in order)."),
    ] = None,
    window_s: Annotated[
        float, typer.Option("--window", help="Seconds a fault may take to be found (5-120).")
    ] = 20.0,
    json_path: JsonOption = None,
) -> None:
    """Ranks linked with libc4p run a ring over the lab; faults by tc/ip/signals; the detector."""
    import signal

    from c4p.lab.collective import ring_missing
    from c4p.lab.detect import SCENARIOS, run_detect
    from c4p.lab.detect_table import HEADERS, render

    if routing not in ("static", "bgp"):
        fail(f"--routing: {routing!r} is not one of static, bgp")
    for name in scenario or ():
        if name not in SCENARIOS:
            fail(f"--scenario: {name!r} is not one of {', '.join(SCENARIOS)}")
    if not 5 <= window_s <= 120:
        fail(f"--window: {window_s} is not between 5 and 120")
    if (missing := ring_missing()) is not None:
        fail(f"rank program: {missing}")
    policy = _hash_policy(hash_policy)

    def interrupted(*_: object) -> None:
        raise KeyboardInterrupt  # unwinds every context: ranks, agents, service, namespaces

    signal.signal(signal.SIGTERM, interrupted)
    try:
        result = guarded(
            lambda: run_detect(
                routing="bgp" if routing == "bgp" else "static",
                hash_policy=policy,
                scenarios=tuple(scenario) if scenario else SCENARIOS,
                window_s=window_s,
                progress=lambda name: console.print(f"scenario {name} ...", style="dim"),
            )
        )
    except KeyboardInterrupt:
        console.print("interrupted: the ranks, the lab, its agents and the controller are down")
        raise typer.Exit(130) from None

    def show() -> None:
        table = Table(
            title=f"c4p lab detect: {result['fabric']}, {result['ranks']} ranks, routing "
            f"{result['routing']}, healthy step {result['healthy_step_time_s']} s"
        )
        for column in HEADERS:
            table.add_column(column)
        for row in render(result):
            table.add_row(*row)
        console.print(table)

    emit(json_path, result, show)
