"""serve/cli.py in this process: the flags and their defaults (the ServeConfig's), ``--threads`` read as a count
or ``auto``, and ``torchwork serve``'s settings checked before any model loads: a public address without keys,
a port already taken, a folder that is no artifact, each one line, the socket closed again. Real servers run
in tests/serve/test_serve_http.py and the others."""

from __future__ import annotations

import argparse
import socket

import pytest

from torchwork.errors import TorchworkError
from torchwork.serve.cli import add_arguments, cli_main, thread_count
from torchwork.serve.config import ServeConfig


def _parsed(*argv: str) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="torchwork serve")
    add_arguments(parser)
    return parser.parse_args(list(argv))


def test_the_flags_default_to_the_serve_configs_values() -> None:
    args, defaults = _parsed("artifact"), ServeConfig()
    for name in ("host", "port", "max_batch_size", "max_wait_ms", "max_queue", "timeout_s", "max_connections", "http"):
        assert getattr(args, name) == getattr(defaults, name), name
    assert args.model_process and args.threads is None and args.compile == "off"
    assert _parsed("a", "b=c", "--no-model-process", "--max-wait-ms", "2.5").max_wait_ms == 2.5


@pytest.mark.parametrize("text", ["0", "many", "-2"])
def test_threads_is_a_count_of_at_least_one_or_auto(text) -> None:
    assert thread_count("AUTO") is None and thread_count("4") == 4
    with pytest.raises(argparse.ArgumentTypeError, match="thread count"):
        thread_count(text)


def test_a_public_address_without_keys_is_refused_before_anything_loads(tmp_path) -> None:
    with pytest.raises(TorchworkError, match="insecure-no-auth"):
        cli_main(_parsed(str(tmp_path / "none"), "--host", "0.0.0.0", "--port", "0"))


def test_a_taken_port_is_said_at_once(tmp_path) -> None:
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen(1)
        port = taken.getsockname()[1]
        with pytest.raises(TorchworkError, match=str(port)):
            cli_main(_parsed(str(tmp_path / "none"), "--port", str(port)))


def test_a_folder_that_is_not_an_artifact_is_refused_and_the_port_is_free_again(tmp_path) -> None:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    (tmp_path / "empty").mkdir()
    with pytest.raises(TorchworkError, match="manifest.json is missing, so this is not a"):
        cli_main(_parsed(str(tmp_path / "empty"), "--port", str(port)))
    with socket.socket() as again:  # the server's socket was closed: the port binds again
        again.bind(("127.0.0.1", port))
