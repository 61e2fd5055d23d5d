"""The parts of high availability that need no etcd: the client's endpoint rule and the
configuration of a replica (a bad one stops ``c4p serve`` before it binds, exit status 2)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import grpc
import pytest
import yaml
from service_cases import spread_fabric

from c4p.client.endpoints import Endpoints, parse_targets
from c4p.client.wire import ApiError
from c4p.files import save_fabric
from c4p.service.serve import ServeConfig

ROOT = Path(__file__).resolve().parents[1]


def test_targets_parse_from_a_list_or_a_comma_separated_string() -> None:
    assert parse_targets("a:1, b:2,,a:1") == ["a:1", "b:2"]
    assert parse_targets(["c:3"]) == ["c:3"]
    with pytest.raises(ValueError, match="no controller endpoint"):
        parse_targets(" , ")


def test_a_redirect_is_followed_at_once_and_a_dead_endpoint_is_left() -> None:
    dialled: list[str] = []

    def dial(target: str) -> str:
        dialled.append(target)
        return target

    e: Endpoints[str] = Endpoints(["a:1", "b:2", "c:3"], dial)
    assert e.channel() == "a:1" and e.current == "a:1"
    refused = ApiError(grpc.StatusCode.UNAVAILABLE, "follower", [], leader="c:3")
    assert e.follow(refused) is True and e.current == "c:3"  # named: go there now
    dead = ApiError(grpc.StatusCode.UNAVAILABLE, "connection refused", [])
    assert e.follow(dead) is False and e.current == "a:1"  # unnamed: the next, with back-off
    other = ApiError(grpc.StatusCode.UNAVAILABLE, "follower", [], leader="d:4")
    assert e.follow(other) and e.current == "d:4" and e.targets[-1] == "d:4"  # not listed: added
    wrong = ApiError(grpc.StatusCode.INVALID_ARGUMENT, "bad", [])
    assert e.follow(wrong) is False and e.current == "d:4"  # a refusal of the request: stay
    e.channel()
    e.channel()
    assert dialled == ["a:1", "d:4"] and e.moves == 3  # channels are cached per address


def test_a_single_endpoint_never_moves() -> None:
    e: Endpoints[str] = Endpoints("only:1", lambda t: t)
    assert not e.follow(ApiError(grpc.StatusCode.UNAVAILABLE, "down", []))
    assert e.current == "only:1" and e.moves == 0 and not e.several


def _base() -> dict[str, object]:
    return {"fabric": {"source": "file", "path": "fabric.json"}}


@pytest.mark.parametrize(
    ("store", "message"),
    [
        ({"kind": "etcd"}, "kind 'etcd' needs endpoints"),
        ({"kind": "etcd", "endpoints": ["10.0.0.1:2379"]}, "plaintext etcd is allowed on loopback"),
        ({"kind": "etcd", "endpoints": ["127.0.0.1"]}, "is not 'host:port'"),
        ({"kind": "etcd", "endpoints": ["127.0.0.1:2379"], "lease_ttl_s": 1}, "lease_ttl_s"),
        ({"kind": "zookeeper"}, "kind"),
    ],
)
def test_a_bad_store_config_is_refused_naming_the_field(
    store: dict[str, object], message: str
) -> None:
    with pytest.raises(ValueError, match=message):
        ServeConfig.model_validate({**_base(), "store": store})


def test_an_etcd_config_with_missing_tls_files_stops_serve_with_status_2(tmp_path: Path) -> None:
    save_fabric(spread_fabric(), tmp_path / "fabric.json")
    config = {
        **_base(),
        "store": {
            "kind": "etcd",
            "endpoints": ["etcd.example:2379"],
            "tls": {"ca_file": "missing-ca.pem"},
        },
        "replica": {"name": "r0", "advertise": "c4p-0.example:50051"},
    }
    path = tmp_path / "controller.yaml"
    path.write_text(yaml.safe_dump(config))
    done = subprocess.run(
        [sys.executable, "-m", "c4p", "serve", "--config", str(path), "--check"],
        cwd=ROOT,
        capture_output=True,
        timeout=60,
    )
    assert done.returncode == 2
    message = done.stderr.decode()
    assert "store.tls.ca_file" in message and "missing-ca.pem" in message
    assert "Traceback" not in message
