"""What a study leaves in its folder: ``summary.json``, ``best.yaml``, ``report.html``; and the two runs after
the trials: the recipe's defaults on validation (what the best settings gained) and the best trial rerun from
``best.yaml`` by the whole recipe (its test score, computed once; the tuner itself never reads the test split).

Example:
    >>> counts({})
    {'complete': 0, 'pruned': 0, 'failed': 0, 'unfinished': 0}
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from torchwork.files import atomic_write, write_json

FINAL_STATES = ("COMPLETE", "PRUNED")


def is_final(frozen: Any) -> bool:
    """Whether a trial's latest attempt ended for good (a killed attempt has no ``error`` and is retried)."""
    state = frozen.state.name
    return state in FINAL_STATES or (state == "FAIL" and "error" in frozen.user_attrs)


def counts(attempts: dict[int, Any]) -> dict[str, int]:

    found = {"complete": 0, "pruned": 0, "failed": 0, "unfinished": 0}
    for frozen in attempts.values():
        state = frozen.state.name
        key = ("complete" if state == "COMPLETE" else "pruned" if state == "PRUNED"
               else "failed" if is_final(frozen) else "unfinished")
        found[key] += 1
    return found


def best_attempt(attempts: dict[int, Any], direction: str) -> Any:
    done = [t for t in attempts.values() if t.state.name == "COMPLETE" and t.value is not None]
    if not done:
        return None
    # ties go to the lower trial number, whatever order the workers finished in
    key = (lambda t: (-t.value, t.user_attrs["trial"])) if direction == "maximize" else \
          (lambda t: (t.value, t.user_attrs["trial"]))
    return min(done, key=key)


def write_best_yaml(path: Path, config: dict[str, Any], comment: str, rerun: bool = True) -> None:
    import yaml

    how = f"# Rerun it: torchwork train {path}\n" if rerun else "# params: the best trial's trial.params\n"
    text = f"# {comment}\n{how}" + yaml.safe_dump(config, sort_keys=False)
    with atomic_write(path) as handle:
        handle.write(text.encode())


def defaults_score(prepared: dict[str, Any], threads: int) -> dict[str, Any]:
    """The recipe's own settings trained like a trial (in ``defaults/``, resumed if it was interrupted)."""
    from torchwork.runs.folder_files import load_json, read_run_file
    from torchwork.runs.readback import MAX_MANIFEST_BYTES
    from torchwork.tune.trial import resuming

    target, folder = prepared["target"], prepared["folder"] / "defaults"
    recorded = folder / "result.json"
    try:  # a regular file inside the study folder, bounded: a link out or a FIFO is a ConfigError naming it
        data = read_run_file(prepared["folder"], "defaults/result.json", MAX_MANIFEST_BYTES)
    except FileNotFoundError:
        data = None  # not run yet
    if data is not None:
        known: dict[str, Any] = load_json(data, recorded)
        return known
    folder.mkdir(parents=True, exist_ok=True)
    with resuming(folder):
        result = target.run({}, folder, threads, [], {"tune": {"study": prepared["study"].study_name,
                                                               "trial": "defaults"}})
    found = {"value": result["value"], "epochs": len(result["history"]),
             "run": str(Path(result["run_path"]).relative_to(prepared["folder"]))}
    write_json(recorded, found)
    return found


def rerun_best(best_yaml: Path) -> dict[str, Any]:
    """``torchwork train best.yaml``: the whole recipe (test split, export) on the best settings."""
    from torchwork.recipes.registry import resolve, run_recipe
    from torchwork.runs.folder_files import load_json, read_run_file
    from torchwork.runs.listing import MAX_BEST_BYTES

    name, config = resolve(str(best_yaml))
    summary = run_recipe(name, config)
    run = Path(summary["report"]).parent
    best = read_run_file(run, "checkpoints/best.json", MAX_BEST_BYTES)  # bounded, a regular file of the run
    validation = load_json(best, run / "checkpoints" / "best.json")["value"]
    return {"validation": validation, "test": summary["test"], "run": str(run)}


def finish(prepared: dict[str, Any], options: Any, threads: int, started: float) -> dict[str, Any]:
    """Summary, best.yaml, the final runs (unless ``options.final`` is off) and the report."""
    from torchwork.tune.report import write_report
    from torchwork.tune.storage import describe_url
    from torchwork.tune.study import latest_attempts

    study, target, folder = prepared["study"], prepared["target"], prepared["folder"]
    attempts = latest_attempts(study.get_trials(deepcopy=False))
    direction = target.objective["direction"]
    best = best_attempt(attempts, direction)
    summary: dict[str, Any] = {
        "study": study.study_name, "folder": str(folder), "storage": describe_url(prepared["url"]),
        "objective": target.objective["name"],
        "objective_description": target.objective["description"], "direction": direction,
        "best_value": best.value if best else None, "best_params": dict(best.params) if best else None,
        "best_trial": best.user_attrs["trial"] if best else None, "trials": counts(attempts),
        "workers": options.workers, "threads_per_worker": threads, "pruner": options.pruner,
        "seed": options.seed, "epochs_trained": sum(int(t.user_attrs.get("epochs", 0)) for t in attempts.values()),
        "test_split_read_by_trials": False, "seconds": None,
    }
    if best is not None:
        config = target.full_config(dict(best.params), threads, best.user_attrs.get("precision"),
                                    str(folder / "best"))
        write_best_yaml(folder / "best.yaml", config, f"study {study.study_name}, trial {summary['best_trial']}: "
                        f"{summary['objective']} {best.value:.6f}", rerun=target.has_final_runs)
        summary["best_yaml"] = str(folder / "best.yaml")
    if options.final and target.has_final_runs and summary["trials"]["unfinished"] == 0:
        defaults = defaults_score(prepared, threads)
        summary["defaults"] = defaults
        if best is not None:
            sign = 1 if direction == "maximize" else -1
            summary["gain_over_defaults"] = round(sign * (best.value - defaults["value"]), 6)
            rerun = rerun_best(folder / "best.yaml")
            rerun["validation_equal"] = rerun["validation"] == best.value
            summary["best_rerun"] = rerun
    summary["seconds"] = round(time.perf_counter() - started, 1)
    write_json(folder / "summary.json", summary)
    write_report(folder / "report.html", summary, attempts, prepared["space"])
    return summary

