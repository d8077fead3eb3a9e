"""``torchwork runs ls``: one row per run folder under a directory, nested runs and tuning trials included.

A row reads only what it needs: the manifest (which records the state and the monitored metric's best
and final when the run ends), and, for a run that never ended (killed, or still running), the best
checkpoint's ``best.json`` and the last 64 KiB of ``metrics.jsonl``. Whether such a run is still going is
told by its recorded process: alive on this host (and started no later than the run) or not.

Trials of a study (``<run_dir>/tune/<study>/trials/<number>/...``) are grouped under their study.

Example:
    >>> import json, pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> (root / "20260101T000000Z-aaaaaa" / "checkpoints").mkdir(parents=True)
    >>> _ = (root / "20260101T000000Z-aaaaaa" / "manifest.json").write_text(json.dumps(
    ...     {"state": "finished", "seed": 3, "started": "2026-01-01T00:00:00+00:00",
    ...      "ended": "2026-01-01T00:01:05+00:00", "monitor": {"metric": "val_loss", "mode": "min", "best": 0.5}}))
    >>> [(r.name, r.state, r.seed, r.best, r.duration_s) for r in list_runs(root)]
    [('20260101T000000Z-aaaaaa', 'finished', 3, 0.5, 65.0)]
"""

from __future__ import annotations

import dataclasses
import json
import os
import socket
from collections.abc import Iterable, Iterator, Sequence
from pathlib import Path
from typing import Any

from torchwork.errors import ConfigError
from torchwork.runs.best_record import BEST_RECORD, MAX_BEST_BYTES
from torchwork.runs.folder_files import load_json, read_run_file
from torchwork.runs.readback import (
    MANIFEST,
    field,
    load_manifest_file,
    metrics_tail,
    number,
    parse_time,
    recipe_of,
)
from torchwork.runs.terminal import shown

# Folders inside a run that hold no runs: not walked.
NOT_RUNS = frozenset({"checkpoints", "tensorboard", "data", "preprocess", "artifact", "__pycache__", ".git"})
MAX_DEPTH = 8
COLUMNS = ("run", "started", "recipe", "state", "metric", "best", "final", "seed", "commit", "duration")


@dataclasses.dataclass
class RunRow:
    """One run folder as ``runs ls`` shows it."""

    name: str  # the folder, relative to the listed directory
    path: Path
    started: str | None = None
    recipe: str | None = None
    state: str = "unknown"
    resumes: int = 0
    metric: str | None = None
    mode: str | None = None
    best: float | None = None
    final: float | None = None
    seed: int | None = None
    commit: str | None = None
    dirty: bool | None = None
    duration_s: float | None = None
    study: str | None = None
    trial: str | None = None
    problem: str | None = None  # why the manifest could not be read
    config: dict[str, Any] = dataclasses.field(default_factory=dict, repr=False)

    @property
    def state_text(self) -> str:
        return self.state + (f", resumed {self.resumes}x" if self.resumes else "")

    @property
    def commit_text(self) -> str:
        if not self.commit:
            return "-"
        return self.commit[:10] + ("+patch" if self.dirty else "")

    def to_dict(self) -> dict[str, Any]:
        data = dataclasses.asdict(self)
        data["path"] = str(self.path)
        data.pop("config")
        return data


def run_folders(root: Path) -> Iterator[str]:
    """Every run folder under ``root`` (``root`` itself included), parents before the runs nested in them.
    Paths as strings: this walk visits every folder, and pathlib costs more than the reading."""
    stack = [(str(root), 0)]
    while stack:
        folder, depth = stack.pop()
        try:
            entries = list(os.scandir(folder))
        except OSError:
            continue
        names = {e.name for e in entries}
        # a run's manifest lost beside its checkpoints and metrics is listed (unreadable, with the reason),
        # not left out unsaid
        if (MANIFEST in names and ("checkpoints" in names or "metrics.jsonl" in names)) or \
                {"checkpoints", "metrics.jsonl"} <= names:
            yield folder
        if depth < MAX_DEPTH:
            subfolders = sorted((e.path for e in entries if e.name not in NOT_RUNS and e.is_dir(follow_symlinks=False)),
                                reverse=True)
            stack.extend((path, depth + 1) for path in subfolders)


