"""``torchwork doctor SCRIPT [ARGS...]``: run an unmodified script under the doctor and report.

The script runs in this process as ``__main__`` (``runpy``), with ``sys.argv = [SCRIPT, *ARGS]`` and its
folder first on ``sys.path``, exactly as ``python SCRIPT ARGS...`` would. If it raises, the traceback is
printed as Python would print it (the user's frames only: the doctor's own frames, where its hooks ran
inside the user's calls, appear with ``--debug``), and the exception is explained at the user's line.

Exit codes: 0 when no finding is an error or a warning, 1 when one is, 2 when the doctor itself failed.

Example (``--json`` sends the script's own stdout to stderr, so stdout holds only the JSON)::

    $ torchwork doctor --json examples/mistakes/missing_zero_grad.py
    {"findings": [{"id": "missing-zero-grad", "severity": "error", "file": "...", "line": 27, ...}], "exit": 0}
"""

from __future__ import annotations

import contextlib
import os
import runpy
import sys
import traceback
from collections.abc import Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from torchwork.doctor.findings import Finding, exit_code_for


@dataclass
class DoctorResult:
    """What a doctor run found: the findings, the script's exit code, and the doctor's own failures."""

    findings: list[Finding]
    script_exit: int
    internal_errors: list[str]

    @property
    def exit_code(self) -> int:
        if self.internal_errors:
            return 2
        return exit_code_for(self.findings)

    def to_json(self) -> dict[str, Any]:
        data: dict[str, Any] = {"findings": [f.to_dict() for f in self.findings], "exit": self.script_exit}
        if self.internal_errors:
            data["doctor_errors"] = list(self.internal_errors)
        return data


@contextlib.contextmanager
def _script_environment(script: Path, args: Sequence[str]) -> Iterator[None]:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv = [str(script), *args]
    sys.path.insert(0, str(script.parent))
    try:
        yield
    finally:
        sys.argv[:] = saved_argv
        sys.path[:] = saved_path


@contextlib.contextmanager
def _stdout_to_stderr() -> Iterator[None]:
    """Send everything written to stdout (Python and C level) to stderr for the duration."""
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    try:
        with contextlib.redirect_stdout(sys.stderr):
            yield
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os.dup2(saved, 1)
        os.close(saved)


def _exit_status(code: Any) -> int:
    if code is None:
        return 0
    if isinstance(code, int):
        return code
    print(code, file=sys.stderr)
    return 1


def _is_torchwork_frame(filename: str) -> bool:
    return os.path.realpath(filename).startswith(_TORCHWORK_ROOT)


_TORCHWORK_ROOT = os.path.dirname(os.path.dirname(os.path.realpath(__file__))) + os.sep


def _dispatch_frame(frames: list[traceback.FrameSummary], index: int) -> bool:
    """torch's own detour into the doctor's TorchFunctionMode: `handle_torch_function` and its caller's line."""
    frame = frames[index]
    if frame.name == "handle_torch_function":
        return True
    following = frames[index + 1] if index + 1 < len(frames) else None
    return (following is not None and following.name == "handle_torch_function"
            and (frame.line or "").lstrip().startswith("return handle_torch_function("))


def _trim(summary: traceback.TracebackException, target: str, debug: bool) -> None:
    """Start the stack at the script's first frame; drop torchwork's own frames unless ``debug``."""
    frames = list(summary.stack)
    starts = [i for i, frame in enumerate(frames) if os.path.realpath(frame.filename) == target]
    if starts:
        frames = frames[starts[0]:]
    if not debug:
        frames = [frame for frame in frames if not _is_torchwork_frame(frame.filename)]
        frames = [frame for i, frame in enumerate(frames) if not _dispatch_frame(frames, i)]
    summary.stack = traceback.StackSummary.from_list(frames)
    for linked in (summary.__cause__, summary.__context__):
        if linked is not None:
            _trim(linked, target, debug)


def user_traceback(error: BaseException, script: Path, *, debug: bool = False) -> str:
    """The traceback as Python prints it, from the script's first frame on, without the doctor's own frames.

    The doctor's hooks run inside the user's calls (a saved-tensor hook raising from backward, the
    per-operation mode): those frames are torchwork's, not the user's, and are shown only with ``debug``.
    """
    summary = traceback.TracebackException(type(error), error, error.__traceback__)
    _trim(summary, os.path.realpath(script), debug)
    return "".join(summary.format())


