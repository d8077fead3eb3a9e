"""The runtime doctor's published precision, measured as torch-preflight measured its own (spike 0002):
every finding on real code read and classified, recall on planted mistakes, and the cost beside anomaly mode.

Prints one JSON object (and the tables, in Markdown, on stderr). Three corpora:

* (a) this project's real scripts (tests/doctor/real/): the 12 correct ones must give no finding at all;
  the 16 reproductions of users' bugs must give their ``# expect:`` findings;
* (b) the training entry points of torch-preflight's 7 repositories that run here (``doctor_repos.py``),
  given as local checkouts ``NAME=PATH`` (never fetched by this script, never committed), their code
  unmodified, on the CPU with tiny synthetic data;
* (c) the seeded corpus (``doctor_seeds.py``): each clean script with one classic mistake planted, written
  to a temporary folder; a seed counts as found when its check is reported at its culprit line.

Every other finding is looked up in ``doctor_findings_review.json`` (the verdicts written after reading each
one against its source: ``true``, or ``false`` for a false alarm, with a reason); a finding not there is
``unread`` and listed, so a new one is seen. Overhead: each real script of (a) and (b) run plain, under
``torchwork doctor`` and under ``torch.autograd.set_detect_anomaly(True)`` (switched on around the unmodified
script), in this process, interleaved (the order rotated each round), ``--repeats`` rounds after a warm-up;
wall and CPU time, medians of the rounds, as ratios to plain. The machine is shared: the load is logged.

Run: ``python benchmarks/doctor_precision.py [examples=/path/to/pytorch-examples] [trl=DIR] [litgpt=DIR]
[torchtune=DIR] [tutorials=DIR] [llamafactory=DIR] [--repeats 3] [--site DIR]`` (``--site``: a folder added to
sys.path, e.g. one holding torchvision for the examples, or the ``pip install --target DIR`` of trl and litgpt,
which is also their checkout; LLaMA-Factory's folder is never a ``--site``: its entries run in a process apart).
"""

from __future__ import annotations

import argparse
import contextlib
import io
import json
import os
import re
import runpy
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
from doctor_repos import ENTRIES, NOT_RUN, Entry, forget_modules_under, importable, working_folder
from doctor_seeds import KINDS, write_planted
from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

from torchwork.doctor.findings import Finding
from torchwork.doctor.runner import DoctorResult, run_script

REAL = Path(__file__).resolve().parents[1] / "tests" / "doctor" / "real"
REVIEW = Path(__file__).with_name("doctor_findings_review.json")
MARK = re.compile(r"#\s*expect:\s*([a-z\-]+)")


# ------------------------------------------------------------------------------------------ one run
def _plain(script: Path, args: Sequence[str]) -> int:
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    sys.argv, sys.path = [str(script), *args], [str(script.parent), *sys.path]
    try:
        runpy.run_path(str(script), run_name="__main__")
    except SystemExit as stop:
        return stop.code if isinstance(stop.code, int) else int(stop.code is not None)
    except Exception:  # the script failed: its status is reported, the benchmark goes on
        return 1
    finally:
        sys.argv[:], sys.path[:] = saved_argv, saved_path
    return 0


def _anomaly(script: Path, args: Sequence[str]) -> int:
    with torch.autograd.set_detect_anomaly(True):
        return _plain(script, args)


USER_CODE: list[Path] = []  # the running entry's own packages (Entry.user_code), counted as the user's


def _doctor(script: Path, args: Sequence[str]) -> DoctorResult:
    return run_script(script, args, user_code=USER_CODE)


_CLOCKS = ("doctor_x", "anomaly_x", "doctor_cpu_x", "anomaly_cpu_x")
RUNNERS: dict[str, Callable[[Path, Sequence[str]], Any]] = {"plain": _plain, "doctor": _doctor, "anomaly": _anomaly}


