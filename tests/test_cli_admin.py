"""``c4p admin`` against a real embedded controller over loopback gRPC."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from service_cases import ADMIN_TOKEN, clients, hosts, serving, spread_fabric
from typer.testing import CliRunner

from c4p.cli import app
from c4p.client import communicator

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)
runner = CliRunner()


def admin(address: str, *args: str, code: int = 0, token: str | None = ADMIN_TOKEN) -> str:
    env = {"C4P_ADMIN_TOKEN": token} if token is not None else {"C4P_ADMIN_TOKEN": ""}
    result = runner.invoke(app, ["admin", *args, "--address", address], env=env)
    assert result.exit_code == code, result.output
    return result.output


def test_the_operator_cli_reads_and_changes_the_controller(tmp_path: Path) -> None:
    with serving(FABRIC, tmp_path) as service, clients(service.address) as (flow, _):
        job = flow.register_job("train", hosts=HOSTS[:2])
        job.submit([communicator("dp", qps_per_connection=2)])
        a = service.address
        admin(a, "replan", "--reason", "cli test")
        assert "train" in admin(a, "jobs")
        listed = json.loads(admin(a, "jobs", "--json", "-"))
        assert listed["jobs"][0]["job_id"] == "train"
        assert "epoch" in admin(a, "plan")
        log = json.loads(admin(a, "decisions", "--limit", "5", "--json", "-"))
        assert log["decisions"] and log["decisions"][0]["reason"]
        link = FABRIC.links[0].id
        assert "drained" in admin(a, "drain", link, "--reason", "optics")
        assert "already" in admin(a, "drain", link, "--reason", "optics")
        assert "held" in admin(a, "restore", link) or "up" in admin(a, "restore", link)
        watched = json.loads(admin(a, "watch", "train", "--for", "0.3", "--interval", "0.1",
                                   "--json", "-"))  # fmt: skip
        assert watched["changes"][0]["job_id"] == "train"
        token_file = tmp_path / "token"
        token_file.write_text(ADMIN_TOKEN + "\n")
        assert "train" in admin(a, "jobs", "--token-file", str(token_file), token=None)


def test_jobs_says_installed_on_the_models_word_only_when_predicted_was_chosen(
    tmp_path: Path,
) -> None:
    """Issue 30: the state names how the ports were found (``c4p admin jobs``)."""
    for ports, state, shown in [
        ({}, "BOUND_UNVERIFIED", "bound_unverified"),
        ({"mode": "predicted"}, "INSTALLED", "installed (predicted)"),
    ]:
        where = tmp_path / (ports.get("mode") or "default")
        with serving(FABRIC, where, ports=ports) as service, clients(service.address) as (flow, _):
            job = flow.register_job("train", hosts=HOSTS[:2])
            job.submit([communicator("dp", qps_per_connection=2)])
            a = service.address
            admin(a, "replan", "--reason", "cli test")
            listed = json.loads(admin(a, "jobs", "--json", "-"))["jobs"][0]
            assert listed["state"] == f"INTENT_STATE_{state}"
            assert listed["unverified"] == 8 and listed.get("verified", 0) == 0
            assert listed.get("predicted", False) is (state == "INSTALLED")
            env = {"C4P_ADMIN_TOKEN": ADMIN_TOKEN, "COLUMNS": "200"}
            text = runner.invoke(app, ["admin", "jobs", "--address", a], env=env).output
            assert shown in text and "0/8" in text


@pytest.mark.parametrize(
    ("args", "token", "code", "says"),
    [
        (["jobs"], None, 2, "C4P_ADMIN_TOKEN"),
        (["jobs"], "wrong-token-0123456789", 2, "PERMISSION_DENIED"),
        (["drain", "no--such", "--reason", "x"], ADMIN_TOKEN, 2, "NOT_FOUND"),
        (["watch", "nobody", "--for", "0.2"], ADMIN_TOKEN, 2, "not registered"),
    ],
)
def test_refusals_are_one_line(
    tmp_path: Path, args: list[str], token: str | None, code: int, says: str
) -> None:
    with serving(FABRIC, tmp_path) as service:
        out = admin(service.address, *args, code=code, token=token)
    assert says in out and "Traceback" not in out


def test_an_unreachable_controller_is_exit_1() -> None:
    out = admin("127.0.0.1:1", "jobs", code=1)
    assert "127.0.0.1:1" in out


def test_every_admin_command_takes_the_connection_options_where_they_were() -> None:
    """The options are written once (:func:`c4p.cli.admin.dialling`); every command still
    lists all six, in their order, right before ``--json`` (``c4p admin <command> --help``
    read the same before and after, byte for byte)."""
    from typer.main import get_command

    from c4p.cli.admin import admin_app

    group = get_command(admin_app)
    commands = group.commands  # type: ignore[attr-defined]
    assert len(commands) == 8, sorted(commands)
    for name, command in commands.items():
        names = [p.name for p in command.params]
        at = names.index("address")
        assert names[at : at + 7] == [
            "address",
            "token_file",
            "ca_file",
            "cert_file",
            "key_file",
            "server_name",
            "json_path",
        ], (name, names)
