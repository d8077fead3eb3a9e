"""Headless Chromium for the inspect page tests: a screenshot and the console errors a page logged."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")


def render_in_chromium(page: Path, folder: Path, height: int = 1600) -> tuple[Path, list[str]]:
    """Open ``page`` in headless Chromium: (its screenshot, the console errors it logged)."""
    screenshot = folder / f"{page.stem}.png"
    done = subprocess.run(
        [CHROMIUM, "--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         f"--user-data-dir={folder / 'profile'}", "--enable-logging=stderr", "--v=0",
         f"--window-size=1280,{height}", f"--screenshot={screenshot}", page.as_uri()],
        capture_output=True, text=True, timeout=120)
    assert screenshot.is_file(), done.stderr[-2000:]
    return screenshot, [line for line in done.stderr.splitlines() if "CONSOLE" in line and "ERROR" in line.upper()]