def _alive(pid: int, started: float | None) -> bool:
    """Whether process ``pid`` runs on this host and began no later than the run (not a reused pid)."""
    try:
        os.kill(pid, 0)
    except (ProcessLookupError, OverflowError, ValueError):  # no such process, or no such process id
        return False
    except (PermissionError, OSError):
        return True
    try:
        stat = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
        boot = next(float(line.split()[1]) for line in Path("/proc/stat").read_text().splitlines()
                    if line.startswith("btime"))
        began = boot + int(stat[19]) / os.sysconf("SC_CLK_TCK")
    except (OSError, ValueError, IndexError, StopIteration):
        return True
    return started is None or began <= started + 5


def run_state(manifest: dict[str, Any], run: Path, host: str) -> str:
    """The run's state from its manifest: ``running`` only while its recorded process is alive on this
    ``host`` (and began no later than the run), ``killed`` once it is not."""
    state = field(manifest, "state", str)
    if state is None:  # a run recorded before runs kept their state
        return "finished" if (run / "summary.json").is_file() else "unknown"
    if state != "running":
        return state
    process = field(manifest, "process", dict) or {}
    pid, on = field(process, "pid", int), field(process, "host", str)
    if "pid" in process and not (pid is not None and 0 < pid < 2**31):  # no process has it: unreadable
        return "unknown"
    if pid is None or on != host:
        return f"running on {on}" if on else "running"
    resumes = field(manifest, "resumes", list) or []
    last_start = parse_time(resumes[-1].get("at")) if resumes and isinstance(resumes[-1], dict) else None
    return "running" if _alive(pid, last_start or parse_time(manifest.get("started"))) else "killed"


def _unended_metric(run: Path, metric: str | None) -> tuple[float | None, float | None, float | None]:
    """(best, final, time of the last line) for a run that recorded no end; a ConfigError when best.json or
    metrics.jsonl is refused (not a regular file of the run, far too big or deep)."""
    best = None
    try:
        recorded = load_json(read_run_file(run, BEST_RECORD, MAX_BEST_BYTES), run / BEST_RECORD)
        if isinstance(recorded, dict) and recorded.get("monitor") == metric:
            best = number(recorded.get("value"))
    except (OSError, json.JSONDecodeError, UnicodeDecodeError):
        pass  # missing or cut short: the best is unknown
    final = last = None
    for line in metrics_tail(run):  # newest first, parsed only as far as needed
        if last is None:
            last = number(line.get("time"))
        if metric in line:
            final = number(line.get(metric))
            break
    return best, final, last


def read_row(run: str | Path, root: str | Path, host: str | None = None) -> RunRow:
    """The row of one run folder (a damaged manifest gives a row that says so)."""
    run_text, root_text = os.fspath(run), os.fspath(root).rstrip(os.sep)
    relative = run_text[len(root_text) + 1:] if run_text.startswith(root_text + os.sep) else ""
    parts = relative.split(os.sep) if relative else []
    row = RunRow("/".join(parts) or ".", Path(run_text))
    if "trials" in parts[:-1]:  # <study>/trials/<number>/..., the layout of torchwork tune
        at = parts.index("trials")
        row.study, row.trial = (parts[at - 1] if at else os.path.basename(root_text)), parts[at + 1]
    run = row.path
    try:
        manifest = load_manifest_file(run / MANIFEST)
    except FileNotFoundError:
        row.state, row.problem = "unreadable", (f"no {MANIFEST} beside its checkpoints/ and "
                                                "metrics.jsonl (deleted, or never written): restore it from a copy")
        return row
    except (ConfigError, OSError) as error:
        row.state, row.problem = "unreadable", str(error)
        return row
    row.started = field(manifest, "started", str)
    row.recipe = recipe_of(manifest)
    row.state = run_state(manifest, run, host or socket.gethostname())
    row.resumes = len(field(manifest, "resumes", list) or [])
    row.metric, row.mode = field(manifest, "monitor.metric", str), field(manifest, "monitor.mode", str)
    row.best, row.final = number(field(manifest, "monitor.best", float)), number(field(manifest, "monitor.final", float))
    row.seed = field(manifest, "seed", int)
    row.commit, row.dirty = field(manifest, "git.commit", str), field(manifest, "git.dirty", bool)
    row.config = field(manifest, "config", dict) or {}
    study = field(manifest, "config.study", str) or field(manifest, "tune.study", str)
    if study and not row.study:
        row.study = study
        number_ = field(manifest, "config.trial", int) if field(manifest, "config.trial", int) is not None \
            else field(manifest, "tune.trial", int)
        row.trial = str(number_) if number_ is not None else None
    started, ended = parse_time(row.started), parse_time(manifest.get("ended"))
    if field(manifest, "ended", str) is None and row.metric:
        try:
            best, final, last = _unended_metric(run, row.metric)
        except ConfigError as error:
            row.problem = str(error)  # listed; its values unknown
        else:
            row.best, row.final, ended = row.best if row.best is not None else best, final, last
    if row.best is not None and row.final is not None and row.mode in ("min", "max") and \
            (row.final < row.best if row.mode == "min" else row.final > row.best):
        row.best = row.final  # a value logged after the last best checkpoint (a kill came before it)
    if started is not None and ended is not None:
        row.duration_s = round(max(0.0, ended - started), 1)
    return row


