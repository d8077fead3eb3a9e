"""Pruners compared on recorded studies: an unpruned study's per-epoch scores replayed through Optuna's pruners.

Run an unpruned study first (``torchwork tune ... --pruner none --no-final``), then
``python benchmarks/tune_pruner_replay.py <run_dir>/tune/<study> [...]``. For one worker the replay is exact:
a trial's scores do not depend on the pruner until it is pruned (the engine trains bit-exactly), so each
candidate is scored by what the pruned study would have found: its best trial's place among the unpruned
study's trials (0: the same best) and the fraction of epochs it would not have trained. This is how the
default pruner of torchwork/tune/pruning.py was chosen (docs/tune.md, "Why the default is not the median").
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "src"))

from results import record  # noqa: E402 - benchmarks/results.py: print the figures and log them in RESULTS.md


def curves(folder: Path) -> dict[int, tuple[int, list[float], float]]:
    """Per trial number: its epochs setting, its per-epoch scores and its value (latest attempts)."""
    import optuna

    from torchwork.tune.storage import default_url, open_storage
    from torchwork.tune.study import latest_attempts

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    study = optuna.load_study(study_name=folder.name, storage=open_storage(default_url(folder)))
    return {n: (int(t.params["epochs"]), [t.intermediate_values[k] for k in sorted(t.intermediate_values)], t.value)
            for n, t in latest_attempts(study.get_trials()).items() if t.state.name == "COMPLETE"}


def replay(found: dict[int, tuple[int, list[float], float]], pruner: Any) -> dict[str, Any]:
    """The trials in order through ``pruner`` (never pruned at their last epoch, as the tuner does)."""
    import optuna

    study = optuna.create_study(direction="maximize", pruner=pruner)
    epochs, done = 0, {}
    for number, (planned, scores, value) in sorted(found.items()):
        trial, pruned = study.ask(), False
        for step, score in enumerate(scores):
            trial.report(score, step)
            epochs += 1
            if step + 1 < planned and trial.should_prune():
                pruned = True
                break
        study.tell(trial, None if pruned else value, state=optuna.trial.TrialState.PRUNED if pruned else None)
        if not pruned:
            done[number] = value
    ranking = sorted(found, key=lambda n: (-found[n][2], n))
    best = min(done, key=lambda n: (-done[n], n))
    return {"best_rank": ranking.index(best), "epochs_saved": round(1 - epochs / sum(len(c[1]) for c in found.values()), 3)}


def main() -> None:
    import optuna

    candidates = {
        "median, from epoch 2, after trials//4 (1..4)": lambda t: optuna.pruners.MedianPruner(
            n_startup_trials=min(4, max(1, t // 4)), n_warmup_steps=1),
        "median, from epoch 1, after 2": lambda t: optuna.pruners.MedianPruner(n_startup_trials=2, n_warmup_steps=0),
        "median, from epoch 1, after 3": lambda t: optuna.pruners.MedianPruner(n_startup_trials=3, n_warmup_steps=0),
        "percentile 60, from epoch 1, after 2": lambda t: optuna.pruners.PercentilePruner(60.0, n_startup_trials=2,
                                                                                          n_warmup_steps=0),
        "percentile 70, from epoch 1, after 2": lambda t: optuna.pruners.PercentilePruner(70.0, n_startup_trials=2,
                                                                                          n_warmup_steps=0),
    }
    figures: dict[str, Any] = {}
    for argument in sys.argv[1:]:
        found = curves(Path(argument))
        figures[Path(argument).name] = {name: replay(found, make(len(found))) for name, make in candidates.items()}
    record(figures)


if __name__ == "__main__":
    main()
