"""A ``torchwork serve`` that cannot start exits non-zero with one line and leaves no process behind: bad TLS
files and a port in use are found before any model loads, and a start interrupted while the model process
builds (Ctrl-C, or SIGTERM from a unit manager) ends that process too. Each server is a real subprocess; the
processes it started are found afterwards by an environment variable they inherit (an orphan is no longer
the server's child)."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from pathlib import Path

import psutil
import pytest
from serve_fixtures import HERE, SRC

from torchwork.errors import ConfigError
from torchwork.serve.tls import PASSWORD_ENVIRONMENT, check_tls

pytestmark = pytest.mark.skipif(subprocess.run(["which", "openssl"], capture_output=True).returncode != 0,
                                reason="openssl is not installed")
TAG = "TORCHWORK_TEST_SERVER_TAG"


def tagged(tag: str) -> list[psutil.Process]:
    """The live processes (zombies aside) whose environment carries ``tag``."""
    found = []
    for process in psutil.process_iter():
        try:
            if process.status() != psutil.STATUS_ZOMBIE and process.environ().get(TAG) == tag:
                found.append(process)
        except psutil.Error:
            pass
    return found


def left_behind(tag: str, grace_s: float = 5.0) -> list[str]:
    """The command lines of ``tag``'s processes still running after ``grace_s``; each is then killed (so a
    failing test leaves nothing either)."""
    deadline = time.monotonic() + grace_s
    while (found := tagged(tag)) and time.monotonic() < deadline:
        time.sleep(0.1)
    lines = []
    for process in found:
        try:
            lines.append(" ".join(process.cmdline())[:160])
            process.kill()
        except psutil.Error:
            pass
    return lines


def serve_command(folder: Path, factory: str, *flags: str) -> list[str]:
    return [sys.executable, "-m", "torchwork.cli", "serve", str(folder), "--factory", f"serve_models:{factory}",
            "--threads", "1", *flags]


def serve_env(tag: str, **more: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(SRC), str(HERE)]), TAG: tag}
    env.pop("TORCHWORK_API_KEYS", None)
    env.pop(PASSWORD_ENVIRONMENT, None)
    env.update(more)
    return env


def openssl(*arguments: str | Path) -> None:
    subprocess.run(["openssl", *map(str, arguments)], check=True, capture_output=True)


@pytest.fixture(scope="module")
def pem_files(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Two self-signed certificates and their keys (EC: quick to make), and every bad file of issue 49."""
    folder = tmp_path_factory.mktemp("tls")
    for name in ("good", "other"):
        openssl("req", "-x509", "-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes",
                "-keyout", folder / f"{name}.key", "-out", folder / f"{name}.crt", "-days", "1",
                "-subj", "/CN=127.0.0.1")
    openssl("pkey", "-in", folder / "good.key", "-aes256", "-passout", "pass:s3cret", "-out", folder / "locked.key")
    for name in ("crt", "key"):
        good = (folder / f"good.{name}").read_bytes()
        (folder / f"random.{name}").write_bytes(os.urandom(2000))
        (folder / f"empty.{name}").write_bytes(b"")
        (folder / f"truncated.{name}").write_bytes(good[:len(good) * 2 // 3])
    return folder


# (certificate, key, passphrase, words of the one line)
BAD_TLS = {
    "random certificate": ("random.crt", "good.key", None, "random.crt is not PEM (no '-----BEGIN' line)"),
    "random key": ("good.crt", "random.key", None, "random.key is not PEM"),
    "empty certificate": ("empty.crt", "good.key", None, "empty.crt is empty"),
    "empty key": ("good.crt", "empty.key", None, "empty.key is empty"),
    "truncated certificate": ("truncated.crt", "good.key", None,
                              "truncated.crt is truncated: its '-----BEGIN CERTIFICATE-----' block has no END"),
    "truncated key": ("good.crt", "truncated.key", None, "truncated.key is truncated"),
    "mismatched key": ("good.crt", "other.key", None, "other.key is not the private key of the certificate in"),
    "passphrase-protected key": ("good.crt", "locked.key", None,
                                 f"locked.key is encrypted with a passphrase; give it in the environment variable "
                                 f"{PASSWORD_ENVIRONMENT}, or write the key out unencrypted"),
    "wrong passphrase": ("good.crt", "locked.key", "wrong", "does not decrypt it"),
    "swapped files": ("good.key", "good.crt", None, "holds no certificate (it holds PRIVATE KEY); are "
                                                    "--ssl-certfile and --ssl-keyfile swapped?"),
}


@pytest.mark.parametrize("case", list(BAD_TLS))
def test_bad_tls_files_refuse_the_start_in_one_line_before_the_model_loads(models_dir, pem_files, case):
    """Each once surfaced as a traceback after the model had loaded and warmed up, and the server never
    exited (its model process ignored SIGTERM and waited on a socket the server held): 7 of 7 hung."""
    certificate, key, passphrase, words = BAD_TLS[case]
    tag = uuid.uuid4().hex
    env = serve_env(tag, **({PASSWORD_ENVIRONMENT: passphrase} if passphrase else {}))
    try:
        result = subprocess.run(serve_command(models_dir, "text_predictor", "--port", "0", "--ssl-certfile",
                                              str(pem_files / certificate), "--ssl-keyfile", str(pem_files / key)),
                                capture_output=True, text=True, env=env, timeout=60)
    finally:
        leftovers = left_behind(tag, grace_s=1.0)
    assert result.returncode == 2, result.stderr
    assert result.stderr.startswith("torchwork: error: --ssl-") and words in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "Traceback" not in result.stderr, result.stderr
    assert "warming up" not in result.stdout  # refused before any model loaded
    assert not leftovers, leftovers


def test_the_same_checks_in_process_and_a_passphrase_that_decrypts(pem_files):
    assert check_tls(str(pem_files / "good.crt"), str(pem_files / "locked.key"), "s3cret") is not None
    for certificate, key, passphrase, words in BAD_TLS.values():
        with pytest.raises(ConfigError, match="^--ssl-") as refused:
            check_tls(str(pem_files / certificate), str(pem_files / key), passphrase)
        assert words in str(refused.value) and "\n" not in str(refused.value)


def test_a_port_in_use_refuses_the_start_before_the_model_loads(models_dir):
    """The factory would fail to build the model: the port must be what is refused, first."""
    tag = uuid.uuid4().hex
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        try:
            result = subprocess.run(serve_command(models_dir, "unbuildable_predictor", "--port", str(port)),
                                    capture_output=True, text=True, env=serve_env(tag), timeout=60)
        finally:
            leftovers = left_behind(tag, grace_s=1.0)
    assert result.returncode == 2 and f"cannot listen on 127.0.0.1:{port}" in result.stderr, result.stderr
    assert len(result.stderr.strip().splitlines()) == 1 and "warming up" not in result.stdout
    assert not leftovers, leftovers


def _sigint_as_at_a_terminal() -> None:
    """A suite started in the background (``bash .ci/run &``, nohup) hands its processes SIGINT ignored, and
    a Python started so keeps ignoring it: the server would never see this test's Ctrl-C (it hung in CI)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "sigterm"])
def test_a_start_interrupted_while_the_model_process_builds_leaves_no_process(models_dir, tmp_path, sig):
    """The model process takes two minutes to build (slow_start_predictor); the server is stopped while it
    does. Ctrl-C once hung the server's exit (waiting on a child that ignores SIGTERM, which waited on the
    server); SIGTERM left the model process building on, holding the server's output open."""
    tag, building = uuid.uuid4().hex, tmp_path / "building"
    server = subprocess.Popen(serve_command(models_dir, "slow_start_predictor", "--port", "0"),
                              stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                              env=serve_env(tag, SERVE_TEST_BUILDING=str(building), PYTHONFAULTHANDLER="1"),
                              preexec_fn=_sigint_as_at_a_terminal)
    try:
        assert "warming up in a model process" in server.stdout.readline()
        deadline = time.monotonic() + 60
        while not building.exists():
            assert time.monotonic() < deadline and server.poll() is None, "the model process never started"
            time.sleep(0.05)
        server.send_signal(sig)
        try:
            _, stderr = server.communicate(timeout=90)
        except subprocess.TimeoutExpired:  # where it was, from faulthandler, rather than a bare timeout
            server.send_signal(signal.SIGABRT)
            _, stderr = server.communicate(timeout=30)
            pytest.fail(f"the server did not end within 90 s of the signal; its threads then:\n{stderr[-6000:]}")
    finally:
        if server.poll() is None:
            server.kill()
            server.communicate()
        leftovers = left_behind(tag)
    if sig == signal.SIGINT:
        assert server.returncode == 130 and stderr == "torchwork: interrupted\n", stderr
    else:
        assert server.returncode == -signal.SIGTERM
    assert not leftovers, leftovers
