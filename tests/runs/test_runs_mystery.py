"""The mystery: four pairs of real n-gram recipe runs (a small subset), each pair differing in exactly one
thing: a setting, 5% of the training rows relabelled, a code patch that changes the loss, only the seed.
``torchwork runs diff`` must name that thing first, list nothing that did not differ, and call the
seed-only change "within noise".

The runs execute in a git work tree holding a copy of torchwork's source, so that the code patch is a real
uncommitted change that the run records (``code.patch``), as a user's edited checkout would be.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
from runs_helpers import git_repo

import torchwork
from torchwork.runs.compare import compare_runs

pytestmark = pytest.mark.slow(reason="five real recipe runs in a git tree, one with a code patch: about a minute")
DRIVER = Path(__file__).with_name("mystery_driver.py")
RECIPE = "src/torchwork/recipes/sentiment.py"
LOSS = "loss_fn = nn.CrossEntropyLoss(weight=class_weights(train.labels))"


def _runs(project: Path, *settings: dict) -> list[Path]:
    """One real run per settings, side by side (each on one thread, and a third of each is the export's timing
    pauses): the run folder each one names."""
    env = {**os.environ, "PYTHONPATH": str(project / "src")}
    logs = [tempfile.TemporaryFile("w+") for _ in settings]  # not pipes: none fills while another is waited for
    processes = [subprocess.Popen([sys.executable, "driver.py", json.dumps(one)], cwd=project, env=env, stdout=log,
                                  stderr=subprocess.STDOUT) for one, log in zip(settings, logs)]
    found = []
    for process, log in zip(processes, logs):
        process.wait(timeout=600)
        with log:
            log.seek(0)
            said = log.read()
        assert process.returncode == 0, said[-3000:]
        (summary,) = [line.split(": ", 1)[1] for line in said.splitlines() if line.startswith("summary: ")]
        found.append((project / summary).parent)
    return found


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> dict[str, Path]:
    project = tmp_path_factory.mktemp("mystery") / "project"
    shutil.copytree(Path(torchwork.__file__).parent, project / "src" / "torchwork",
                    ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(DRIVER, project / "driver.py")
    (project / ".gitignore").write_text("runs/\nlabel_fixes.json\n")
    git_repo(project, {})
    found = dict(zip(("base", "setting", "seed"), _runs(project, {}, {"lr": 0.1}, {"seed": 1})))
    (project / "label_fixes.json").write_text(json.dumps({"share": 0.05}))
    (found["relabelled"],) = _runs(project, {})
    (project / "label_fixes.json").unlink()
    source = (project / RECIPE).read_text()
    assert LOSS in source
    (project / RECIPE).write_text(source.replace(LOSS, LOSS[:-1] + ", label_smoothing=0.3)"))
    (found["code"],) = _runs(project, {})
    assert len(set(found.values())) == 5
    return found


def _diff(runs: dict[str, Path], other: str) -> dict:
    return compare_runs(runs["base"], runs[other])


def _groups(comparison: dict) -> set[str]:
    return {d["group"] for d in comparison["differences"]} - {"recorded results"}


def test_a_setting_is_named_first(runs):
    comparison = _diff(runs, "setting")
    first = comparison["verdict"]["causes"][0]
    assert (first["group"], first["key"]) == ("settings", "lr")
    assert _groups(comparison) <= {"settings", "command"}
    assert [d["key"] for d in comparison["differences"] if d["group"] == "settings"] == ["lr"]


def test_relabelled_training_rows_are_named_first_with_their_count(runs):
    comparison = _diff(runs, "relabelled")
    first = comparison["verdict"]["causes"][0]
    assert (first["group"], first["key"]) == ("data", "train")
    assert _groups(comparison) == {"data"}
    (train,) = [d for d in comparison["differences"] if d["group"] == "data"]
    assert (train["relabelled"], train["added"], train["removed"]) == (300 // 20, 0, 0)
    assert sum(a - b for a, b in train["classes"].values()) == 0  # rows moved between classes


def test_a_code_patch_to_the_loss_is_named_first_with_its_file(runs):
    comparison = _diff(runs, "code")
    first = comparison["verdict"]["causes"][0]
    assert (first["group"], first["key"]) == ("code", "patch")
    assert _groups(comparison) == {"code"}
    (patch,) = [d for d in comparison["differences"] if d["key"] == "patch"]
    assert patch["files"] == [{"file": RECIPE, "patched": "in B only"}]
    assert "label_smoothing=0.3" in (runs["code"] / "code.patch").read_text()


def test_only_the_seed_is_within_noise(runs):
    comparison = _diff(runs, "seed")
    verdict = comparison["verdict"]
    assert [c["key"] for c in verdict["causes"]] == ["seed"]
    assert verdict["seed_only"] and "within noise" in verdict["conclusion"]
    # the seed draws the subset too, and the vocabulary built from it sets the model's size
    assert _groups(comparison) <= {"seed / threads / precision", "data", "command", "settings"}
    assert [d["key"] for d in comparison["differences"] if d["group"] == "settings"] in ([], ["model.parameters"])
    assert all(not d.get("relabelled") for d in comparison["differences"] if d["group"] == "data")


def test_the_commands_print_html_and_json_and_list_the_five_runs(runs, tmp_path):
    env = {**os.environ, "PYTHONPATH": str(Path(torchwork.__file__).parents[1])}
    page = tmp_path / "diff.html"
    done = subprocess.run([sys.executable, "-m", "torchwork.cli", "runs", "diff", str(runs["base"]),
                           str(runs["relabelled"]), "--html", str(page)], capture_output=True, text=True,
                          env=env, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "most likely cause: data: the train split changed" in done.stdout and "relabelled" in done.stdout
    html = page.read_text()
    assert html.count("<svg") >= 1 and "relabelled" in html
    listed = subprocess.run([sys.executable, "-m", "torchwork.cli", "runs", "ls", str(runs["base"].parent),
                             "--json", "--sort", "best"], capture_output=True, text=True, env=env, timeout=120)
    rows = json.loads(listed.stdout)
    assert len(rows) == 5 and {r["state"] for r in rows} == {"finished"}
    assert [r["best"] for r in rows] == sorted((r["best"] for r in rows), reverse=True)  # val macro-F1: max
    assert sum(1 for r in rows if r["dirty"]) == 1  # the code-patch run
