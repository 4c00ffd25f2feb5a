"""TLS for a grading cluster: Dask's own (https://distributed.dask.org/en/stable/tls.html), with certificates the
course writes.

Dask runs whatever a client sends it. With TLS every connection (client → scheduler, scheduler ↔ workers) is
encrypted and both ends must show a certificate signed by the cluster's CA, so only machines holding the cluster's
key can submit work. `cluster_certs(folder)` writes that CA's certificate and one certificate and key signed by it
for the scheduler, the workers and the instructor's client (Dask does not check host names, so one certificate
serves every machine); the CA's private key is never written, so nothing else can ever be signed by it: to change
the key, write new certificates into a new folder and restart the cluster with them.

The client reads them from Dask's configuration (`distributed.comm.tls.*` in ~/.config/dask/distributed.yaml, or
the environment variables in `CLIENT_ENV`); `client_security(address)` checks that a `tls://` address has them
before anything is graded.
"""

from __future__ import annotations

import datetime
import os
from pathlib import Path

from twoprim.core.errors import CourseError

__all__ = ["cluster_certs", "issue", "client_security", "CLIENT_ENV", "FILES"]

FILES = {"ca": "ca.pem", "cert": "cert.pem", "key": "key.pem"}
# Dask's configuration keys as environment variables (read when dask is imported)
CLIENT_ENV = {
    "ca": "DASK_DISTRIBUTED__COMM__TLS__CA_FILE",
    "cert": "DASK_DISTRIBUTED__COMM__TLS__CLIENT__CERT",
    "key": "DASK_DISTRIBUTED__COMM__TLS__CLIENT__KEY",
}
REQUIRE_ENV = "DASK_DISTRIBUTED__COMM__REQUIRE_ENCRYPTION"
SUBJECT = "Two Primitives grading cluster"


def issue(
    common_name: str, *, dns_names: tuple[str, ...] = (), days: int = 365, start: datetime.datetime | None = None
) -> dict[str, bytes]:
    """A CA of its own and one certificate it signed, for `common_name` and `dns_names` (server and client use), valid
    from `start` (default: 5 minutes ago) for `days`: {"ca", "cert", "key"} as PEM. The CA's key is dropped."""
    from cryptography import x509
    from cryptography.hazmat.primitives import hashes, serialization
    from cryptography.hazmat.primitives.asymmetric import ec
    from cryptography.x509.oid import ExtendedKeyUsageOID, NameOID

    start = start or datetime.datetime.now(datetime.UTC) - datetime.timedelta(minutes=5)
    end = start + datetime.timedelta(days=days, minutes=5)
    ca_key, key = ec.generate_private_key(ec.SECP256R1()), ec.generate_private_key(ec.SECP256R1())
    ca_name = x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, f"{common_name} CA")])
    ca = (
        x509.CertificateBuilder()
        .subject_name(ca_name)
        .issuer_name(ca_name)
        .public_key(ca_key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=True, path_length=0), critical=True)
        .add_extension(
            x509.KeyUsage(
                digital_signature=False,
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
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(ca_key.public_key()), critical=False)
        .sign(ca_key, hashes.SHA256())
    )
    builder = (
        x509.CertificateBuilder()
        .subject_name(x509.Name([x509.NameAttribute(NameOID.COMMON_NAME, common_name)]))
        .issuer_name(ca_name)
        .public_key(key.public_key())
        .serial_number(x509.random_serial_number())
        .not_valid_before(start)
        .not_valid_after(end)
        .add_extension(x509.BasicConstraints(ca=False, path_length=None), critical=True)
        .add_extension(
            x509.ExtendedKeyUsage([ExtendedKeyUsageOID.SERVER_AUTH, ExtendedKeyUsageOID.CLIENT_AUTH]), critical=False
        )
        .add_extension(x509.SubjectKeyIdentifier.from_public_key(key.public_key()), critical=False)
        .add_extension(x509.AuthorityKeyIdentifier.from_issuer_public_key(ca_key.public_key()), critical=False)
    )
    if dns_names:
        builder = builder.add_extension(
            x509.SubjectAlternativeName([x509.DNSName(n) for n in dns_names]), critical=False
        )
    cert = builder.sign(ca_key, hashes.SHA256())
    pem = serialization.Encoding.PEM
    return {
        "ca": ca.public_bytes(pem),
        "cert": cert.public_bytes(pem),
        "key": key.private_bytes(pem, serialization.PrivateFormat.PKCS8, serialization.NoEncryption()),
    }