def run_once(how: str, script: Path, args: Sequence[str] = (), cwd: Path | None = None,
             ranks: int = 0) -> tuple[tuple[float, float], Any]:
    """((wall, CPU) seconds, what the runner returned): the script's stdout and stderr are discarded."""
    folder = cwd if cwd is not None else script.parent
    if ranks:
        return _torchrun(how, script, args, folder, ranks)
    with working_folder(folder), contextlib.redirect_stdout(io.StringIO()), contextlib.redirect_stderr(io.StringIO()):
        started, cpu = time.perf_counter(), time.process_time()
        value = RUNNERS[how](script, args)
        elapsed = (time.perf_counter() - started, time.process_time() - cpu)
    forget_modules_under(script.parent)
    return elapsed, value


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def _torchrun(how: str, script: Path, args: Sequence[str], cwd: Path, ranks: int) -> tuple[tuple[float, float], Any]:
    """Rank 0's time and result of ``torchrun --nproc-per-node RANKS doctor_rank.py`` (each rank the same run)."""
    with tempfile.TemporaryDirectory(prefix="doctor-ranks-") as out:
        command = [sys.executable, "-m", "torch.distributed.run", f"--nproc-per-node={ranks}",
                   f"--master-port={_free_port()}", str(Path(__file__).with_name("doctor_rank.py")), how, out,
                   str(script), *args]
        subprocess.run(command, cwd=cwd, env=_child_environment(), stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                       timeout=600, check=False)
        reports = [json.loads(path.read_text()) for path in sorted(Path(out).glob("rank*.json"))]
    if len(reports) != ranks:
        raise RuntimeError(f"{script}: {len(reports)} of {ranks} ranks reported under {how}")
    first = reports[0]["result"]
    return tuple(reports[0]["seconds"]), (doctor_result(first) if how == "doctor" else first["exit"])


def doctor_result(data: dict[str, Any]) -> DoctorResult:
    """A DoctorResult from its ``to_json()`` (written by a child process)."""
    return DoctorResult([Finding(**f) for f in data["findings"]], data["exit"], data.get("doctor_errors", []))


SITES: list[str] = []  # the --site folders (other entries' packages: a checkout apart does not see them)


def _child_environment(apart: Path | None = None) -> dict[str, str]:
    """This process's environment, with its sys.path as the child's PYTHONPATH; for a checkout ``apart``, that
    folder first and no --site folder."""
    paths = [str(apart)] if apart else []
    paths += [p for p in sys.path if p and os.path.isdir(p) and not (apart and p in SITES)]
    return {**os.environ, "OMP_NUM_THREADS": "1", "PYTHONPATH": os.pathsep.join(paths)}


# ------------------------------------------------------------------------------------------ verdicts
class Review:
    """The verdicts of doctor_findings_review.json, by (corpus, script, check, line)."""

    def __init__(self, path: Path = REVIEW) -> None:
        entries = json.loads(path.read_text(encoding="utf-8"))["findings"]
        self.verdicts = {(e["corpus"], e["script"], e["check"], e["line"]): (e["verdict"], e["why"]) for e in entries}
        self.used: set[tuple[str, str, str, int | None]] = set()

    def classify(self, corpus: str, script: str, finding: Any) -> dict[str, Any]:
        key = (corpus, script, finding.id, finding.line)
        verdict, why = self.verdicts.get(key, ("unread", "no verdict yet: read it against the source"))
        self.used.add(key)
        return {"script": script, "check": finding.id, "severity": finding.severity, "line": finding.line,
                "count": finding.count, "verdict": verdict, "why": why}


def _tally(classified: list[dict[str, Any]]) -> dict[str, int]:
    return {label: sum(c["verdict"] == label for c in classified) for label in ("bug", "true", "false", "unread")}


# ------------------------------------------------------------------------------------------ the corpora
def own_corpus(review: Review) -> dict[str, Any]:
    """(a): the correct scripts (every finding is a false alarm unless reviewed) and the bug reproductions."""
    extra: list[dict[str, Any]] = []
    clean_findings = 0
    for script in sorted((REAL / "correct").glob("*.py")):
        result = run_once("doctor", script)[1]
        clean_findings += len(result.findings)
        extra += [review.classify("clean", script.stem, f) for f in result.findings]
    expected_total = found_total = 0
    for script in sorted((REAL / "bugs").glob("*.py")):
        expected = {(m.group(1), n) for n, text in enumerate(script.read_text().splitlines(), start=1)
                    if (m := MARK.search(text))}
        result = run_once("doctor", script)[1]
        got = {(f.id, f.line) for f in result.findings}
        expected_total, found_total = expected_total + len(expected), found_total + len(expected & got)
        extra += [review.classify("bugs", script.stem, f) for f in result.findings if (f.id, f.line) not in expected]
    return {"clean_scripts": len(list((REAL / "correct").glob("*.py"))), "clean_findings": clean_findings,
            "bug_scripts": len(list((REAL / "bugs").glob("*.py"))), "bugs_expected": expected_total,
            "bugs_found": found_total, "other_findings": _tally(extra), "findings": extra}


