"""Throw-away certificate authorities and key pairs, made fresh for every run.

Nothing here is ever written into the repository: every key lives in a
temporary directory and dies with it.
"""

from __future__ import annotations

import datetime
import ipaddress
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec, rsa
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

# Long enough for a manual session with `python -m tests.e2e up`, short enough
# that a leaked file is worthless soon.
_VALIDITY = datetime.timedelta(days=2)


@dataclass(frozen=True)
class KeyPair:
    cert_pem: bytes
    key_pem: bytes

    def write(self, directory: Path, name: str) -> tuple[Path, Path]:
        """Write `<name>.crt` and `<name>.key` (owner-only) and return their paths."""
        cert_path, key_path = directory / f"{name}.crt", directory / f"{name}.key"
        cert_path.write_bytes(self.cert_pem)
        key_path.touch(mode=0o600)
        key_path.write_bytes(self.key_pem)
        return cert_path, key_path


class CertificateAuthority:
    """A self-signed CA that issues serving and client certificates."""

    def __init__(self, common_name: str) -> None:
        self._key = ec.generate_private_key(ec.SECP256R1())
        self._name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)])
        now = _now()
        self._cert = (
            x509.CertificateBuilder()
            .subject_name(self._name)
            .issuer_name(self._name)
            .public_key(self._key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
            .add_extension(
                x509.KeyUsage(
                    digital_signature=True,
                    key_cert_sign=True,
                    crl_sign=True,
                    content_commitment=False,
                    key_encipherment=False,
                    data_encipherment=False,
                    key_agreement=False,
                    encipher_only=False,
                    decipher_only=False,
                ),
                critical=True,
            )
            .add_extension(
                x509.SubjectKeyIdentifier.from_public_key(self._key.public_key()), critical=False
            )
            .sign(self._key, hashes.SHA256())
        )

    @property
    def cert_pem(self) -> bytes:
        return self._cert.public_bytes(serialization.Encoding.PEM)

    def issue(
        self,
        common_name: str,
        *,
        organizations: tuple[str, ...] = (),
        ip_addresses: tuple[str, ...] = (),
        dns_names: tuple[str, ...] = (),
        client: bool = False,
    ) -> KeyPair:
        """A leaf certificate: a serving one when it names addresses, else a client one."""
        key = ec.generate_private_key(ec.SECP256R1())
        subject = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, org) for org in organizations]
        subject.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        if ip_addresses or dns_names:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        now = _now()
        builder = (
            x509.CertificateBuilder()
            .subject_name(x509.Name(subject))
            .issuer_name(self._name)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
            .add_extension(
                x509.AuthorityKeyIdentifier.from_issuer_public_key(self._key.public_key()),
                critical=False,
            )
        )
        if ip_addresses or dns_names:
            # Clients check the SAN, never the CN: the webhook URL is https://127.0.0.1:<port>/.
            names: list[x509.GeneralName] = [
                x509.IPAddress(ipaddress.ip_address(ip)) for ip in ip_addresses
            ]
            names += [x509.DNSName(dns) for dns in dns_names]
            builder = builder.add_extension(x509.SubjectAlternativeName(names), critical=False)
        cert = builder.sign(self._key, hashes.SHA256())
        return KeyPair(cert.public_bytes(serialization.Encoding.PEM), _private_pem(key))


def rsa_key_pair() -> tuple[bytes, bytes]:
    """A fresh RSA key as (private PEM, public PEM), for signing service-account tokens."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    public = key.public_key().public_bytes(
        serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo
    )
    return _private_pem(key), public


def _private_pem(key: ec.EllipticCurvePrivateKey | rsa.RSAPrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM,
        serialization.PrivateFormat.PKCS8,
        serialization.NoEncryption(),
    )


def _now() -> datetime.datetime:
    return datetime.datetime.now(datetime.UTC)
