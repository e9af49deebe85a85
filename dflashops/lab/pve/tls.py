"""A private CA and a server certificate for the double, so clients verify TLS for real.

The CA certificate is written to ``ca.pem`` for clients (``verify_ssl=<path>`` in proxmoxer). Files
are reused across restarts while they are valid for the requested names, so an inventory that
names the CA file keeps working.
"""

from __future__ import annotations

import datetime as dt
import ipaddress
import ssl
from dataclasses import dataclass
from pathlib import Path

from dflashops.lab.errors import LabError

NEEDED = "cryptography>=42 (dflashops' `lab` extra)"
INSTALL_HINT = "pip install 'dflashops[lab]' (in a checkout: pip install '.[lab]')"

try:
    from cryptography import __version__ as cryptography_version
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import NameOID
except ImportError as exc:  # an operator's install leaves the lab's extra out
    raise LabError(f"the lab needs {NEEDED}, which is not installed", hint=INSTALL_HINT) from exc
if int(cryptography_version.split(".")[0]) < 42:  # not_valid_after_utc is from 42
    raise LabError(f"the lab needs {NEEDED}, not {cryptography_version}", hint=INSTALL_HINT)

VALIDITY = dt.timedelta(days=365)


@dataclass(frozen=True)
class TlsFiles:
    ca_cert: Path
    server_cert: Path
    server_key: Path

    def server_context(self) -> ssl.SSLContext:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        context.load_cert_chain(self.server_cert, self.server_key)
        return context


def _name(common_name: str) -> x509.Name:
    return x509.Name(
        [
            x509.NameAttribute(NameOID.ORGANIZATION_NAME, "dflashops lab"),
            x509.NameAttribute(NameOID.COMMON_NAME, common_name),
        ]
    )


def _pem_key(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _write_private(path: Path, data: bytes) -> None:
    path.touch(mode=0o600, exist_ok=True)
    path.chmod(0o600)
    path.write_bytes(data)


def _san_entries(hosts: tuple[str, ...]) -> list[x509.GeneralName]:
    entries: list[x509.GeneralName] = []
    for host in hosts:
        try:
            entries.append(x509.IPAddress(ipaddress.ip_address(host)))
        except ValueError:
            entries.append(x509.DNSName(host))
    return entries


def _still_valid(files: TlsFiles, hosts: tuple[str, ...]) -> bool:
    if not all(path.exists() for path in (files.ca_cert, files.server_cert, files.server_key)):
        return False
    cert = x509.load_pem_x509_certificate(files.server_cert.read_bytes())
    if cert.not_valid_after_utc - dt.timedelta(days=1) < dt.datetime.now(dt.UTC):
        return False
    try:
        san = cert.extensions.get_extension_for_class(x509.SubjectAlternativeName).value
    except x509.ExtensionNotFound:
        return False
    return all(entry in list(san) for entry in _san_entries(hosts))


def ensure_tls(directory: Path, hosts: tuple[str, ...] = ("127.0.0.1", "localhost")) -> TlsFiles:
    """Create (or reuse) ``ca.pem``, ``server.pem`` and ``server.key`` under ``directory``.

    The CA key is never written: a new CA is made whenever the server certificate must change.
    """
    directory.mkdir(parents=True, exist_ok=True)
    files = TlsFiles(directory / "ca.pem", directory / "server.pem", directory / "server.key")
    if _still_valid(files, hosts):
        return files
    now = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=5)
    ca_key = ec.generate_private_key(ec.SECP256R1())
    ca_name = _name("dflashops lab PVE double CA")
    ca_cert = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), False)
        .sign(ca_key, hashes.SHA256())
    )
    server_key = ec.generate_private_key(ec.SECP256R1())
    server_cert = (
        x509.CertificateBuilder()
        .subject_name(_name(hosts[0]))
        .issuer_name(ca_name)
        .public_key(server_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(now)
        .not_valid_after(now + VALIDITY)
        .add_extension(x509.SubjectAlternativeName(_san_entries(hosts)), critical=False)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([x509.oid.ExtendedKeyUsageOID.SERVER_AUTH]), critical=False
        )
        .add_extension(
            x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), False
        )
        .sign(ca_key, hashes.SHA256())
    )
    _write_private(files.server_key, _pem_key(server_key))
    files.server_cert.write_bytes(server_cert.public_bytes(serialization.Encoding.PEM))
    files.ca_cert.write_bytes(ca_cert.public_bytes(serialization.Encoding.PEM))
    files.ca_cert.chmod(0o644)
    return files
