"""serve/server.py: setting the server up fails with what to do (port taken, predictor not found)."""

from __future__ import annotations

import pytest

from torchwork.errors import ConfigError


def test_server_setup_errors_say_what_to_do(tmp_path):
    from torchwork.serve.server import bind, load_predictor

    taken = bind("127.0.0.1", 0)
    try:
        with pytest.raises(ConfigError, match="cannot listen on 127.0.0.1:.*Pick another --port"):
            bind("127.0.0.1", taken.getsockname()[1])
    finally:
        taken.close()
    for host in ("999.1.1.1", "no.such.host.invalid"):  # the advice was about the port
        with pytest.raises(ConfigError, match=rf"cannot listen on {host}:0: .*--host must be an address of this "):
            bind(host, 0)
    with pytest.raises(ConfigError, match="write it as module:function"):
        load_predictor(str(tmp_path), "no_colon")
    with pytest.raises(ConfigError, match="Check the module is importable"):
        load_predictor(str(tmp_path), "no_such_module_here:build")
    with pytest.raises(ConfigError, match="returned dict, not a predictor"):
        load_predictor("{}", "json:loads")  # json.loads("{}") is a dict
