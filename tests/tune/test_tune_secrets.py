"""``torchwork tune show`` with a storage URL holding a password: every error it prints masks the password
(``user:pw@``, ``:pw@``, ``?password=``), whatever the error (a server not listening, a scheme it does not
know, a port that is not a number)."""

from __future__ import annotations

import pytest

from torchwork.cli import main

SECRET = "Hunter2xyz"


@pytest.fixture(autouse=True)
def _passive_waiting(monkeypatch):
    """The command sets OMP_WAIT_POLICY when torch is not imported yet: set here, so that the test leaves the
    environment as it found it."""
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")


@pytest.mark.parametrize("url", [
    f"postgresql://tuner:{SECRET}@127.0.0.1:1/studies",  # nothing listens on port 1
    f"postgresql://:{SECRET}@127.0.0.1:1/studies",
    f"postgresql://tuner@127.0.0.1:1/studies?sslmode=disable&password={SECRET}",
    f"postgresql://tuner:{SECRET}@127.0.0.1:notaport/studies",
    f"bogus://:{SECRET}@db/studies?Token={SECRET}",
])
def test_tune_show_prints_a_bad_url_with_its_password_masked(url, capsys):
    assert main(["tune", "show", url]) == 2
    captured = capsys.readouterr()
    assert "torchwork: error:" in captured.err and "***" in captured.err
    assert SECRET not in captured.err + captured.out
