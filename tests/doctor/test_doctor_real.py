"""The doctor on code nobody here wrote (issue 21): tests/doctor/real/.

* ``real/correct/``: correct training scripts reproduced from public repositories (pytorch/examples,
  minGPT, nanoGPT, timm, pytorch/tutorials): the doctor must say nothing at all, not even a note.
* ``real/bugs/``: real users' bugs from GitHub issues, reproduced faithfully: exactly the findings marked
  ``# expect: <check-id>`` on the culprit line, nothing else.
* ``real/errors.json``: real error texts as users pasted them into issues: each explained by the right
  family, with the right fix (``fix`` must appear in the fix or the detail, ``not`` must not).

Every file cites its source at the top. All scripts run through the doctor in one real subprocess.
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


def test_the_corpus_is_the_size_the_issue_asks_and_cites_its_sources() -> None:
    assert len(CORRECT) >= 10 and len(BUGS) >= 10 and len(ERRORS) >= 20
    for script in CORRECT + BUGS:
        head = script.read_text().split('"""')[1]
        assert head.startswith(("Source: ", "Sources: ")), script.name
        assert "github.com" in head or "commit " in head or "discuss.pytorch.org" in head, script.name
    for script in BUGS:
        assert expected(script), f"{script.name} marks no culprit line"
    for error in ERRORS:
        assert error["source"].startswith("https://github.com/"), error


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