def user_code_path(place: str | os.PathLike[str]) -> Path:
    """The file or folder ``place`` names: a path, or else the name of an importable package or module
    (found, not imported). A ConfigError when it is neither.

    Example:
        >>> user_code_path("json").name, user_code_path(".").is_dir()
        ('json', True)
    """
    import importlib.util

    from torchwork.errors import ConfigError

    path = Path(place)
    if path.exists():
        return path
    try:
        spec = importlib.util.find_spec(str(place)) if str(place).isidentifier() else None
    except (ImportError, ValueError):
        spec = None
    if spec is not None and spec.submodule_search_locations:
        return Path(next(iter(spec.submodule_search_locations)))
    if spec is not None and spec.origin and Path(spec.origin).is_file():
        return Path(spec.origin)
    raise ConfigError(f"doctor: --user-code {str(place)!r} is neither a file or folder nor an importable package; "
                      "give the folder of your code (src/mylib) or its top-level package's name (mylib).")


def _script_arguments(args: Any) -> list[str]:
    """The script's ``sys.argv[1:]``: a list of strings ("--epochs 3" as one string was its characters)."""
    from torchwork.errors import ConfigError
    from torchwork.quoting import quote_value

    if isinstance(args, (str, bytes)) or not isinstance(args, Iterable):
        raise ConfigError(f"args={quote_value(args)}: give the script's arguments as a list of strings, as "
                          "sys.argv holds them: ['--epochs', '3'] (shlex.split('--epochs 3') splits a line).")
    arguments = list(args)
    for argument in arguments:
        if not isinstance(argument, str):
            raise ConfigError(f"args: {quote_value(argument)} is no string; sys.argv holds strings: "
                              f"str({quote_value(argument)}).")
    return arguments


def run_script(script: str | os.PathLike[str], args: Sequence[str] = (), *,
               checks: Sequence[str] | None = None, quiet_stdout: bool = False,
               debug: bool = False, user_code: Sequence[str | os.PathLike[str]] = ()) -> DoctorResult:
    """Run ``script`` with ``args`` under every check (or ``checks``) and return what was found.

    ``debug`` keeps torchwork's own frames in the printed traceback (they are hidden by default);
    ``user_code``: files, folders or package names whose lines count as the user's even where installed
    (a library of your own in site-packages: its lines are where findings are placed).
    """
    from torchwork.arguments import check_flag
    from torchwork.doctor.session import diagnose
    from torchwork.errors import ConfigError

    quiet_stdout, debug = check_flag(quiet_stdout, "quiet_stdout"), check_flag(debug, "debug")
    args = _script_arguments(args)
    if isinstance(user_code, (str, os.PathLike)):
        user_code = (user_code,)  # one place, not its letters
    path = Path(script)
    if not path.is_file():
        raise ConfigError(f"doctor: no script {str(script)!r}. Pass the path of a Python file: "
                          "torchwork doctor train.py [ARGS...].")
    yours = [user_code_path(place) for place in user_code]
    import torch

    torch.seed()  # a fresh random state, as a new process would have: the script's own seeding shows
    session = diagnose(checks)
    for place in (path, *yours):
        session.locator.count_as_user(place)
    script_exit = 0
    error: BaseException | None = None
    redirect = _stdout_to_stderr() if quiet_stdout else contextlib.nullcontext()
    with redirect, _script_environment(path.resolve(), args):
        session.start()
        try:
            runpy.run_path(str(path), run_name="__main__")
        except SystemExit as stop:
            script_exit = _exit_status(stop.code)
        except KeyboardInterrupt as interrupt:
            error, script_exit = interrupt, 130
        except Exception as failure:  # the user's script failed: report it, do not crash the doctor
            error, script_exit = failure, 1
            print(user_traceback(failure, path, debug=debug), end="", file=sys.stderr)
        finally:
            session.stop(error if isinstance(error, Exception) else None)
    return DoctorResult(session.findings, script_exit, session.internal_errors)

