"""The doctor on the practices and mistakes of real code (issues 21 and 33): tests/doctor/real/.

Every script is written here; its docstring cites the repository or thread whose *pattern* it exercises
(never its code) and lists the practices or the mistake it reproduces.

* ``real/correct/``: correct training scripts with the practices of public projects (pytorch/examples,
  minGPT, nanoGPT, timm, pytorch/tutorials), traps that are not bugs included: the doctor must say nothing
  at all, not even a note.
* ``real/bugs/``: reproductions of real users' bugs from GitHub issues: exactly the findings marked
  ``# expect: <check-id>`` on the culprit line, nothing else.
* ``real/errors.json``: PyTorch's own error texts as users pasted them into issues (their prose and paths
  trimmed): each explained by the right family, with the right fix (``fix`` must appear in the fix or the
  detail, ``not`` must not).

All scripts run through the doctor in one real subprocess.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from torchwork.doctor.explain import explain_text

ROOT = Path(__file__).resolve().parents[2]
REAL = Path(__file__).resolve().parent / "real"
CORRECT = sorted((REAL / "correct").glob("*.py"))
BUGS = sorted((REAL / "bugs").glob("*.py"))
ERRORS = json.loads((REAL / "errors.json").read_text(encoding="utf-8"))
MARK = re.compile(r"#\s*expect:\s*([a-z\-]+)")
DRIVER = """
import json, sys
from torchwork.doctor.runner import run_script
results = {}
for script in sys.argv[1:]:
    result = run_script(script, quiet_stdout=True)
    results[script] = result.to_json()
print(json.dumps(results))
"""


# The verdicts of the corpus this one replaced (issue 33): the rewritten scripts must keep every one of them.
# bug script -> the check it must be found by (the copied script it replaces)
KEPT_VERDICTS = {
    "missing_zero_grad_single_layer": "missing-zero-grad",  # aihwkit_missing_zero_grad
    "focal_loss_log_of_zero": "non-finite-loss",  # focal_loss_log_of_zero
    "running_loss_keeps_graph": "graph-kept-alive",  # labelmodels_running_loss_keeps_graph
    "compiled_checkpoint_prefix": "state-dict-mismatch",  # llms_from_scratch_compiled_checkpoint
    "last_batch_of_one": "batchnorm-single-sample",  # nncf_last_batch_of_one
    "eval_mode_not_restored": "train-mode",  # optuna_train_mode_not_restored
    "filtered_load_keeps_nothing": "state-dict-mismatch",  # pidnet_filtered_load_keeps_nothing
    "dataparallel_prefix_snapshot": "state-dict-mismatch",  # posenet_ddp_checkpoint_module_prefix
    "gan_step_before_generator_backward": "inplace-saved",  # srgan_discriminator_step_before_generator_backward
    "validation_without_eval": "eval-mode",  # udacity_validation_without_eval
}
# correct script -> the copied one it replaces (each silent before, each silent now)
KEPT_SILENT = {
    "char_gpt_accumulation": "nanogpt_train", "addition_gpt_trainer": "mingpt_adder",
    "gan_bce_detached_fakes": "pt_dcgan", "cnn_resume_checkpoint": "pt_imagenet_resume",
    "mnist_style_cnn": "pt_mnist", "poly_regression_manual_sgd": "pt_regression",
    "reinforce_policy_gradient": "pt_reinforce", "sine_lstmcell_lbfgs": "pt_time_sequence_prediction",
    "vae_reparam": "pt_vae", "lstm_lm_truncated_bptt": "pt_word_language_model",
    "finetune_clean_prefixes": "timm_clean_state_dict_finetune", "digits_train_test_loops": "tutorial_optimization_digits",
}


def expected(script: Path) -> set[tuple[str, int]]:
    return {(m.group(1), number) for number, line in enumerate(script.read_text().splitlines(), start=1)
            if (m := MARK.search(line))}


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src"), "OMP_NUM_THREADS": "1"}
    run = subprocess.run([sys.executable, "-c", DRIVER, *map(str, CORRECT + BUGS)], capture_output=True, text=True,
                         env=env, cwd=ROOT, timeout=600)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_the_corpus_is_the_size_the_issue_asks_and_cites_its_patterns() -> None:
    assert len(CORRECT) >= 10 and len(BUGS) >= 10 and len(ERRORS) >= 20
    for script in CORRECT + BUGS:
        head = script.read_text().split('"""')[1]
        assert head.startswith(("Pattern: ", "Patterns: ")), script.name
        assert "github.com" in head or "discuss.pytorch.org" in head, script.name
    for script in BUGS:
        assert expected(script), f"{script.name} marks no culprit line"
    for error in ERRORS:
        assert error["source"].startswith("https://github.com/"), error


def test_the_rewritten_corpus_keeps_the_verdicts_of_the_one_it_replaced() -> None:
    names = {script.stem: script for script in BUGS}
    for stem, check in KEPT_VERDICTS.items():
        assert {found for found, _ in expected(names[stem])} == {check}, stem
    assert set(KEPT_SILENT) <= {script.stem for script in CORRECT}


@pytest.mark.slow
@pytest.mark.parametrize("script", CORRECT, ids=[s.stem for s in CORRECT])
def test_no_false_alarm_on_correct_real_code(script: Path, results: dict[str, dict]) -> None:
    result = results[str(script)]
    assert "doctor_errors" not in result, result["doctor_errors"]
    assert result["exit"] == 0
    assert result["findings"] == [], json.dumps(result["findings"], indent=1)


@pytest.mark.slow
@pytest.mark.parametrize("script", BUGS, ids=[s.stem for s in BUGS])
def test_real_bug_found_at_the_culprit_line(script: Path, results: dict[str, dict]) -> None:
    result = results[str(script)]
    assert "doctor_errors" not in result, result["doctor_errors"]
    got = {(f["id"], f["line"]) for f in result["findings"]}
    assert got == expected(script), json.dumps(result["findings"], indent=1)
    for finding in result["findings"]:
        assert Path(finding["file"]).name == script.name and finding["fix"]


@pytest.mark.parametrize("error", ERRORS, ids=[e["source"].split("github.com/")[1] for e in ERRORS])
def test_real_error_text_explained_with_the_right_fix(error: dict) -> None:
    found = explain_text(error["text"])
    assert found, f"nothing recognised in {error['source']}"
    best = found[0]
    assert best.family == error["family"], [e.family for e in found]
    advice = f"{best.fix} {best.detail or ''}"
    assert error["fix"] in advice, advice
    if error.get("not"):
        assert error["not"] not in advice, advice
