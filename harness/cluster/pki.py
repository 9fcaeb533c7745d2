"""Keys and certificates for a local control plane: a CA, serving certs, client identities, the SA key pair.

ECDSA P-256 keys keep generation in the millisecond range, so every cluster gets fresh material.
"""

from __future__ import annotations

import datetime
import ipaddress
import os
from dataclasses import dataclass
from pathlib import Path

from cryptography import x509
from cryptography.hazmat.primitives import hashes, serialization
from cryptography.hazmat.primitives.asymmetric import ec
from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

_VALIDITY = datetime.timedelta(days=365)


@dataclass(frozen=True, kw_only=True)
class CertPair:
    cert: Path
    key: Path


@dataclass(frozen=True, kw_only=True)
class ClusterPki:
    ca: CertPair
    apiserver: CertPair
    admin: CertPair
    service_account_key: Path
    service_account_pub: Path


def _write_private(path: Path, data: bytes) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "wb") as f:
        f.write(data)


def _key_pem(key: ec.EllipticCurvePrivateKey) -> bytes:
    return key.private_bytes(
        serialization.Encoding.PEM, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()
    )


def _name(common_name: str, organizations: tuple[str, ...] = ()) -> x509.Name:
    attrs = [x509.NameAttribute(NameOID.ORGANIZATION_NAME, o) for o in organizations]
    attrs.append(x509.NameAttribute(NameOID.COMMON_NAME, common_name))
    return x509.Name(attrs)


@dataclass(frozen=True, kw_only=True)
class Authority:
    """A CA able to sign further certificates (kept in memory by the caller that made it)."""

    key: ec.EllipticCurvePrivateKey
    cert: x509.Certificate
    pair: CertPair

    @classmethod
    def create(cls, *, directory: Path, name: str) -> Authority:
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        cert = (
            x509.CertificateBuilder()
            .subject_name(_name(name))
            .issuer_name(_name(name))
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=True, path_length=None), critical=True)
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
        pair = CertPair(cert=directory / f"{name}.crt", key=directory / f"{name}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(pair.key, _key_pem(key))
        return cls(key=key, cert=cert, pair=pair)

    @classmethod
    def load(cls, pair: CertPair) -> Authority:
        key = serialization.load_pem_private_key(pair.key.read_bytes(), password=None)
        if not isinstance(key, ec.EllipticCurvePrivateKey):
            raise TypeError(f"{pair.key} is not an EC key")
        return cls(key=key, cert=x509.load_pem_x509_certificate(pair.cert.read_bytes()), pair=pair)

    def issue(
        self,
        *,
        directory: Path,
        file_stem: str,
        common_name: str,
        organizations: tuple[str, ...] = (),
        server_names: tuple[str, ...] = (),
        server_ips: tuple[str, ...] = (),
        client: bool,
    ) -> CertPair:
        """Sign a leaf certificate: a server cert when names/IPs are given, a client cert when ``client``."""
        key = ec.generate_private_key(ec.SECP256R1())
        now = datetime.datetime.now(datetime.UTC)
        usages = [ExtendedKeyUsageOID.CLIENT_AUTH] if client else []
        if server_names or server_ips:
            usages.append(ExtendedKeyUsageOID.SERVER_AUTH)
        builder = (
            x509.CertificateBuilder()
            .subject_name(_name(common_name, organizations))
            .issuer_name(self.cert.subject)
            .public_key(key.public_key())
            .serial_number(x509.random_serial_number())
            .not_valid_before(now - datetime.timedelta(minutes=5))
            .not_valid_after(now + _VALIDITY)
            .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
            .add_extension(x509.ExtendedKeyUsage(usages), critical=False)
        )
        if server_names or server_ips:
            sans: list[x509.GeneralName] = [x509.DNSName(n) for n in server_names]
            sans += [x509.IPAddress(ipaddress.ip_address(ip)) for ip in server_ips]
            builder = builder.add_extension(x509.SubjectAlternativeName(sans), critical=False)
        cert = builder.sign(self.key, hashes.SHA256())
        pair = CertPair(cert=directory / f"{file_stem}.crt", key=directory / f"{file_stem}.key")
        pair.cert.write_bytes(cert.public_bytes(serialization.Encoding.PEM))
        _write_private(pair.key, _key_pem(key))
        return pair


def create_cluster_pki(*, directory: Path) -> ClusterPki:
    """Everything kube-apiserver and its clients need, written under ``directory`` (keys 0600)."""
    directory.mkdir(parents=True, exist_ok=True)
    ca = Authority.create(directory=directory, name="ca")
    apiserver = ca.issue(
        directory=directory,
        file_stem="apiserver",
        common_name="kube-apiserver",
        server_names=("localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"),
        server_ips=("127.0.0.1", "10.0.0.1"),
        client=False,
    )
    admin = ca.issue(
        directory=directory,
        file_stem="admin",
        common_name="fakedev-admin",
        organizations=("system:masters",),
        client=True,
    )
    sa_key = ec.generate_private_key(ec.SECP256R1())
    sa_key_path, sa_pub_path = directory / "sa.key", directory / "sa.pub"
    _write_private(sa_key_path, _key_pem(sa_key))
    sa_pub_path.write_bytes(
        sa_key.public_key().public_bytes(serialization.Encoding.PEM, serialization.PublicFormat.SubjectPublicKeyInfo)
    )
    return ClusterPki(
        ca=ca.pair,
        apiserver=apiserver,
        admin=admin,
        service_account_key=sa_key_path,
        service_account_pub=sa_pub_path,
    )
