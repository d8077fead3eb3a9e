"""The doctor's command lines: ``torchwork doctor`` (:func:`cli_doctor`) and ``torchwork explain`` (:func:`cli_explain`).

Example:
    >>> import argparse, contextlib, io, tempfile
    >>> with tempfile.NamedTemporaryFile("w", suffix=".txt") as pasted:
    ...     _ = pasted.write("RuntimeError: Trying to backward through the graph a second time"); pasted.flush()
    ...     with contextlib.redirect_stdout(io.StringIO()) as out:
    ...         code = cli_explain(argparse.Namespace(file=pasted.name, json=False))
    >>> code, out.getvalue().splitlines()[0]
    (0, '[backward-twice] backward through a graph whose buffers were already freed')
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from torchwork.doctor.explain import explain_text
from torchwork.doctor.findings import format_report
from torchwork.doctor.runner import run_script

MAX_EXPLAIN_BYTES = 16 * 2**20  # a traceback is a few kB; a whole log of this size is not one to paste


def cli_explain(args: argparse.Namespace) -> int:
    """``torchwork explain [FILE | -]``: 0 when something was recognised, 1 when nothing was."""
    source = args.file
    if source in (None, "-"):
        if sys.stdin.isatty():
            print("Paste the traceback or error message, then press Ctrl-D (Ctrl-Z Enter on Windows):",
                  file=sys.stderr)
        text = sys.stdin.read()
    else:
        text = _read_pasted(source)
    found = explain_text(text)
    if args.json:
        print(json.dumps({"explanations": [e.to_dict() for e in found]}, indent=2))
    elif not found:
        print("torchwork explain: no known PyTorch error in the text. Paste the whole traceback, "
              "including the last line (the exception and its message).")
    else:
        print("\n\n".join(e.format() for e in found))
    return 0 if found else 1


def _read_pasted(source: str) -> str:
    """The text of ``explain FILE`` (``source``): a regular file of at most :data:`MAX_EXPLAIN_BYTES` (a FIFO
    would wait for a writer, a link to ``/dev/zero`` never end), else a ConfigError saying what to pass."""
    from torchwork.errors import ConfigError
    from torchwork.paths import FileTooLarge, NotRegularFile, read_regular

    try:
        return read_regular(Path(source), MAX_EXPLAIN_BYTES).decode("utf-8", errors="replace")
    except FileNotFoundError:
        raise ConfigError(f"explain: no file {source!r}. Pass a file holding the traceback, or '-' "
                          "(or nothing) to read it from standard input.") from None
    except NotRegularFile as error:
        raise ConfigError(f"explain: {source!r} is {error}: pass a file holding the traceback, or pipe it "
                          "in with `torchwork explain -`.") from None
    except FileTooLarge as error:
        raise ConfigError(f"explain: {source!r} is {error}, more than a traceback: pass the part that holds "
                          "it (the last lines of a log, e.g. `tail -n 200 LOG | torchwork explain -`).") from None


def cli_doctor(args: argparse.Namespace) -> int:
    """Entry point of ``torchwork doctor`` (``--static``: the source scan, nothing run)."""
    if getattr(args, "static", False):
        from torchwork.doctor.static.cli import cli_main as static_main

        return static_main(args)
    if getattr(args, "format", None):
        from torchwork.errors import ConfigError

        raise ConfigError("doctor: --format is for --static scans; a run's findings come as text or --json.")
    result = run_script(args.script, args.args, checks=args.check or None, quiet_stdout=args.json,
                        debug=getattr(args, "debug", False), user_code=getattr(args, "user_code", None) or ())
    args.script_exit = result.script_exit  # the command line's hint about options after the script reads it
    if args.json:
        print(json.dumps(result.to_json(), indent=2))
    else:
        sys.stdout.flush()
        print("\n" + format_report(result.findings, args.script, result.script_exit))
        for problem in result.internal_errors:
            print(f"torchwork doctor: internal error in {problem} (the findings above may be incomplete)",
                  file=sys.stderr)
    return result.exit_code
