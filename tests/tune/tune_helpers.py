"""A small real study for the tune tests: the sentiment recipe's n-gram model on 300 tweets per split, a few
epochs, trained by real worker processes; and ways to read it back."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

SPACE = "lr: {low: 1.0e-3, high: 0.3, log: true}\nepochs: {choices: [2, 3]}\n"
TRIALS = 4
# The study's settings. verify_rounds=5 (the fewest the recipe takes, against 20) reaches best.yaml, so that the
# reruns of the best trial (its whole recipe, export and verification included) time 5 rounds, not 20.
SETTINGS = ["subset=300", "batch_size=64", "verify_rounds=5"]


def tune_command(runs: Path, study: str, *extra: str, trials: int = TRIALS) -> list[str]:
    space = runs.parent / "space.yaml"
    space.parent.mkdir(parents=True, exist_ok=True)
    space.write_text(SPACE)
    return [sys.executable, "-m", "torchwork.cli", "tune", "sentiment", "--space", str(space), "--trials", str(trials),
            "--study", study, "--seed", "0", "--set", f"run_dir={runs}", *(a for s in SETTINGS for a in ("--set", s)),
            "--no-final", *extra]


def environment() -> dict[str, str]:
    src = str(Path(__file__).resolve().parents[2] / "src")
    return {**os.environ, "PYTHONPATH": src + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "TORCHWORK_PROGRESS_EVERY": "3600"}


def run_tune(runs: Path, study: str, *extra: str, trials: int = TRIALS, timeout: float = 600) -> subprocess.CompletedProcess:
    done = subprocess.run(tune_command(runs, study, *extra, trials=trials), env=environment(), capture_output=True,
                          text=True, timeout=timeout)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done


def study_folder(runs: Path, study: str) -> Path:
    return runs / "tune" / study


def trials_of(runs: Path, study: str) -> list[Any]:
    """Every Optuna trial of the study (all attempts)."""
    import optuna

    from torchwork.tune.storage import default_url, open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(default_url(study_folder(runs, study)))
    return optuna.load_study(study_name=study, storage=storage).get_trials()


def outcome(runs: Path, study: str) -> dict[int, dict[str, Any]]:
    """Per tuner trial number, its latest attempt: state, params, value, per-epoch values."""
    from torchwork.tune.study import latest_attempts

    return {n: {"state": t.state.name, "params": t.params, "value": t.value,
                "intermediate": dict(sorted(t.intermediate_values.items()))}
            for n, t in latest_attempts(trials_of(runs, study)).items()}


def trial_json(runs: Path, study: str, number: int) -> dict[str, Any]:
    return json.loads((study_folder(runs, study) / "trials" / str(number) / "trial.json").read_text())


def manifest(runs: Path, study: str, number: int) -> dict[str, Any]:
    folder = study_folder(runs, study) / "trials" / str(number)
    (run,) = [p for p in folder.iterdir() if p.is_dir()]
    return json.loads((run / "manifest.json").read_text())