def seeded_corpus(review: Review) -> dict[str, Any]:
    """(c): each planted mistake found at its culprit line, and what else was said."""
    per_kind: dict[str, list[int]] = {kind: [0, 0] for kind in KINDS}
    missed, extra = [], []
    with tempfile.TemporaryDirectory(prefix="doctor-seeds-") as folder:
        for name, (seed, path, line) in write_planted(Path(folder)).items():
            result = run_once("doctor", path)[1]
            hit = any(f.id == seed.check and f.line == line for f in result.findings)
            per_kind[seed.kind][0] += hit
            per_kind[seed.kind][1] += 1
            if not hit:
                said = [f"{f.id}:{f.line}" for f in result.findings]
                missed.append(f"{name} (expected {seed.check} at line {line}; said {said or 'nothing'})")
            extra += [review.classify("seeded", name, f) for f in result.findings
                      if not (f.id == seed.check and f.line == line)]
    found = sum(k[0] for k in per_kind.values())
    total = sum(k[1] for k in per_kind.values())
    return {"variants": total, "found": found, "recall": round(found / total, 3),
            "per_kind": {f"{kind} ({KINDS[kind]})": f"{k[0]}/{k[1]}" for kind, k in per_kind.items()},
            "missed": missed, "other_findings": _tally(extra),
            "false_alarms_per_script": round(_tally(extra)["false"] / total, 3), "findings": extra}


# ------------------------------------------------------------------------------------------ overhead
def overhead(script: Path, args: Sequence[str], cwd: Path | None, repeats: int, ranks: int = 0) -> dict[str, Any]:
    """Plain, doctor and anomaly mode interleaved (order rotated each round); medians and ratios."""
    run_once("plain", script, args, cwd, ranks)  # warm-up: imports, first-call caches, data files read once
    times: dict[str, list[tuple[float, float]]] = {how: [] for how in RUNNERS}
    first: dict[str, Any] = {}
    order = list(RUNNERS)
    for round_ in range(repeats):
        for how in order[round_ % 3:] + order[:round_ % 3]:
            elapsed, value = run_once(how, script, args, cwd, ranks)
            times[how].append(elapsed)
            first.setdefault(how, value)
    def ratio(how: str, clock: int) -> float:
        return round(statistics.median(t[clock] for t in times[how]) / statistics.median(t[clock] for t in times["plain"]), 2)

    return {"plain_s": round(statistics.median(t[0] for t in times["plain"]), 3),
            "doctor_x": ratio("doctor", 0), "anomaly_x": ratio("anomaly", 0),
            "doctor_cpu_x": ratio("doctor", 1), "anomaly_cpu_x": ratio("anomaly", 1),
            "exit": first["plain"], "result": first["doctor"]}


def repositories(checkouts: dict[str, Path], review: Review, repeats: int) -> tuple[dict[str, Any], dict[str, Any]]:
    """(b): each entry point of a given checkout run (with its overhead); (findings, overhead by entry)."""
    ran: dict[str, Any] = {}
    costs: dict[str, Any] = {}
    for entry in ENTRIES:
        if entry.repo not in checkouts:
            continue
        if entry.needs and not importable(entry.needs, checkouts[entry.repo] if entry.apart else None):
            ran[entry.key] = {"ran": False, "why": f"{entry.needs} is not importable (see --site)"}
            continue
        ran[entry.key], cost = _run_entry(entry, checkouts[entry.repo], review, repeats)
        if cost:  # a script that fails without the doctor has no overhead to speak of
            costs[entry.key] = cost
        print(f"{entry.key}: exit {ran[entry.key]['exit']} {cost}", file=sys.stderr)
    return ran, costs


def _run_entry(entry: Entry, checkout: Path, review: Review, repeats: int) -> tuple[dict[str, Any], dict[str, Any]]:
    with tempfile.TemporaryDirectory(prefix=f"doctor-{entry.name}-") as base:
        (Path(base) / "run").mkdir()
        entry.prepare(Path(base), checkout)
        USER_CODE[:] = [checkout / place for place in entry.user_code]
        try:
            if entry.apart:
                cost = _overhead_apart(entry, checkout, Path(base) / "run", repeats)
            else:
                cost = overhead(checkout / entry.script, entry.args, Path(base) / "run", repeats, entry.ranks)
        finally:
            USER_CODE.clear()
    result: DoctorResult = cost.pop("result")
    findings = [review.classify("repos", entry.key, f) for f in result.findings]
    plain_exit = cost.pop("exit")
    return ({"ran": True, "exit": result.script_exit, "plain_exit": plain_exit, "findings": findings,
             "doctor_errors": result.internal_errors}, cost if plain_exit == 0 else {})


