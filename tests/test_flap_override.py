"""An operator's drain/restore flap is damped visibly, and ``RestoreLink --force`` ends the hold.

Before (issue 33): after 5 drain/restore cycles in 0.5 s the link stayed "drained, held" for
82 s while GetFabric showed ``flap_penalty 0`` (it read the switch-event tracker), and nothing
could end the hold. Now GetFabric shows the operator tracker's penalty and when the link is
usable again; a forced restore (API field, ``c4p admin restore LINK --force``) ends the hold at
once and says so in the decision log. All over gRPC against a real service on loopback.
"""

from __future__ import annotations

import json
import time
from pathlib import Path

from service_cases import ADMIN_TOKEN, clients, hosts, serving, spread_fabric, wait_until
from typer.testing import CliRunner

from c4p.api.v1 import admin_pb2 as admin_pb
from c4p.cli import app
from c4p.client import AdminClient

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)
LINK = next(x.id for x in FABRIC.links if "spine" in x.id)
FLAP = {"suppress": 2000.0, "penalty": 1000.0, "half_life_s": 30.0}


def row(admin: AdminClient, link: str) -> admin_pb.LinkInfo:
    return next(x for x in admin.fabric().links if x.id == link)


def flap(admin: AdminClient, cycles: int = 5) -> None:
    for _ in range(cycles):  # bounded: 2 calls a cycle
        admin.drain(LINK, "flapping optics", wait=False)
        admin.restore(LINK, wait=False)


def test_the_operator_hold_is_shown_in_get_fabric(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path, flap=FLAP) as service, clients(service.address) as (_, admin):
        flap(admin)
        link = row(admin, LINK)
        assert link.held and link.effective == "drained" and not link.drained
        assert link.operator_penalty >= FLAP["suppress"], link
        assert link.flap_penalty == 0.0  # the switches reported nothing: that one stays 0
        usable = link.usable_at.ToNanoseconds() / 1e9
        print(f"after 5 cycles: operator penalty {link.operator_penalty:.0f}, usable in "
              f"{usable - time.time():.0f} s")  # fmt: skip
        assert time.time() + 10 < usable < time.time() + 600, link  # minutes, not forever
        assert row(admin, FABRIC.links[0].id).usable_at.ToNanoseconds() == 0  # not held


def test_a_forced_restore_ends_the_hold_and_is_logged(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path, flap=FLAP) as service, clients(service.address) as (_, admin):
        flap(admin)
        assert row(admin, LINK).held
        start = admin.decisions(1)[0].sequence if admin.decisions(1) else 0
        reply = admin.restore(LINK, force=True)
        assert reply.effective == "up" and reply.changed, reply
        link = row(admin, LINK)
        assert not link.held and link.effective == "up" and link.operator_penalty == 0.0
        assert wait_until(
            lambda: any("force" in d.reason for d in admin.decisions(20) if d.sequence > start),
            10,
        ), [d.reason for d in admin.decisions(5)]
        again = admin.restore(LINK, force=True)  # nothing held: nothing to do
        assert not again.changed and again.effective == "up"


def test_the_cli_forces_a_restore(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path, flap=FLAP) as service, clients(service.address) as (_, admin):
        flap(admin)
        result = CliRunner().invoke(
            app,
            ["admin", "restore", LINK, "--force", "--address", service.address, "--json", "-"],
            env={"C4P_ADMIN_TOKEN": ADMIN_TOKEN},
        )
        assert result.exit_code == 0, result.output
        assert json.loads(result.output)["effective"] == "up"
        assert not row(admin, LINK).held
