"""Rerun the commands whose output the documentation shows, and rewrite those excerpts (``make docs-output``).

A console excerpt in README.md or docs/ is a fenced ``console`` block preceded by a marker::

    <!-- output
    command: torchwork data describe tweets
    head: 12
    -->

The marker's lines, each ``key: value``:

- ``command:`` a shell command, run from the repository root with ``.venv/bin`` first on ``PATH``; several
  ``command:`` lines make one excerpt, each shown after ``$ ``. ``source: previous-python`` instead runs the
  page's python blocks up to this marker (in one namespace, as the tests run them) and shows what the last
  of them printed, without a ``$`` line.
- ``head: N`` keeps the first N lines of each command's output (then ``...``); ``grep: TEXT`` keeps only
  the lines containing TEXT; ``after: TEXT`` drops the lines before the first one containing TEXT.
- ``exact: yes``: the output does not depend on the machine or the moment, so the test suite reruns it and
  fails when the excerpt is stale (``tests/docs/test_docs_pages.py``).
- ``on-request: DATE``: a long command (the full quickstart), rerun only by ``docs_output.py --all``, which
  writes the date of the run here.
- ``removes: FILE``: a file the command writes into the repository, deleted afterwards.

Paths of this checkout are written as ``.`` and of the virtual environment's site-packages as ``...``.

Example:
    >>> block = parse_marker("<!-- output\\ncommand: echo hi\\nexact: yes\\n-->")
    >>> block.commands, block.exact
    (['echo hi'], True)
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
MARKER = re.compile(r"<!-- output\n(?P<body>.*?)\n-->\n```console\n(?P<excerpt>.*?)```", re.DOTALL)
PYTHON_BLOCK = re.compile(r"```python\n(?P<code>.*?)```", re.DOTALL)
TIMEOUT_S = 1800


@dataclasses.dataclass
class Marker:
    commands: list[str]
    source: str | None = None
    head: int | None = None
    grep: str | None = None
    after: str | None = None
    exact: bool = False
    on_request: str | None = None
    removes: list[str] = dataclasses.field(default_factory=list)


def parse_marker(text: str) -> Marker:
    """The settings of one ``<!-- output ... -->`` marker (see the module's docstring)."""
    body = text.strip().removeprefix("<!-- output").removesuffix("-->")
    marker = Marker(commands=[])
    for line in body.strip().splitlines():
        key, _, value = line.partition(":")
        key, value = key.strip(), value.strip()
        if key == "command":
            marker.commands.append(value)
        elif key == "source":
            marker.source = value
        elif key == "head":
            marker.head = int(value)
        elif key == "grep":
            marker.grep = value
        elif key == "after":
            marker.after = value
        elif key == "exact":
            marker.exact = value.lower() in ("yes", "true", "1")
        elif key == "on-request":
            marker.on_request = value
        elif key == "removes":
            marker.removes.append(value)
        else:
            raise ValueError(f"unknown key {key!r} in an output marker: {line!r}")
    if not marker.commands and marker.source != "previous-python":
        raise ValueError(f"an output marker needs a command: or source: previous-python line: {text!r}")
    return marker


def _environment() -> dict[str, str]:
    env = dict(os.environ)
    env["PATH"] = f"{ROOT / '.venv' / 'bin'}{os.pathsep}{env.get('PATH', '')}"
    env["PYTHONPATH"] = str(ROOT / "src")
    env.update(COLUMNS="110", TERM="dumb", NO_COLOR="1", PYTHONHASHSEED="0")
    env.pop("TORCHWORK_RESUME", None)
    return env


def _tidy(text: str) -> str:
    site = next((str(p) for p in sorted((ROOT / ".venv" / "lib").glob("python*/site-packages"))), None)
    if site:
        text = text.replace(site, "...")
    text = text.replace(str(ROOT), ".")
    return "\n".join(line.rstrip() for line in text.splitlines())


def _run(command: str, marker: Marker) -> str:
    done = subprocess.run(command, shell=True, cwd=ROOT, env=_environment(), stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, timeout=TIMEOUT_S, stdin=subprocess.DEVNULL)
    return _select(_tidy(done.stdout), marker)


def _select(text: str, marker: Marker) -> str:
    lines = text.splitlines()
    if marker.after:
        first = next((i for i, line in enumerate(lines) if marker.after in line), len(lines))
        lines = lines[first:]
    if marker.grep:
        lines = [line for line in lines if marker.grep in line]
    if marker.head is not None and len(lines) > marker.head:
        lines = [*lines[:marker.head], "..."]
    return "\n".join(lines)


SENTINEL = "----- torchwork docs: the last block starts here -----"


def _run_python(blocks: list[str], marker: Marker) -> str:
    code = "\n".join([*blocks[:-1], f"print({SENTINEL!r}, flush=True)", blocks[-1]])
    with tempfile.TemporaryDirectory(prefix="torchwork-docs-") as folder:
        script = Path(folder) / "block.py"
        script.write_text(code)
        done = subprocess.run([str(ROOT / ".venv" / "bin" / "python"), str(script)], cwd=folder,
                              env=_environment(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                              timeout=TIMEOUT_S)
        printed = done.stdout.replace(folder, "...")
        return _select(_tidy(printed.split(SENTINEL + "\n", 1)[-1]), marker)


def excerpt_for(marker: Marker, page_text_before: str) -> str:
    """What the excerpt of ``marker`` reads now: the commands rerun, their output selected."""
    if marker.source == "previous-python":
        blocks = PYTHON_BLOCK.findall(page_text_before)
        if not blocks:
            raise ValueError("source: previous-python, but no python block comes before this marker")
        return _run_python(blocks, marker) + "\n"
    try:
        parts = [f"$ {command}\n{_run(command, marker)}".rstrip() for command in marker.commands]
    finally:
        for name in marker.removes:
            (ROOT / name).unlink(missing_ok=True)
    return "\n".join(parts) + "\n"


def markers_in(text: str) -> list[tuple[re.Match[str], Marker]]:
    return [(match, parse_marker(f"<!-- output\n{match['body']}\n-->")) for match in MARKER.finditer(text)]


def documents() -> list[Path]:
    return [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]


def _with_date(body: str) -> str:
    today = datetime.date.today().isoformat()
    return re.sub(r"^on-request:.*$", f"on-request: {today}", body, flags=re.MULTILINE)


def regenerate(path: Path, *, include_on_request: bool) -> int:
    """Rewrite the excerpts of one page; returns how many changed."""
    text = path.read_text()
    changed = 0
    out: list[str] = []
    position = 0
    for match, marker in markers_in(text):
        out.append(text[position:match.start()])
        position = match.end()
        if marker.on_request and not include_on_request:
            out.append(match.group(0))
            continue
        body = _with_date(match["body"]) if marker.on_request else match["body"]
        new = excerpt_for(marker, text[:match.start()])
        changed += new != match["excerpt"]
        out.append(f"<!-- output\n{body}\n-->\n```console\n{new}```")
        print(f"{path.relative_to(ROOT)}: {'; '.join(marker.commands) or marker.source}", flush=True)
    out.append(text[position:])
    path.write_text("".join(out))
    return changed


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--all", action="store_true", help="also rerun the long excerpts marked on-request")
    parser.add_argument("files", nargs="*", type=Path, help="pages to regenerate (default: README.md and docs/)")
    args = parser.parse_args(argv)
    changed = sum(regenerate(path.resolve(), include_on_request=args.all) for path in args.files or documents())
    print(f"{changed} excerpt(s) changed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
