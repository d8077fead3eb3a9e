"""torchwork tune, measured: prints one JSON object.

- storage: 8 processes running the workers' storage protocol (claim, heartbeat, 8 reports, tell) on one SQLite
  file, with torchwork's storage (WAL, BEGIN IMMEDIATE, busy timeout) against Optuna's plain SQLite URL:
  "database is locked" errors and trials per second;
- pruning: the quickstart's n-gram model on a subset, the same seed and trials with the default pruner and
  without: best params found, epochs trained;
- workers: 2 workers against 1 (no pruning): trials per minute;
- kill: random SIGKILLs of workers during a study; the study compared with the uninterrupted one (params,
  scores) and the wall time lost per kill;
- full (``--full``): a 24-trial study on the full data, best validation and test macro-F1 against the defaults.

Run: ``python benchmarks/tune.py`` (the issue's sizes: 16 trials on the quick subset of 3000 rows) or
``python benchmarks/tune.py --short`` (6 trials on 300 rows, minutes on 2 cores).
"""

from __future__ import annotations

import argparse
import json
import os
import random
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from results import record  # benchmarks/results.py: print the figures and log them in RESULTS.md

ROOT = Path(__file__).resolve().parents[1]
SPACE = ("lr: {low: 1.0e-3, high: 0.3, log: true}\nl2: {low: 1.0e-6, high: 1.0e-3, log: true}\n"
         "epochs: {choices: [4, 8]}\nmax_length: {low: 32, high: 96, step: 32}\n")


# The full-data study's space holds the recipe's defaults (12 epochs), so that it can find them again.
FULL_SPACE = SPACE.replace("epochs: {choices: [4, 8]}", "epochs: {choices: [4, 8, 12]}")


def env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(ROOT / "src") + os.pathsep + os.environ.get("PYTHONPATH", ""),
            "TORCHWORK_PROGRESS_EVERY": "3600"}


def command(runs: Path, study: str, trials: int, subset: int, *extra: str, final: bool = False,
            space_text: str = SPACE) -> list[str]:
    space = runs.parent / "space.yaml"
    space.parent.mkdir(parents=True, exist_ok=True)
    space.write_text(space_text)
    return [sys.executable, "-m", "torchwork.cli", "tune", "sentiment", "--space", str(space), "--trials",
            str(trials), "--study", study, "--seed", "0", "--set", f"run_dir={runs}", "--set", f"subset={subset}",
            "--set", "batch_size=64", *([] if final else ["--no-final"]), *extra]


