"""Checking ``--ssl-certfile`` and ``--ssl-keyfile`` before any model loads, with one line per problem.

uvicorn reads the two files only once the server starts, after the model has loaded and warmed up, and
answers a bad one with a traceback. :func:`check_tls` reads them first, as regular files of at most
:data:`MAX_PEM_BYTES`, and says which file is wrong and how: empty, not PEM (DER, or anything else),
truncated (a ``BEGIN`` line without its ``END``), the wrong kind (a key given as the certificate, say),
encrypted with a passphrase that was not given (or does not decrypt it), or a key that is not the
certificate's. It then builds the server's :class:`ssl.SSLContext` exactly as uvicorn will, so what passes
here starts there.

A key encrypted with a passphrase is decrypted with :data:`PASSWORD_ENVIRONMENT` (``torchwork serve``) or
``ServeConfig.ssl_keyfile_password``; never from the command line, which other users can read in ``ps``.

Example:
    >>> import pathlib, tempfile
    >>> folder = pathlib.Path(tempfile.mkdtemp())
    >>> _ = (folder / "cert.pem").write_text("-----BEGIN CERTIFICATE-----\\nMIIB")
    >>> _ = (folder / "key.pem").write_text("-----BEGIN PRIVATE KEY-----")
    >>> check_tls(str(folder / "cert.pem"), str(folder / "key.pem"))  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: --ssl-certfile .../cert.pem is truncated: its '-----BEGIN CERTIFICATE-----' ...
"""

from __future__ import annotations

import re
import ssl
from collections.abc import Callable

from torchwork.errors import ConfigError
from torchwork.paths import FileTooLarge, NotRegularFile, read_regular

MAX_PEM_BYTES = 1 << 20  # a certificate chain is a few KiB; 1 MiB is far beyond any real one
PASSWORD_ENVIRONMENT = "TORCHWORK_SSL_KEYFILE_PASSWORD"

_BLOCK = re.compile(rb"-----(BEGIN|END) ([A-Z0-9 ]+)-----")
_CONVERT = {"--ssl-certfile": "openssl x509 -inform der -in {path} -out cert.pem",
            "--ssl-keyfile": "openssl pkey -inform der -in {path} -out key.pem"}


class _NoPassphrase(Exception):
    """OpenSSL asked for the key's passphrase and none was given (rather than prompting on a terminal)."""


def check_tls(certfile: str, keyfile: str, password: str | None = None) -> ssl.SSLContext:
    """The server's TLS context from ``certfile`` (the certificate chain, PEM) and ``keyfile`` (its private
    key, PEM; ``password`` decrypts it if it is encrypted); a one-line :class:`~torchwork.errors.ConfigError`
    naming the file and the fix when they cannot serve TLS."""
    certificate = _read_pem("--ssl-certfile", certfile)
    key = _read_pem("--ssl-keyfile", keyfile)
    _check_blocks("--ssl-certfile", certfile, certificate, "a certificate", lambda label: label.endswith("CERTIFICATE"))
    _check_blocks("--ssl-keyfile", keyfile, key, "a private key", lambda label: label.endswith("PRIVATE KEY"))
    try:  # the chain alone first, so that what fails next is the key's
        ssl.SSLContext(ssl.PROTOCOL_TLS_CLIENT).load_verify_locations(cadata=certificate.decode("ascii", "replace"))
    except (ssl.SSLError, ValueError) as error:
        raise ConfigError(f"--ssl-certfile {certfile}: OpenSSL cannot read the certificate in it ({_reason(error)}); "
                          "give the PEM certificate chain your certificate authority issued") from None
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)  # what uvicorn builds from the same files

    def passphrase() -> str:
        if password is None:
            raise _NoPassphrase
        return password

    try:
        context.load_cert_chain(certfile, keyfile, passphrase)
    except _NoPassphrase:
        raise ConfigError(f"--ssl-keyfile {keyfile} is encrypted with a passphrase; give it in the environment "
                          f"variable {PASSWORD_ENVIRONMENT}, or write the key out unencrypted for the server's user "
                          f"alone: openssl pkey -in {keyfile} -out key.pem && chmod 600 key.pem") from None
    except ssl.SSLError as error:
        raise ConfigError(_key_problem(keyfile, certfile, error, b"ENCRYPTED" in key)) from None
    return context


def _read_pem(flag: str, path: str) -> bytes:
    try:
        data = read_regular(path, MAX_PEM_BYTES)
    except NotRegularFile as error:
        raise ConfigError(f"{flag} {path} is {error}; give a PEM file") from None
    except FileTooLarge:
        raise ConfigError(f"{flag} {path} is larger than {MAX_PEM_BYTES} bytes: not a PEM certificate or "
                          "key") from None
    except OSError as error:
        raise ConfigError(f"{flag} {path}: cannot read it ({error.strerror})") from None
    if not data.strip():
        raise ConfigError(f"{flag} {path} is empty; give the PEM file itself (it was perhaps not copied yet)")
    return data


def _check_blocks(flag: str, path: str, data: bytes, wanted: str, fits: Callable[[str], bool]) -> None:
    """Every ``BEGIN`` line is closed by its ``END`` before the next block, and a block is what ``flag`` takes
    (``wanted``, in words; ``fits(label)`` says whether a block's label is one)."""
    blocks = [(kind.decode(), label.decode()) for kind, label in _BLOCK.findall(data)]
    if not blocks:
        convert = _CONVERT[flag].format(path=path)
        raise ConfigError(f"{flag} {path} is not PEM (no '-----BEGIN' line); give {wanted} in PEM (a DER file "
                          f"converts with: {convert})")
    opened: str | None = None
    for kind, label in [*blocks, ("BEGIN", "")]:  # the sentinel closes the file
        if kind == "BEGIN" and opened is not None:
            raise ConfigError(f"{flag} {path} is truncated: its '-----BEGIN {opened}-----' block has no END line; "
                              "copy the whole file again")
        if kind == "END" and label != opened:
            raise ConfigError(f"{flag} {path} is truncated: '-----END {label}-----' has no BEGIN line before it; "
                              "copy the whole file again")
        opened = label if kind == "BEGIN" else None
    labels = sorted({label for _, label in blocks})
    if not any(fits(label) for label in labels):
        raise ConfigError(f"{flag} {path} holds no {wanted.removeprefix('a ')} (it holds {', '.join(labels)}); "
                          "are --ssl-certfile and --ssl-keyfile swapped?")


def _key_problem(keyfile: str, certfile: str, error: ssl.SSLError, encrypted: bool) -> str:
    reason = _reason(error)
    if "KEY_VALUES_MISMATCH" in reason:
        return (f"--ssl-keyfile {keyfile} is not the private key of the certificate in --ssl-certfile {certfile}; "
                "give the key the certificate was issued for")
    if encrypted:  # (a passphrase was given: without one, check_tls has said so already)
        return (f"--ssl-keyfile {keyfile}: the passphrase given ({PASSWORD_ENVIRONMENT}) does not decrypt it "
                f"({reason}); give the key's passphrase")
    return (f"--ssl-keyfile {keyfile}: OpenSSL cannot read the private key in it ({reason}); give the PEM private "
            "key the certificate was issued for")


def _reason(error: Exception) -> str:
    reason = getattr(error, "reason", None)
    text = re.sub(r"\s*\(_ssl\.c:\d+\)", "", str(reason) if reason else str(error))  # where in CPython: noise
    return " ".join(text.split())[:200]
