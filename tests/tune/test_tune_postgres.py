"""The scale-out path: one study on a real PostgreSQL server, run by two ``torchwork tune`` commands at once
(as two machines would), each with its own folder: every trial runs exactly once, with the params of its
number, and ``tune show`` reads the study from the server."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest
from postgres_server import binaries, create_database, postgres_server
from tune_helpers import SPACE, TRIALS, environment, tune_command

pytestmark = pytest.mark.skipif(binaries() is None,
                                reason="PostgreSQL is not installed (make system-deps installs Debian's postgresql)")


# Two machines' worker loops at full speed: claim the lowest waiting copy, give way if it is a duplicate, else
# "run" it (told COMPLETE at once, so the claims collide as often as they can).
RACE = """
import sys, time
import optuna
from torchwork.tune.storage import open_storage
from torchwork.tune.trial import claim, give_way, is_duplicate
optuna.logging.set_verbosity(optuna.logging.WARNING)
study = optuna.load_study(study_name="race", storage=open_storage(sys.argv[1]))
while time.time() < float(sys.argv[2]):
    time.sleep(0.001)
ran = 0
while (trial := claim(study)) is not None:
    if is_duplicate(study, trial):
        give_way(study, trial)
    else:
        study.tell(trial, 1.0)
        ran += 1
print(ran)
"""
NUMBERS = 40


@pytest.fixture(scope="module")
def server():
    with postgres_server() as url:
        yield url


def test_two_machines_share_one_study(server, tmp_path) -> None:
    import optuna

    from torchwork.tune.space import Space
    from torchwork.tune.storage import open_storage
    from torchwork.tune.study import latest_attempts
    from torchwork.tune.target import RecipeTarget

    machines = [tmp_path / "a" / "runs", tmp_path / "b" / "runs"]
    processes = [subprocess.Popen(tune_command(runs, "shared", "--storage", server), env=environment(),
                                  stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) for runs in machines]
    outputs = [p.communicate(timeout=900)[0] for p in processes]
    assert [p.returncode for p in processes] == [0, 0], "\n".join(o[-2000:] for o in outputs)

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    study = optuna.load_study(study_name="shared", storage=open_storage(server))
    trials = study.get_trials()
    assert {t.state.name for t in trials} <= {"COMPLETE", "PRUNED", "FAIL"}
    assert all(t.user_attrs.get("duplicate") for t in trials if t.state.name == "FAIL")  # only copies queued twice
    latest = latest_attempts(trials)
    assert sorted(latest) == list(range(TRIALS))
    assert all(t.state.name in ("COMPLETE", "PRUNED") for t in latest.values())
    target = RecipeTarget("sentiment", ["subset=300"])
    space = Space.from_mapping(__import__("yaml").safe_load(SPACE), target.integer_fields)
    assert all(t.params == space.params_for(n, seed=0) for n, t in latest.items())
    ran = [{int(p.name) for p in (runs / "tune" / "shared" / "trials").iterdir()} for runs in machines]
    assert ran[0] | ran[1] == set(range(TRIALS)) and all(ran), ran  # both machines worked

    shown = subprocess.run([sys.executable, "-m", "torchwork.cli", "tune", "show", server, "--study", "shared"],
                           env=environment(), capture_output=True, text=True, timeout=120)
    assert shown.returncode == 0, shown.stderr
    assert sum(line.split()[:1][0].isdigit() for line in shown.stdout.splitlines() if line.split()) == TRIALS


def test_copies_queued_by_two_machines_run_once_each_however_the_claims_collide(server) -> None:
    import optuna

    from torchwork.tune.storage import open_storage
    from torchwork.tune.study import latest_attempts

    url = create_database(server, "race")
    study = optuna.create_study(storage=open_storage(url), study_name="race", direction="maximize")
    for number in range(NUMBERS):
        for _ in range(2):  # each machine queued every number
            study.enqueue_trial({}, user_attrs={"trial": number, "attempt": 0})
    start = time.time() + 8.0  # both past their imports, so the loops overlap (one may still start late)
    machines = [subprocess.Popen([sys.executable, "-c", RACE, url, str(start)], env=environment(),
                                 stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True) for _ in range(2)]
    outputs = [p.communicate(timeout=300) for p in machines]
    assert [p.returncode for p in machines] == [0, 0], [err[-2000:] for _, err in outputs]

    trials = study.get_trials()
    done = [t.user_attrs["trial"] for t in trials if t.state.name == "COMPLETE"]
    assert sorted(done) == list(range(NUMBERS))  # every number ran, none twice
    assert all(t.user_attrs.get("duplicate") for t in trials if t.state.name == "FAIL")
    assert sorted(latest_attempts(trials)) == list(range(NUMBERS))
    assert sum(int(out) for out, _ in outputs) == NUMBERS  # each process counts only what it ran
