"""`torchwork quickstart --quick` killed with a real SIGKILL in each of its sections in turn: the first kill
ends the quickstart, and each later one ends the `torchwork resume RUN` that continued it, until a last resume
finishes. The run must end with the same summary.json scores and artifact weights as an uninterrupted run, and
each resume must read back the decisions measured before its kill, not measure them again.

One chain of kills covers every section at the cost of about one run (a run per section cost four), and it
also tests what a user meets on a bad day: resuming a run that was itself resumed.

Every run is pinned to fp32 and the cached strategy: the uninterrupted reference must make the same choices
as the killed run for their scores to be comparable (reading a choice back is what is tested: a resumed run
says "recorded by the run being resumed" for each). The cached strategy has all four sections: n-gram
training, feature caching, transformer training, export.
"""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

import pytest
from transformer_quickstart import ENV, quickstart_command, transformer_quickstart

pytestmark = pytest.mark.slow(reason="a real quickstart killed in each of its 4 sections and resumed, and an "
                                     "uninterrupted reference: about 2 min")
CLI = [sys.executable, "-m", "torchwork.cli"]


def only_run(runs: Path) -> Path | None:
    found = [p for p in runs.iterdir() if p.is_dir()] if runs.is_dir() else []
    return found[0] if len(found) == 1 else None


def scores(summary: dict) -> dict:
    return {"test": summary["test"], "baseline": summary["baseline"], "model": summary["model"],
            "precision": summary["precision"], "epochs_run": summary["epochs_run"],
            "models": {name: {k: v[k] for k in ("accuracy", "macro_f1")} for name, v in summary["models"].items()}}


@pytest.fixture(scope="module")
def reference() -> Path:
    """The uninterrupted run, shared with the transformer tests (transformer_quickstart.py)."""
    return transformer_quickstart()[2]


def _ngram_trained_two_epochs(run: Path, out: str) -> bool:
    return len(list((run / "checkpoints").glob("step-*.pt"))) >= 2 and "Transformer" not in out


def _caching(run: Path, out: str) -> bool:
    return "strategy: cached" in out


def _transformer_trained_one_epoch(run: Path, out: str) -> bool:
    return bool(list(run.glob("transformer/*/checkpoints/step-*.pt")))


def _exporting(run: Path, out: str) -> bool:
    return bool(list(run.glob(".artifact.export-*")))


# The sections in the order a run meets them, and what each resume after a kill there must read back.
SECTIONS: list[tuple[str, Callable[[Path, str], bool], tuple[str, ...]]] = [
    ("ngram-training", _ngram_trained_two_epochs, ()),
    ("feature-caching", _caching, ("strategy: cached",)),
    ("transformer-training", _transformer_trained_one_epoch, ("strategy: cached", "precision: 32")),
    ("export", _exporting, ("strategy: cached", "precision: 32")),
]


def kill_when(command: list[str], runs: Path, condition: Callable[[Path, str], bool], log: Path) -> Path:
    with log.open("w") as out:
        process = subprocess.Popen(command, stdout=out, stderr=subprocess.STDOUT, env=ENV)
        deadline = time.monotonic() + 1800
        while process.poll() is None and time.monotonic() < deadline:
            run = only_run(runs)
            if run is not None and condition(run, log.read_text()):
                process.send_signal(signal.SIGKILL)
                break
            time.sleep(0.05)
        if process.poll() is None and time.monotonic() >= deadline:
            process.kill()
        process.wait()
    assert process.returncode == -signal.SIGKILL, f"{log.name} was not killed: " + log.read_text()[-3000:]
    run = only_run(runs)
    assert run is not None
    return run


def _reads_back(said: str, section: str, decisions: tuple[str, ...]) -> None:
    for decision in decisions:
        assert f"{decision} (recorded by the run being resumed)" in said, \
            f"after a kill in {section}, the resume measured '{decision}' again:\n" + said[-3000:]


def test_sigkill_in_each_quickstart_section_in_turn_then_resume_gives_the_same_run(tmp_path, reference):
    runs = tmp_path / "runs"
    name, condition, _ = SECTIONS[0]
    run = kill_when(quickstart_command(runs), runs, condition, tmp_path / f"killed-in-{name}.log")
    resume = [*CLI, "resume", str(run)]
    for (killed_in, _, decisions), (name, condition, _) in zip(SECTIONS, SECTIONS[1:]):
        assert not (run / "summary.json").exists()
        log = tmp_path / f"resumed-after-{killed_in}-killed-in-{name}.log"
        assert kill_when(resume, runs, condition, log) == run, "resume continues the killed run, in its folder"
        _reads_back(log.read_text(), killed_in, decisions)
    assert not (run / "summary.json").exists()
    resumed = subprocess.run(resume, capture_output=True, text=True, timeout=1800, env=ENV)
    said = resumed.stdout + resumed.stderr
    assert resumed.returncode == 0, said[-4000:]
    _reads_back(said, SECTIONS[-1][0], SECTIONS[-1][2])
    assert only_run(runs) == run, "resume continues the killed run, in its folder"
    assert len(list((run / "transformer").iterdir())) == 1, "the transformer's run is resumed, not started again"
    expected = json.loads((reference / "summary.json").read_text())
    got = json.loads((run / "summary.json").read_text())
    assert scores(got) == scores(expected)
    assert (run / "artifact" / "weights.safetensors").read_bytes() == \
        (reference / "artifact" / "weights.safetensors").read_bytes()
    decisions = json.loads((run / "decisions.json").read_text())
    assert got["deploy_variant"] == decisions["transformer_export"]["deploy"]
    assert not list(run.rglob(".*.tmp")) and not list(run.glob(".artifact.*")), "leftovers removed"
