"""TLS and mutual TLS on the controller's API: the handshakes work with certificates from the
config, and a wrong certificate on either side is refused; security rules of the config."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import grpc
import pytest
from pydantic import ValidationError
from service_cases import ADMIN_TOKEN, hosts, serving, spread_fabric

from c4p.client import AdminClient, ApiError, ClientTls, FlowIntentClient, communicator
from c4p.service.serve import ServeConfig
from c4p.testing.certs import Pki, make_pki

FABRIC = spread_fabric()
HOSTS = hosts(FABRIC)


@pytest.fixture(scope="module")
def pki(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    return make_pki(tmp_path_factory.mktemp("pki"))


@pytest.fixture(scope="module")
def stranger(tmp_path_factory: pytest.TempPathFactory) -> Pki:
    """Another PKI: its client certificate is well-formed but signed by a CA we do not trust."""
    return make_pki(tmp_path_factory.mktemp("stranger"))


def _tls(pki: Pki, mode: str, **extra: object) -> dict[str, object]:
    section: dict[str, object] = {
        "mode": mode,
        "cert_file": str(pki.server_cert),
        "key_file": str(pki.server_key),
    }
    if mode == "mtls":
        section["client_ca_file"] = str(pki.ca_cert)
    section.update(extra)
    return section


def _refused(address: str, tls: ClientTls | None) -> grpc.StatusCode:
    client = FlowIntentClient(address, tls=tls, attempts=1, timeout=5, wait_for_ready=False)
    try:
        with pytest.raises(ApiError) as caught:
            client.register_job("nope", hosts=HOSTS[5:6])
        return caught.value.code
    finally:
        client.close()


@pytest.fixture
def tls_service(pki: Pki, tmp_path: Path) -> Iterator[str]:
    with serving(FABRIC, tmp_path, tls=_tls(pki, "tls")) as service:
        yield service.address


def test_tls_handshake_and_a_wrong_ca(tls_service: str, pki: Pki) -> None:
    good = ClientTls(ca_file=pki.ca_cert)
    with FlowIntentClient(tls_service, tls=good) as flow:
        job = flow.register_job("secure", hosts=HOSTS[:2])
        reply = job.submit([communicator("dp")])
        watch = job.watch()
        try:
            assert watch.wait_revision(reply.revision, 20)
            assert len(watch.mirror.bindings) == 4
        finally:
            watch.stop()
    assert (
        _refused(tls_service, ClientTls(ca_file=pki.foreign_ca_cert)) == grpc.StatusCode.UNAVAILABLE
    )
    assert _refused(tls_service, None) == grpc.StatusCode.UNAVAILABLE  # plaintext to a TLS port


def test_mtls_needs_a_client_certificate_from_our_ca(
    pki: Pki, stranger: Pki, tmp_path: Path
) -> None:
    ours = ClientTls(ca_file=pki.ca_cert, cert_file=pki.client_cert, key_file=pki.client_key)
    theirs = ClientTls(
        ca_file=pki.ca_cert, cert_file=stranger.client_cert, key_file=stranger.client_key
    )
    with serving(FABRIC, tmp_path, tls=_tls(pki, "mtls")) as service:
        with FlowIntentClient(service.address, tls=ours) as flow:
            assert flow.register_job("mutual", hosts=HOSTS[:1]).token
        assert _refused(service.address, theirs) == grpc.StatusCode.UNAVAILABLE
        assert _refused(service.address, ClientTls(ca_file=pki.ca_cert)) in (
            grpc.StatusCode.UNAVAILABLE,
            grpc.StatusCode.UNKNOWN,
        )


@pytest.mark.parametrize("names, allowed", [(["c4p-controller"], True), (["ops-only"], False)])
def test_admin_calls_can_require_a_certificate_name(
    pki: Pki, tmp_path: Path, names: list[str], allowed: bool
) -> None:
    ours = ClientTls(ca_file=pki.ca_cert, cert_file=pki.client_cert, key_file=pki.client_key)
    auth = {"admin": [{"value": ADMIN_TOKEN}], "admin_client_names": names}
    with serving(FABRIC, tmp_path, tls=_tls(pki, "mtls"), auth=auth) as service:
        admin = AdminClient(service.address, ADMIN_TOKEN, tls=ours)
        try:
            if allowed:
                assert admin.fabric().name == FABRIC.name
            else:
                with pytest.raises(ApiError) as caught:
                    admin.fabric()
                assert caught.value.code == grpc.StatusCode.PERMISSION_DENIED
        finally:
            admin.close()


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"listen": {"address": "0.0.0.0:50051"}}, "loopback"),
        ({"listen": {"address": "10.0.0.1:50051"}}, "loopback"),
        ({"tls": {"mode": "tls"}}, "cert_file"),
        ({"tls": {"mode": "mtls", "cert_file": "a", "key_file": "b"}}, "client_ca_file"),
        ({"listen": {"address": "127.0.0.1"}}, "host:port"),
        ({"auth": {"admin": [{"env": "X", "value": "y" * 20}]}}, "exactly one"),
        ({"auth": {"admin_client_names": ["ops"]}}, "mtls"),
        ({"planner": {"strategy": "ecmp"}}, "strategy"),
        ({"controller": {"debounce_s": -1}}, "debounce_s"),
        ({"surprise": 1}, "surprise"),
    ],
)
def test_unsafe_or_broken_configs_are_refused(overrides: dict[str, object], message: str) -> None:
    data: dict[str, object] = {"fabric": {"path": "fabric.yaml"}, **overrides}
    with pytest.raises(ValidationError) as caught:
        ServeConfig.model_validate(data)
    assert message in str(caught.value)


def test_missing_files_and_secrets_are_listed_together(tmp_path: Path) -> None:
    config = ServeConfig.model_validate(
        {
            "fabric": {"path": str(tmp_path / "none.yaml")},
            "listen": {"address": "[::1]:0"},
            "auth": {"admin": [{"file": str(tmp_path / "none.token")}, {"value": "short"}]},
        }
    )
    found = dict(config.problems())
    assert set(found) == {"fabric.path", "auth.admin[0]", "auth.admin[1]"}
    assert "at least 16" in found["auth.admin[1]"]