def list_runs(root: str | os.PathLike[str]) -> list[RunRow]:
    """The rows of every run folder under ``root``, in folder order (nested runs after their parent)."""
    folder = Path(root)
    if not folder.is_dir():
        raise ConfigError(f"{folder} is not a directory: pass the folder that holds your run folders "
                          "(a Trainer's run_dir, e.g. runs/sentiment).")
    host = socket.gethostname()
    return [read_row(run, folder, host) for run in run_folders(folder)]


def _matches(row: RunRow, key: str, wanted: str) -> bool:
    columns = {"run": row.name, "recipe": row.recipe, "state": row.state_text, "metric": row.metric,
               "seed": row.seed, "study": row.study, "trial": row.trial, "started": row.started}
    if key == "commit":
        return bool(row.commit) and (row.commit_text.startswith(wanted) or str(row.commit).startswith(wanted))
    if key == "state":
        return row.state == wanted or row.state_text == wanted or (wanted == "resumed" and row.resumes > 0)
    if key in columns:
        value = columns[key]
    else:
        value = field(row.config, key.removeprefix("config."), (str, int, float, bool, list, dict, type(None)))
        if value is None and key.removeprefix("config.") not in _flat_keys(row.config):
            return False
    return _same(value, wanted)


def _flat_keys(config: dict[str, Any], prefix: str = "") -> set[str]:
    keys = set()
    for key, value in config.items():
        keys.add(prefix + str(key))
        if isinstance(value, dict):
            keys |= _flat_keys(value, f"{prefix}{key}.")
    return keys


def _same(value: Any, wanted: str) -> bool:
    if isinstance(value, bool):
        return wanted.lower() in (("true", "1", "yes") if value else ("false", "0", "no"))
    if isinstance(value, (int, float)):
        try:
            return float(wanted) == float(value)
        except ValueError:
            return False
    if value is None:
        return wanted.lower() in ("none", "null", "")
    return (value if isinstance(value, str) else json.dumps(value)) == wanted


def parse_filters(filters: Sequence[str]) -> list[tuple[str, str]]:
    parsed = []
    for text in filters:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ConfigError(f"--filter {text!r} must be KEY=VALUE, e.g. state=finished, seed=0, lr=0.03 "
                              f"(a config setting) or commit=5089535.")
        parsed.append((key.strip(), value.strip()))
    return parsed


def filter_rows(rows: Iterable[RunRow], filters: Sequence[str]) -> list[RunRow]:
    """The rows for which every ``KEY=VALUE`` holds (a column, or a config setting, dotted for nested)."""
    parsed = parse_filters(filters)
    return [row for row in rows if all(_matches(row, key, value) for key, value in parsed)]


