"""A certificate authority made on the spot, for the TLS tests: a CA, a server certificate for
127.0.0.1 / localhost, a client certificate, and a stranger's certificate from another CA."""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID


@dataclass(frozen=True)
class Pki:
    """PEM files: a CA, a server certificate for 127.0.0.1 / localhost, a client certificate, and a
    second CA that signed nothing the server trusts."""

    ca: Path
    server_cert: Path
    server_key: Path
    client_cert: Path
    client_key: Path
    stranger_cert: Path
    stranger_key: Path


def _key() -> ec.EllipticCurvePrivateKey:
    return ec.generate_private_key(ec.SECP256R1())


def _write_key(key: ec.EllipticCurvePrivateKey, path: Path) -> Path:
    path.write_bytes(
        key.private_bytes(
            serialization.Encoding.PEM,
            serialization.PrivateFormat.PKCS8,
            serialization.NoEncryption(),
        )
    )
    return path


def _certificate(
    subject: str,
    key: ec.EllipticCurvePrivateKey,
    issuer: x509.Certificate | None,
    issuer_key: ec.EllipticCurvePrivateKey,
    usage: x509.ObjectIdentifier | None,
) -> x509.Certificate:
    now = datetime.datetime.now(datetime.UTC)
    name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, subject)])
    builder = (
        x509.CertificateBuilder()
        .subject_name(name)
        .issuer_name(issuer.subject if issuer else name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=1))
        .add_extension(x509.BasicConstraints(ca=usage is None, path_length=None), critical=True)
    )
    if usage is not None:
        builder = builder.add_extension(x509.ExtendedKeyUsage([usage]), critical=False)
    if usage == ExtendedKeyUsageOID.SERVER_AUTH:
        builder = builder.add_extension(
            x509.SubjectAlternativeName(
                [x509.DNSName("localhost"), x509.IPAddress(ipaddress.ip_address("127.0.0.1"))]
            ),
            critical=False,
        )
    return builder.sign(issuer_key, hashes.SHA256())


def _write_cert(cert: x509.Certificate, path: Path) -> Path:
    path.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
    return path


def make_pki(tmp: Path) -> Pki:
    """Every PEM file of a `Pki`, written under `tmp`."""
    ca_key = _key()
    ca = _certificate("ragpulse test CA", ca_key, None, ca_key, None)
    server_key, client_key, stranger_key, stranger_ca_key = _key(), _key(), _key(), _key()
    stranger_ca = _certificate("another CA", stranger_ca_key, None, stranger_ca_key, None)
    server = _certificate("localhost", server_key, ca, ca_key, ExtendedKeyUsageOID.SERVER_AUTH)
    client = _certificate("shop-bot", client_key, ca, ca_key, ExtendedKeyUsageOID.CLIENT_AUTH)
    stranger = _certificate(
        "shop-bot", stranger_key, stranger_ca, stranger_ca_key, ExtendedKeyUsageOID.CLIENT_AUTH
    )
    return Pki(
        ca=_write_cert(ca, tmp / "ca.pem"),
        server_cert=_write_cert(server, tmp / "server.pem"),
        server_key=_write_key(server_key, tmp / "server.key"),
        client_cert=_write_cert(client, tmp / "client.pem"),
        client_key=_write_key(client_key, tmp / "client.key"),
        stranger_cert=_write_cert(stranger, tmp / "stranger.pem"),
        stranger_key=_write_key(stranger_key, tmp / "stranger.key"),
    )