def children_cpu_s() -> float:
    """CPU seconds of this process's finished children and theirs (a killed worker's included: the tune
    command reaps it): the compute a study used, less swayed by the other jobs on a shared machine than wall
    time is."""
    import resource

    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def run_study(runs: Path, study: str, trials: int, subset: int, *extra: str, final: bool = False,
              space_text: str = SPACE) -> dict[str, Any]:
    started, cpu = time.perf_counter(), children_cpu_s()
    done = subprocess.run(command(runs, study, trials, subset, *extra, final=final, space_text=space_text), env=env(),
                          capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    seconds = time.perf_counter() - started
    return {**json.loads((runs / "tune" / study / "summary.json").read_text()), "wall_s": seconds,
            "cpu_s": children_cpu_s() - cpu}


def outcome(runs: Path, study: str) -> dict[int, Any]:
    sys.path.insert(0, str(ROOT / "src"))
    import optuna

    from torchwork.tune.storage import default_url, open_storage
    from torchwork.tune.study import latest_attempts

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    loaded = optuna.load_study(study_name=study, storage=open_storage(default_url(runs / "tune" / study)))
    return {n: (t.state.name, t.params, t.value, dict(t.intermediate_values))
            for n, t in latest_attempts(loaded.get_trials()).items()}


def rank_of(runs: Path, study: str, trial: int) -> int:
    """Trial ``trial``'s place among the study's complete trials, best first (0: the best)."""
    done = {n: o[2] for n, o in outcome(runs, study).items() if o[0] == "COMPLETE"}
    return sorted(done, key=lambda n: (-done[n], n)).index(trial)


def attempt_numbers(runs: Path, study: str) -> list[int]:
    """The tuner trial number of every Optuna trial (every attempt, killed ones included)."""
    import optuna

    from torchwork.tune.storage import default_url, open_storage

    loaded = optuna.load_study(study_name=study, storage=open_storage(default_url(runs / "tune" / study)))
    return [t.user_attrs["trial"] for t in loaded.get_trials() if "trial" in t.user_attrs]


def defaults_rerun(folder: Path) -> dict[str, Any]:
    """``torchwork train`` on the recipe's defaults (with the studies' batch size): validation and test."""
    config = folder / "defaults.yaml"
    config.write_text(f"recipe: sentiment\nbatch_size: 64\nrun_dir: {folder / 'defaults-rerun'}\n")
    code = ("import json, sys\nfrom torchwork.tune.results import rerun_best\n"
            "print(json.dumps(rerun_best(__import__('pathlib').Path(sys.argv[1]))))")
    done = subprocess.run([sys.executable, "-c", code, str(config)], env=env(), capture_output=True, text=True)
    if done.returncode != 0:
        raise SystemExit(done.stdout[-2000:] + done.stderr[-2000:])
    return json.loads(done.stdout.strip().splitlines()[-1])


# ----------------------------------------------------------------------------------------------- storage
def storage_worker(url: str, plain: bool, trials: int) -> None:
    """One process of the storage stress: the protocol the tune workers follow, with no training."""
    sys.path.insert(0, str(ROOT / "src"))
    import warnings

    import optuna

    warnings.simplefilter("ignore")
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    if plain:
        storage: Any = optuna.storages.RDBStorage(url, heartbeat_interval=1, grace_period=30)
    else:
        from torchwork.tune.storage import open_storage

        storage = open_storage(url, heartbeat_s=1, grace_s=30)
    study = optuna.load_study(study_name="stress", storage=storage)
    errors = done = 0
    while done < trials:
        try:
            trial = study.ask()
            storage.record_heartbeat(trial._trial_id)
            for step in range(8):
                trial.report(random.random(), step)
                trial.should_prune()
            study.tell(trial, random.random())
            done += 1
        except Exception as error:  # noqa: BLE001 - counted and reported, the point of the stress
            if "locked" in str(error):
                errors += 1
            else:
                raise
    print(json.dumps({"locked": errors}))


def storage_stress(folder: Path, plain: bool, workers: int = 8, trials: int = 40) -> dict[str, Any]:
    import optuna

    db = folder / ("plain.db" if plain else "ours.db")
    url = f"sqlite:///{db}"
    optuna.logging.set_verbosity(optuna.logging.ERROR)
    optuna.create_study(study_name="stress", storage=url)
    started = time.perf_counter()
    processes = [subprocess.Popen([sys.executable, __file__, "--storage-worker", url, "plain" if plain else "ours",
                                   str(trials)], env=env(), stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
                 for _ in range(workers)]
    results = [p.communicate() for p in processes]
    seconds = time.perf_counter() - started
    crashed = [err.strip().splitlines()[-1] for (out, err), p in zip(results, processes) if p.returncode != 0]
    locked = sum(json.loads(out.strip().splitlines()[-1])["locked"] for (out, _), p in zip(results, processes)
                 if p.returncode == 0 and out.strip())
    return {"workers": workers, "trials_each": trials, "locked_errors": locked, "crashed_workers": len(crashed),
            "crash_reasons": sorted(set(crashed))[:3], "trials_per_s": round(workers * trials / seconds, 1)}


# ----------------------------------------------------------------------------------------------- kills
def killed_study(runs: Path, trials: int, subset: int, kills: int, seed: int = 0) -> dict[str, Any]:
    import psutil

    rng = random.Random(seed)
    started, cpu = time.perf_counter(), children_cpu_s()
    process = subprocess.Popen(command(runs, "killed", trials, subset, "--pruner", "none"), env=env(),
                               stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    done_kills = 0
    while process.poll() is None and done_kills < kills:
        time.sleep(rng.uniform(4.0, 14.0))  # the 16-trial study runs ~2.5 min: room for 10 kills
        children = [c for c in psutil.Process(process.pid).children() if c.is_running()]
        if children and process.poll() is None:
            os.kill(children[0].pid, signal.SIGKILL)
            done_kills += 1
    process.wait()
    return {"kills": done_kills, "wall_s": time.perf_counter() - started, "returncode": process.returncode,
            "cpu_s": children_cpu_s() - cpu}


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--short", action="store_true", help="6 trials on 300 rows (minutes)")
    parser.add_argument("--full", action="store_true", help="also the 24-trial study on the full data (an hour)")
    parser.add_argument("--only", default="storage,pruning,workers,kill", help="parts to run")
    parser.add_argument("--storage-worker", nargs=3, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.storage_worker:
        url, kind, trials = args.storage_worker
        storage_worker(url, kind == "plain", int(trials))
        return
    trials, subset = (6, 300) if args.short else (16, 3000)
    parts = set(args.only.split(","))
    result: dict[str, Any] = {"cores": len(os.sched_getaffinity(0)), "trials": trials, "subset": subset}
    folder = Path(tempfile.mkdtemp(prefix="torchwork-tune-bench-"))
    goals: dict[str, bool] = {}
    if "storage" in parts:
        result["storage"] = {"torchwork": storage_stress(folder, plain=False),
                             "optuna_plain_sqlite": storage_stress(folder, plain=True)}
    if parts & {"pruning", "workers", "kill"}:
        off = run_study(folder / "off" / "runs", "off", trials, subset, "--pruner", "none")
    if "pruning" in parts:
        on = run_study(folder / "on" / "runs", "on", trials, subset)  # the default pruner
        result["pruning"] = {
            "off": {"best_trial": off["best_trial"], "best_value": off["best_value"], "best_params": off["best_params"],
                    "epochs_trained": off["epochs_trained"], "wall_s": round(off["wall_s"], 1)},
            "on": {"best_trial": on["best_trial"], "best_value": on["best_value"], "best_params": on["best_params"],
                   "epochs_trained": on["epochs_trained"], "pruned": on["trials"]["pruned"],
                   "wall_s": round(on["wall_s"], 1)},
            "same_best_trial": on["best_trial"] == off["best_trial"],
            # where the pruned study's best stands among the unpruned study's trials (0: the same best)
            "on_best_rank_without_pruning": rank_of(folder / "off" / "runs", "off", on["best_trial"]),
            "epochs_saved": round(1 - on["epochs_trained"] / off["epochs_trained"], 3)}
        goals["pruning_same_best_and_40pct_fewer_epochs"] = (result["pruning"]["same_best_trial"]
                                                             and result["pruning"]["epochs_saved"] >= 0.4)
    if "workers" in parts:
        two = run_study(folder / "two" / "runs", "two", trials, subset, "--pruner", "none", "--workers", "2")
        same = {n: o[1] for n, o in outcome(folder / "two" / "runs", "two").items()} == \
               {n: o[1] for n, o in outcome(folder / "off" / "runs", "off").items()}
        result["workers"] = {"one_trials_per_min": round(60 * trials / off["wall_s"], 2),
                             "two_trials_per_min": round(60 * trials / two["wall_s"], 2),
                             "speedup": round(off["wall_s"] / two["wall_s"], 2), "same_params": same,
                             "one_cpu_s": round(off["cpu_s"], 1), "two_cpu_s": round(two["cpu_s"], 1),
                             "threads_per_worker": two["threads_per_worker"]}
        goals["two_workers_1.7x"] = result["workers"]["speedup"] >= 1.7
    if "kill" in parts:
        kills = 10 if not args.short else 3
        runs = folder / "killed" / "runs"
        killed = killed_study(runs, trials, subset, kills)
        if killed["returncode"] != 0:
            raise SystemExit(f"the killed study ended with {killed['returncode']}")
        ours, theirs = outcome(runs, "killed"), outcome(folder / "off" / "runs", "off")
        result["kill"] = {"kills": killed["kills"], "equal_to_uninterrupted": ours == theirs,
                          "same_params": {n: o[1] for n, o in ours.items()} == {n: o[1] for n, o in theirs.items()},
                          "same_scores": {n: o[2] for n, o in ours.items()} == {n: o[2] for n, o in theirs.items()},
                          "wall_s": round(killed["wall_s"], 1), "uninterrupted_wall_s": round(off["wall_s"], 1),
                          "lost_s_per_kill": round((killed["wall_s"] - off["wall_s"]) / max(killed["kills"], 1), 1),
                          "cpu_s": round(killed["cpu_s"], 1), "uninterrupted_cpu_s": round(off["cpu_s"], 1),
                          "lost_cpu_s_per_kill": round((killed["cpu_s"] - off["cpu_s"]) / max(killed["kills"], 1), 1),
                          "attempts": sum(1 for _ in attempt_numbers(runs, "killed"))}
        goals["kill_equal_to_uninterrupted"] = result["kill"]["equal_to_uninterrupted"] and \
            result["kill"]["kills"] == kills
    if args.full:
        full_runs = folder / "full" / "runs"
        full_summary = run_study(full_runs, "full", 24, 0, final=True, space_text=FULL_SPACE)
        result["full"] = {k: full_summary.get(k) for k in ("best_value", "best_params", "defaults", "best_rerun",
                                                           "gain_over_defaults", "trials", "epochs_trained",
                                                           "seconds")}
        result["full"]["space"] = FULL_SPACE
        # The defaults' test score, which the tuner never reads: the recipe run on its defaults, here, once.
        result["full"]["defaults_rerun"] = defaults_rerun(folder / "full")
    result["goals_met"] = goals
    record(result)
    import shutil

    shutil.rmtree(folder, ignore_errors=True)  # 16-trial studies leave over a gigabyte of checkpoints


if __name__ == "__main__":
    main()