def sort_rows(rows: list[RunRow], key: str | None) -> list[RunRow]:
    """By a column (``-column`` reverses); ``best``/``final`` (or a metric's name) put each run's best first
    by its own mode (highest for max, lowest for min), the runs without a value last."""
    if not key:
        return rows
    reverse = key.startswith("-")
    name = key.lstrip("-")
    if name in ("best", "final") or name not in COLUMNS:
        attribute = "final" if name == "final" else "best"
        known = [r for r in rows if getattr(r, attribute) is not None and (name in ("best", "final") or r.metric == name)]
        if name not in ("best", "final") and not known:
            metrics = sorted({r.metric for r in rows if r.metric})
            raise ConfigError(f"--sort {key!r}: no run monitors {name!r}; sort by a column ({', '.join(COLUMNS)}) "
                              f"or a monitored metric ({', '.join(metrics) or 'none recorded'}).")
        rest = [r for r in rows if r not in known]

        def score(row: RunRow) -> float:
            value = float(getattr(row, attribute))
            return -value if row.mode == "max" else value

        return sorted(known, key=score, reverse=reverse) + rest
    values = {"run": lambda r: r.name, "started": lambda r: r.started or "", "recipe": lambda r: r.recipe or "",
              "state": lambda r: r.state_text, "metric": lambda r: r.metric or "",
              "seed": lambda r: (r.seed is None, r.seed or 0), "commit": lambda r: r.commit_text,
              "duration": lambda r: (r.duration_s is None, r.duration_s or 0.0)}
    return sorted(rows, key=values[name], reverse=reverse)


def _value(value: float | None) -> str:
    return "-" if value is None else f"{value:.4f}"


def _duration(seconds: float | None) -> str:
    if seconds is None:
        return "-"
    if seconds < 60:
        return f"{seconds:.0f}s"
    if seconds < 3600:
        return f"{int(seconds // 60)}m{int(seconds % 60):02d}s"
    return f"{int(seconds // 3600)}h{int(seconds % 3600 // 60):02d}m"


def format_rows(rows: Sequence[RunRow]) -> str:
    """The table ``runs ls`` prints: trials under a line naming their study."""
    if not rows:
        return "no run folders here (a run folder holds manifest.json and checkpoints/)"
    table = [list(COLUMNS)]
    studies: dict[str, list[RunRow]] = {}
    for row in rows:
        if row.study:
            studies.setdefault(row.study, []).append(row)
    studies_listed: set[str] = set()
    for row in rows:
        if row.study:
            if row.study in studies_listed:
                continue
            studies_listed.add(row.study)
            trials = sorted(studies[row.study], key=_trial_order)
            states = {s: sum(1 for t in trials if t.state == s) for s in dict.fromkeys(t.state for t in trials)}
            table.append([f"study {shown(row.study)}: {len(trials)} trial{'s' if len(trials) != 1 else ''} ("
                          + ", ".join(f"{n} {s}" for s, n in states.items()) + ")"])
            table.extend(_cells(t, "  ") for t in trials)
            continue
        table.append(_cells(row, ""))
    widths = [max(len(r[i]) for r in table if len(r) == len(COLUMNS)) for i in range(len(COLUMNS))]
    lines = []
    for cells in table:
        if len(cells) == 1:
            lines.append(cells[0])
            continue
        lines.append("  ".join(c.ljust(w) if i in (0, 1, 2, 3, 4, 8) else c.rjust(w)
                               for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
    problems = [r for r in rows if r.problem]
    lines.extend(shown(f"{r.name}: {r.problem}") for r in problems)
    return "\n".join(lines)


def _trial_order(row: RunRow) -> tuple[bool, int, str]:
    number_ = str(row.trial)
    return (not number_.isdigit(), int(number_) if number_.isdigit() else 0, row.name)


def _cells(row: RunRow, indent: str) -> list[str]:
    started = (row.started or "-").replace("T", " ")[:16]
    cells = [indent + row.name, started, row.recipe or "-", row.state_text, row.metric or "-", _value(row.best),
             _value(row.final), "-" if row.seed is None else str(row.seed), row.commit_text, _duration(row.duration_s)]
    return [shown(cell) for cell in cells]  # a folder's name and manifest: no escape sequence, no secret
