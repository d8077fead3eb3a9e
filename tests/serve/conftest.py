"""The serving tests' shared fixtures, registered here so that a session-scoped model folder or server is built
once per test process: imported into each test module instead, pytest keeps one per module."""

from serve_fixtures import digits_server, models_dir, own_slow_server, slow_server, text_server

__all__ = ["digits_server", "models_dir", "own_slow_server", "slow_server", "text_server"]