def _overhead_apart(entry: Entry, checkout: Path, cwd: Path, repeats: int) -> dict[str, Any]:
    """``overhead()`` of an entry whose checkout pins other packages: measured in a child process
    (``doctor_apart.py``) with the checkout first on its path."""
    with tempfile.TemporaryDirectory(prefix="doctor-apart-") as out:
        figures = Path(out) / "cost.json"
        command = [sys.executable, str(Path(__file__).with_name("doctor_apart.py")), str(figures), str(repeats),
                   str(cwd), str(checkout / entry.script), *entry.args]
        environment = {**_child_environment(checkout), "DOCTOR_USER_CODE": os.pathsep.join(map(str, USER_CODE))}
        subprocess.run(command, cwd=cwd, env=environment, stdout=subprocess.DEVNULL,
                       stderr=subprocess.DEVNULL, timeout=3600, check=False)
        if not figures.is_file():
            raise RuntimeError(f"{entry.key}: its child process wrote no figures")
        cost = json.loads(figures.read_text(encoding="utf-8"))
    cost["result"] = doctor_result(cost["result"])
    return cost


def clean_overhead(repeats: int) -> dict[str, Any]:
    costs = {}
    for script in sorted((REAL / "correct").glob("*.py")):
        cost = overhead(script, (), None, repeats)
        cost.pop("result"), cost.pop("exit")
        costs[script.stem] = cost
        print(f"{script.stem}: {cost}", file=sys.stderr)
    return costs


# ------------------------------------------------------------------------------------------ main
def _checkouts(items: Sequence[str]) -> dict[str, Path]:
    found = {}
    for item in items:
        name, _, path = item.partition("=")
        if not path or not Path(path).is_dir():
            sys.exit(f"doctor_precision: {item!r} is not NAME=PATH of a folder (a local checkout).")
        found[name] = Path(path).resolve()
    return found


def _tables(figures: dict[str, Any]) -> str:
    seeded = figures["seeded"]
    rows = ["| seeded mistake (check) | found at the culprit line |", "|---|---|"]
    rows += [f"| {kind} | {score} |" for kind, score in seeded["per_kind"].items()]
    rows += ["", "| script | plain s | doctor (wall, CPU) | anomaly mode (wall, CPU) |", "|---|---|---|---|"]
    rows += [f"| {name} | {c['plain_s']} | {c['doctor_x']}x, {c['doctor_cpu_x']}x | {c['anomaly_x']}x, {c['anomaly_cpu_x']}x |"
             for name, c in figures["overhead"]["scripts"].items()]
    return "\n".join(rows)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("checkouts", nargs="*", metavar="NAME=PATH", help="a local checkout (examples=...)")
    parser.add_argument("--repeats", type=int, default=3, help="timed rounds of each variant (the median counts)")
    parser.add_argument("--site", action="append", default=[], help="a folder added to sys.path")
    args = parser.parse_args()
    sys.path[1:1] = SITES[:] = args.site
    os.environ.setdefault("MPLBACKEND", "Agg")
    for name in ("HF_HUB_OFFLINE", "HF_DATASETS_OFFLINE"):  # trl's and litgpt's entries read local folders only
        os.environ.setdefault(name, "1")
    torch.set_num_threads(1)
    load_before = os.getloadavg()[0]
    review = Review()
    own, seeded = own_corpus(review), seeded_corpus(review)
    repos, repo_costs = repositories(_checkouts(args.checkouts), review, args.repeats)
    clean_costs = clean_overhead(args.repeats)
    costs = {**clean_costs, **repo_costs}

    def median(key: str, names: Any = None) -> float:
        return statistics.median(c[key] for name, c in costs.items() if names is None or name in names)
    every = own["findings"] + seeded["findings"] + [f for r in repos.values() for f in r.get("findings", [])]
    figures: dict[str, Any] = {
        "own": own, "seeded": seeded, "repos": repos, "not_run": NOT_RUN,
        "overhead": {"scripts": costs, **{f"median_{key}": median(key) for key in _CLOCKS},
                     "corpus": {f"median_{key}": median(key, clean_costs) for key in _CLOCKS},
                     "repositories": {f"median_{key}": median(key, repo_costs) for key in _CLOCKS} if repo_costs else {},
                     "repeats": args.repeats, "threads": 1, "clock": "wall"},
        "unread": [f for f in every if f["verdict"] == "unread"],
        "stale_reviews": sorted(map(str, set(review.verdicts) - review.used)),
        "goals": {"seeded_recall": ">= 0.95", "clean_false_alarms": 0, "median_doctor_x": "<= 1.5"},
        "load_at_start": round(load_before, 1),
    }
    print(_tables(figures), file=sys.stderr)
    record(figures, indent=2)


if __name__ == "__main__":
    main()