def cluster_certs(folder: Path, *, days: int = 365) -> dict[str, Path]:
    """Write ca.pem, cert.pem and key.pem (mode 0600) into `folder` and return their paths; refuses, writing
    nothing, when any of them exists."""
    if days < 1:
        raise CourseError(f"--days must be at least 1 (got {days})")
    folder = Path(folder)
    paths = {role: folder / name for role, name in FILES.items()}
    existing = [str(p) for p in paths.values() if p.exists()]
    if existing:
        raise CourseError(
            f"{', '.join(existing)} already exist(s): certificates are never overwritten. Write new "
            f"ones into an empty folder, or move these away first"
        )
    folder.mkdir(parents=True, exist_ok=True)
    issued = issue(SUBJECT, days=days)
    contents = {"ca": (issued["ca"], 0o644), "cert": (issued["cert"], 0o644), "key": (issued["key"], 0o600)}
    written: list[Path] = []
    try:
        for role, (data, mode) in contents.items():
            fd = os.open(paths[role], os.O_WRONLY | os.O_CREAT | os.O_EXCL, mode)  # never over another's file
            written.append(paths[role])
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.chmod(paths[role], mode)  # whatever the umask
    except OSError as err:
        for path in written:  # all three or none: a half set would not serve
            path.unlink(missing_ok=True)
        raise CourseError(f"could not write the certificates into {folder}: {err}") from err
    return paths


def start_commands(paths: dict[str, Path], scheduler: str = "tls://SCHEDULER-HOST:8786") -> str:
    """How to run a cluster and the client with the certificates at `paths` (printed by `./course cluster-certs`)."""
    flags = f"--tls-ca-file {paths['ca']} --tls-cert {paths['cert']} --tls-key {paths['key']}"
    env = "\n".join(f"export {CLIENT_ENV[role]}={paths[role]}" for role in ("ca", "cert", "key"))
    return (
        f"Copy the three files to every grading machine (key.pem stays private: mode 0600), then:\n"
        f"  dask scheduler --protocol tls --port 8786 {flags}\n"
        f"  dask worker {scheduler} --nthreads 1 --nworkers 4 {flags}\n"
        f"and, where you run ./course autograde --scheduler {scheduler}:\n{env}\nexport {REQUIRE_ENV}=True"
    )


def client_security(address: str):
    """Dask's `Security` for a client of the scheduler at `address`, from Dask's configuration; a `tls://` address
    without the client's certificate, or a plain one where the configuration requires TLS, is refused with what to
    set."""
    from distributed import Security

    security = Security()
    tls = address.startswith("tls://")
    if tls and not (security.tls_ca_file and security.tls_client_cert):
        missing = [
            CLIENT_ENV[role]
            for role, value in (("ca", security.tls_ca_file), ("cert", security.tls_client_cert))
            if not value
        ]
        raise CourseError(
            f"the Dask scheduler at {address} speaks TLS, but Dask's configuration has no "
            f"{' and no '.join(missing)}; nothing was graded or written. Export "
            f"{', '.join(CLIENT_ENV.values())} with the files `./course cluster-certs` wrote (or set "
            f"distributed.comm.tls in ~/.config/dask/distributed.yaml)"
        )
    if not tls and security.require_encryption:
        raise CourseError(
            f"Dask's configuration requires TLS ({REQUIRE_ENV}), but {address} is not a tls:// "
            f"address; nothing was graded or written. Use the scheduler's tls:// address"
        )
    for role, path in (
        ("ca", security.tls_ca_file),
        ("cert", security.tls_client_cert),
        ("key", security.tls_client_key),
    ):
        if tls and path and not path.lstrip().startswith("-----BEGIN") and not Path(path).is_file():
            raise CourseError(f"{CLIENT_ENV[role]} names {path}, which is not a file; nothing was graded or written")
    return security
