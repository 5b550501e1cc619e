"""Certificates and keys for a fleet deployment (`mcutrain fleet certs`): a certificate authority, the
SuperLink's TLS certificate signed by it (for the SuperLink's host names and addresses), and one EC P-384
key pair per node for SuperNode authentication (private key in OpenSSH PEM form, public key in OpenSSH
form, the forms Flower reads). Made with the `cryptography` package that Flower depends on.

    folder/ca.crt ca.key                  the CA (keep ca.key off the gateways)
    folder/server.pem server.key          the SuperLink's certificate and key
    folder/nodes/NAME NAME.pub            a node's private and public key (register NAME.pub)

These are for a test or a small deployment; a production fleet would use its own PKI.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path
from typing import Dict, List, Sequence

from mcutrain.errors import FleetError


@dataclass
class FleetCerts:
    """The paths make_certs() wrote."""

    ca: Path
    server_cert: Path
    server_key: Path
    node_keys: Dict[str, Path]  # node name -> private key (its public key is the same path + .pub)


def _write(path: Path, data: bytes, private: bool) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600 if private else 0o644)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def make_certs(folder: Path, hosts: Sequence[str], nodes: Sequence[str], days: int = 365) -> FleetCerts:
    """Write a CA, a SuperLink certificate valid for `hosts` (names or IP addresses) and a key pair per node."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID

    if not hosts:
        raise FleetError("give the SuperLink's host names or addresses (--host), e.g. --host 192.0.2.10")
    bad = [n for n in nodes if not n or "/" in n or n.startswith(".")]
    if bad:
        raise FleetError(f"node names must be plain file names: {', '.join(map(repr, bad))}")
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "nodes").mkdir(exist_ok=True)
    now = datetime.datetime.now(datetime.timezone.utc)
    pem = serialization.Encoding.PEM
    nokey = serialization.NoEncryption()

    ca_key = ec.generate_private_key(ec.SECP384R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, "mcutrain fleet CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(x509.KeyUsage(False, False, False, False, False, True, True, False, False), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    sans: List[x509.GeneralName] = []
    for h in hosts:
        try:
            sans.append(x509.IPAddress(ipaddress.ip_address(h)))
        except ValueError:
            sans.append(x509.DNSName(h))
    key = ec.generate_private_key(ec.SECP384R1())
    cert = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, hosts[0])]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now - datetime.timedelta(minutes=5))
        .not_valid_after(now + datetime.timedelta(days=days))
        .add_extension(x509.SubjectAlternativeName(sans), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .sign(ca_key, hashes.SHA256())
    )
    out = FleetCerts(folder / "ca.crt", folder / "server.pem", folder / "server.key", {})
    _write(folder / "ca.key", ca_key.private_bytes(pem, serialization.PrivateFormat.PKCS8, nokey), True)
    _write(out.ca, ca.public_bytes(pem), False)
    _write(out.server_key, key.private_bytes(pem, serialization.PrivateFormat.PKCS8, nokey), True)
    _write(out.server_cert, cert.public_bytes(pem), False)
    for n in nodes:
        nk = ec.generate_private_key(ec.SECP384R1())
        path = folder / "nodes" / n
        _write(path, nk.private_bytes(pem, serialization.PrivateFormat.OpenSSH, nokey), True)
        pub = nk.public_key().public_bytes(serialization.Encoding.OpenSSH, serialization.PublicFormat.OpenSSH)
        _write(path.with_name(n + ".pub"), pub + f" {n}\n".encode(), False)
        out.node_keys[n] = path
    return out


__all__ = ["FleetCerts", "make_certs"]
