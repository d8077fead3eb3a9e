"""Every script in examples/mistakes/ gives exactly the findings marked in it; the correct ones give none.

A line marked ``# doctor: <check-id>`` must carry exactly that finding. All examples run through the
doctor in one real subprocess (one torch import for all of them); the command line itself is tested in a
few more subprocesses.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
SRC = ROOT / "src"
EXAMPLES = ROOT / "examples" / "mistakes"
SCRIPTS = sorted(EXAMPLES.glob("*.py"))
MARK = re.compile(r"#\s*doctor:\s*([a-z\-]+)")
CRASHING = {"batchnorm_single_sample", "device_mismatch", "inplace_layer", "inplace_leaf", "inplace_saved",
            "state_dict_mismatch"}

DRIVER = """
import json, sys
from torchwork.doctor.runner import run_script
results = {}
for script in sys.argv[1:]:
    result = run_script(script, quiet_stdout=True)
    results[script] = {**result.to_json(), "doctor_exit": result.exit_code}
print(json.dumps(results))
"""


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(SRC), "OMP_NUM_THREADS": "1"}


def expected_findings(script: Path) -> set[tuple[str, int]]:
    found = set()
    for number, line in enumerate(script.read_text().splitlines(), start=1):
        match = MARK.search(line)
        if match:
            found.add((match.group(1), number))
    return found


@pytest.fixture(scope="module")
def results() -> dict[str, dict]:
    run = subprocess.run([sys.executable, "-c", DRIVER, *map(str, SCRIPTS)], capture_output=True, text=True,
                         env=_env(), cwd=ROOT, timeout=300)
    assert run.returncode == 0, run.stderr[-4000:]
    return json.loads(run.stdout.strip().splitlines()[-1])


def test_there_is_an_example_for_every_check() -> None:
    from torchwork.doctor.checks import CHECK_IDS

    marked = {finding for script in SCRIPTS for finding, _ in expected_findings(script)}
    assert marked == set(CHECK_IDS)
    assert len([s for s in SCRIPTS if s.name.startswith("correct_")]) >= 3


@pytest.mark.parametrize("script", SCRIPTS, ids=[s.stem for s in SCRIPTS])
def test_example_gives_exactly_the_marked_findings(script: Path, results: dict[str, dict]) -> None:
    result = results[str(script)]
    assert "doctor_errors" not in result, result["doctor_errors"]
    got = {(f["id"], f["line"]) for f in result["findings"]}
    assert got == expected_findings(script), json.dumps(result["findings"], indent=1)
    for finding in result["findings"]:
        assert Path(finding["file"]).name == script.name
        assert finding["message"] and finding["fix"]
    assert result["exit"] == (1 if script.stem in CRASHING else 0)
    serious = any(f["severity"] in ("error", "warning") for f in result["findings"])
    assert result["doctor_exit"] == (1 if serious else 0)


def test_correct_scripts_have_no_warning_or_error(results: dict[str, dict]) -> None:
    for script in SCRIPTS:
        if script.stem.startswith("correct_"):
            assert results[str(script)]["findings"] == [], script.name


# ------------------------------------------------------------------------------------------ the CLI
def _doctor(*args: str, cwd: Path = ROOT) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "torchwork.cli", "doctor", *args], capture_output=True,
                          text=True, env=_env(), cwd=cwd, timeout=120)


def test_cli_json_keeps_stdout_for_the_json() -> None:
    run = _doctor("--json", str(EXAMPLES / "missing_zero_grad.py"))
    assert run.returncode == 1, run.stderr
    data = json.loads(run.stdout)  # the script's own prints went to stderr
    assert data["exit"] == 0
    assert [f["id"] for f in data["findings"]] == ["missing-zero-grad"]
    assert set(data["findings"][0]) == {"id", "severity", "file", "line", "message", "fix"}
    assert "epoch 1: loss" in run.stderr


def test_cli_readable_report_of_a_crash() -> None:
    run = _doctor(str(EXAMPLES / "inplace_saved.py"))
    assert run.returncode == 1
    assert "Traceback (most recent call last)" in run.stderr and "inplace_saved.py" in run.stderr
    assert "ERROR\n  [inplace-saved] examples/mistakes/inplace_saved.py:18" in run.stdout
    assert "saved at examples/mistakes/inplace_saved.py:17" in run.stdout
    assert "the script exited with 1" in run.stdout


def test_cli_traceback_shows_the_users_frames_and_ours_only_with_debug() -> None:
    """Issue 15 item 12: the doctor's hooks run inside the user's calls; their frames are not the user's."""
    run = _doctor(str(EXAMPLES / "inplace_saved.py"))
    assert "inplace_saved.py\", line 27" in run.stderr and "loss.backward()" in run.stderr
    assert "torchwork" not in run.stderr.split("RuntimeError:")[0], run.stderr
    assert "handle_torch_function" not in run.stderr
    debug = _doctor("--debug", str(EXAMPLES / "inplace_saved.py"))
    assert "torchwork/doctor/checks/inplace_saved.py" in debug.stderr
    assert debug.stdout == run.stdout


def test_cli_passes_arguments_and_exit_status(tmp_path: Path) -> None:
    script = tmp_path / "args.py"
    script.write_text("import sys\nimport torch\ntorch.manual_seed(0)\nprint('argv', sys.argv[1:])\n"
                      "sys.exit(int(sys.argv[2]))\n")
    run = _doctor("--json", str(script), "--flag", "3", cwd=tmp_path)
    assert run.returncode == 0, run.stderr
    assert json.loads(run.stdout) == {"findings": [], "exit": 3}
    assert "argv ['--flag', '3']" in run.stderr


def test_cli_clean_script_and_missing_script() -> None:
    run = _doctor(str(EXAMPLES / "correct_accumulation.py"))
    assert run.returncode == 0, run.stdout + run.stderr
    assert "torchwork doctor: no findings in" in run.stdout
    run = _doctor("no_such_script.py")
    assert run.returncode == 2 and "no script" in run.stderr


def test_cli_help_does_not_import_torch() -> None:
    code = "import sys; from torchwork.cli import main\ntry:\n    main(['doctor', '--help'])\nexcept SystemExit:\n" \
           "    pass\nprint('torch' in sys.modules)"
    run = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=_env(), timeout=60)
    assert run.stdout.strip().endswith("False"), run.stdout
