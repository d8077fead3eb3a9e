"""runs/manifest.py: the manifest records torchwork's version from the installed distribution's metadata (runs
lies below the public API, so it does not import ``torchwork`` for ``__version__``); the two must agree."""

from __future__ import annotations

from importlib import metadata

import torchwork


def test_the_recorded_version_is_the_package_version() -> None:
    assert metadata.version("torchwork") == torchwork.__version__, "reinstall: pip install -e . (make venv)"
