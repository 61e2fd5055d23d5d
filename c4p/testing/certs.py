"""A throw-away PKI for TLS and mTLS tests: a CA, a server certificate, a client certificate.

Why in the shipped testing package: the emulated gNMI targets serve TLS exactly as a switch
would, and tests, the demo and the benchmark all need the same few files. Keys are EC P-256
(fast to make); the server certificate names ``localhost`` and ``127.0.0.1``, so a client
checks the name it dials without any override. A second, unrelated CA is made too, to show
that a target signed by someone else is refused.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

from southbound.targets import TlsConfig, TlsMode


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "c4p test PKI"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _write(
    path: Path, cert: x509.Certificate | None, key: ec.EllipticCurvePrivateKey | None
) -> Path:
    if cert is not None:
        path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    if key is not None:
        path.write_bytes(
            key.private_bytes(
                serialization.Encoding.PEM,
                serialization.PrivateFormat.PKCS8,
                serialization.NoEncryption(),
            )
        )
        path.chmod(0o600)
    return path


def _ca(common_name: str) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    cert = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(_name(common_name))
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=2))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=True,
                content_commitment=False,
                key_encipherment=False,
                data_encipherment=False,
                key_agreement=False,
                key_cert_sign=True,
                crl_sign=True,
                encipher_only=False,
                decipher_only=False,
            ),
            critical=True,
        )
        .sign(key, hashes.SHA256())
    )
    return cert, key


def _leaf(
    ca: tuple[x509.Certificate, ec.EllipticCurvePrivateKey],
    common_name: str,
    usage: x509.ObjectIdentifier,
    names: tuple[str, ...] = (),
    ips: tuple[str, ...] = (),
) -> tuple[x509.Certificate, ec.EllipticCurvePrivateKey]:
    key = _key()
    now = datetime.datetime.now(datetime.UTC)
    builder = (
        x509.CertificateBuilder()
        .subject_name(_name(common_name))
        .issuer_name(ca[0].subject)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(hours=1))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    )
    alt: list[x509.GeneralName] = [x509.DNSName(n) for n in names]
    alt += [x509.IPAddress(ipaddress.ip_address(i)) for i in ips]
    if alt:
        builder = builder.add_extension(x509.SubjectAlternativeName(alt), critical=False)
    return builder.sign(ca[1], hashes.SHA256()), key


@dataclass(frozen=True)
class Pki:
    """Paths of the PEM files :func:`make_pki` wrote."""

    ca_cert: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    foreign_ca_cert: Path

    def client_tls(self, mode: TlsMode, *, foreign_ca: bool = False) -> TlsConfig:
        """The driver-side TLS config for ``mode`` (``foreign_ca``: trust the wrong CA)."""
        if mode is TlsMode.INSECURE:
            return TlsConfig(mode=mode)
        ca = self.foreign_ca_cert if foreign_ca else self.ca_cert
        if mode is TlsMode.TLS:
            return TlsConfig(mode=mode, ca_file=ca)
        return TlsConfig(
            mode=mode, ca_file=ca, cert_file=self.client_cert, key_file=self.client_key
        )

    def server_credentials(self, *, mutual: bool) -> Any:
        """grpc server credentials; ``mutual`` demands a client certificate from our CA."""
        import grpc

        pair = (self.server_key.read_bytes(), self.server_cert.read_bytes())
        if not mutual:
            return grpc.ssl_server_credentials([pair])
        return grpc.ssl_server_credentials(
            [pair], root_certificates=self.ca_cert.read_bytes(), require_client_auth=True
        )


def make_pki(directory: Path) -> Pki:
    """Write a CA, a server and a client certificate (and a foreign CA) into ``directory``."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = _ca("c4p test CA")
    server = _leaf(
        ca, "c4p-target", ExtendedKeyUsageOID.SERVER_AUTH, ("localhost",), ("127.0.0.1", "::1")
    )
    client = _leaf(ca, "c4p-controller", ExtendedKeyUsageOID.CLIENT_AUTH)
    foreign = _ca("someone else's CA")
    return Pki(
        ca_cert=_write(directory / "ca.pem", ca[0], None),
        server_cert=_write(directory / "server.pem", server[0], None),
        server_key=_write(directory / "server.key", None, server[1]),
        client_cert=_write(directory / "client.pem", client[0], None),
        client_key=_write(directory / "client.key", None, client[1]),
        foreign_ca_cert=_write(directory / "foreign-ca.pem", foreign[0], None),
    )
