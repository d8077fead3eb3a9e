"""Which copy of a trial number runs when two machines queued it twice (both opened a fresh study at once).

Seen once in make test's two-machine PostgreSQL test: both machines claimed their own copy of trial 2 at the
same moment, each saw the other's copy running, both gave way, and trial 2 never ran. The rule now: the
earliest-queued live copy runs, every other copy gives way, whatever order the checks happen in."""

from __future__ import annotations

import pytest


@pytest.fixture
def study(tmp_path):
    import optuna

    from torchwork.tune.storage import open_storage

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    storage = open_storage(f"sqlite:///{tmp_path / 'study.db'}")
    return optuna.create_study(storage=storage, study_name="claims", direction="maximize")


def _queue(study, number: int, copies: int = 2) -> None:
    for _ in range(copies):  # what two machines' queue_missing do when they open the study at once
        study.enqueue_trial({"lr": 0.01}, user_attrs={"trial": number, "attempt": 0})


def test_two_copies_claimed_at_once_leave_exactly_the_first_to_run(study) -> None:
    from torchwork.tune.trial import claim, is_duplicate

    _queue(study, 2)
    first, second = claim(study), claim(study)
    assert first._trial_id < second._trial_id
    # Checked in both orders, as two workers on two machines would: one answer each, and exactly one runs.
    assert [is_duplicate(study, second), is_duplicate(study, first)] == [True, False]
    assert [is_duplicate(study, first), is_duplicate(study, second)] == [False, True]


def test_a_copy_claimed_before_an_earlier_one_gives_way_to_it(study) -> None:
    import optuna
    from optuna.trial import TrialState

    from torchwork.tune.trial import is_duplicate

    _queue(study, 0)
    waiting = study.get_trials(deepcopy=False, states=(TrialState.WAITING,))
    later = max(waiting, key=lambda t: t._trial_id)
    assert study._storage.set_trial_state_values(later._trial_id, state=TrialState.RUNNING)
    assert is_duplicate(study, optuna.trial.Trial(study, later._trial_id))  # the earlier copy is still waiting


def test_a_copy_after_one_that_finished_gives_way_and_a_lone_copy_runs(study) -> None:
    from optuna.trial import TrialState

    from torchwork.tune.trial import claim, is_duplicate

    _queue(study, 1, copies=1)
    lone = claim(study)
    assert not is_duplicate(study, lone)
    study.tell(lone, 0.5)
    _queue(study, 1, copies=1)  # a copy queued after the number finished (a retry queued twice)
    late = claim(study)
    assert is_duplicate(study, late)
    study.tell(late, state=TrialState.FAIL)


def test_a_failed_copy_does_not_stop_its_retry(study) -> None:
    from optuna.trial import TrialState

    from torchwork.tune.recovery import queue_retry
    from torchwork.tune.trial import claim, is_duplicate

    _queue(study, 3, copies=1)
    killed = claim(study)
    study._storage.set_trial_state_values(killed._trial_id, state=TrialState.FAIL)
    queue_retry(study, study._storage.get_trial(killed._trial_id))
    retry = claim(study)
    assert retry.user_attrs["attempt"] == 1 and not is_duplicate(study, retry)
