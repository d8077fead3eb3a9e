"""`torchwork env lock` (pip constraints) and `torchwork env diff` (ranked by risk) on every kind of input."""

from __future__ import annotations

import importlib.metadata as metadata
import json
import re
import subprocess
import sys

import torch
from env_helpers import FIXTURES, run_cli
from torch import nn

from torchwork.env.diff import diff_profiles
from torchwork.env.lock import lock_text
from torchwork.env.sources import load_profile

WORKSTATION = FIXTURES / "workstation-torch1.13.1-cu117-py3.10.txt"
CUSTOMER = FIXTURES / "customer-torch2.0.0-cpu-py3.8.txt"


def test_lock_pins_every_distribution_with_torch_build_and_python_header():
    text = lock_text()
    lines = text.splitlines()
    assert any(line == f"# python: {sys.version.split()[0]} (CPython)" for line in lines[:6])
    pins = dict(line.split("==", 1) for line in lines if not line.startswith("#"))
    assert all(re.fullmatch(r"[A-Za-z0-9._-]+", name) for name in pins)
    assert pins["torch"] == torch.__version__  # with its +cpu / +cuXY tag
    assert pins["numpy"] == metadata.version("numpy")
    assert f"# torch: {torch.__version__}" in text and "download.pytorch.org/whl/" in text
    assert load_profile_text(text)["python"] == sys.version.split()[0]


def load_profile_text(text):
    from torchwork.env.sources import profile_from_lock

    return profile_from_lock(text, "lock")


def test_lock_is_usable_as_pip_constraints(tmp_path):
    lock = tmp_path / "lock.txt"
    done = run_cli("env", "lock", "-o", str(lock))
    assert done.returncode == 0 and "pins" in done.stderr
    pip = [sys.executable, "-m", "pip", "install", "--dry-run", "--no-index", "--disable-pip-version-check"]
    satisfied = subprocess.run([*pip, "-c", str(lock), "psutil"], capture_output=True, text=True, timeout=120)
    assert satisfied.returncode == 0, satisfied.stdout + satisfied.stderr
    # The same constraints with psutil pinned to a version that is not installed: pip refuses.
    other = tmp_path / "other.txt"
    other.write_text(re.sub(r"(?m)^psutil==.*$", "psutil==0.0.1", lock.read_text()))
    refused = subprocess.run([*pip, "-c", str(other), "psutil"], capture_output=True, text=True, timeout=120)
    assert refused.returncode != 0


def test_diff_of_the_case_study_lock_files_ranks_torch_and_build_first():
    done = run_cli("env", "diff", str(WORKSTATION), str(CUSTOMER), "--json")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    whats = [d["what"] for d in report["differences"]]
    assert whats[:2] == ["torch major version", "torch build"]
    assert whats[2:6] == ["Python minor version", "ONNX Runtime version", "OpenMP runtime packages",
                          "packages only in A"]
    openmp = report["differences"][4]
    assert openmp["a"] == "none" and "intel-openmp==2023.1.0 (libiomp5)" in openmp["b"]
    first, second = report["differences"][:2]
    assert (first["a"], first["b"]) == ("1.13.1+cu117", "2.0.0+cpu")
    assert (second["a"], second["b"]) == ("cuda 11.7", "cpu") and "whl/cu117" in second["fix"]
    assert report["a"]["python"] == "3.10.12" and report["b"]["python"] == "3.8.18"
    only_b = next(d for d in report["differences"] if d["what"] == "packages only in B")
    assert "intel-openmp==2023.1.0" in only_b["b"] and "mkl==2023.1.0" in only_b["b"]
    assert "numpy version" in whats and whats.index("numpy version") > whats.index("packages only in B")


def test_diff_screen_says_why_and_what_to_do():
    done = run_cli("env", "diff", str(WORKSTATION), str(CUSTOMER))
    lines = done.stdout.splitlines()
    assert lines[3].startswith("  1. [torch major version] A 1.13.1+cu117  ->  B 2.0.0+cpu")
    assert lines[4].lstrip().startswith("why:") and lines[5].lstrip().startswith("do:")


def test_a_plain_pip_freeze_without_python_line_says_python_is_unknown(tmp_path):
    freeze = tmp_path / "freeze.txt"
    freeze.write_text("torch==2.0.0+cpu\nnumpy==1.24.3\n-e git+https://example.invalid/x.git#egg=x\n")
    done = run_cli("env", "diff", str(freeze), str(CUSTOMER))
    assert "A: python unknown (lock file without a # python: line)" in done.stdout


def _tiny_run(run_dir):
    from torchwork import Trainer, seed_everything

    seed_everything(1)
    model = nn.Linear(4, 2)
    data = [(torch.randn(8, 4), torch.randint(0, 2, (8,))) for _ in range(2)]
    trainer = Trainer(model, torch.optim.SGD(model.parameters(), lr=0.1), nn.CrossEntropyLoss(), device="cpu",
                      run_dir=run_dir, progress=False)
    trainer.fit(data, epochs=1)
    return trainer.run_path


def test_run_folders_and_snapshots_diff_against_each_other(tmp_path):
    first, second = _tiny_run(tmp_path / "a"), _tiny_run(tmp_path / "b")
    manifest = json.loads((first / "manifest.json").read_text())
    assert manifest["environment"]["torch"] == torch.__version__
    assert diff_profiles(load_profile(first), load_profile(second)) == []
    snapshot = tmp_path / "snap.json"
    done = run_cli("env", "--json")
    snapshot.write_text(done.stdout)
    same = run_cli("env", "diff", str(snapshot), str(first))
    assert same.returncode == 0, same.stdout  # failed twice at four workers (6 Dec): the stdout names the package
    # The same run folder, as it would read had it run on the customer's machine: the diff explains it.
    manifest["environment"].update(torch="2.0.0+cpu", python="3.8.18")
    (second / "manifest.json").write_text(json.dumps(manifest))
    whats = [d.what for d in diff_profiles(load_profile(first), load_profile(second))]
    assert whats[:2] == ["torch minor version", "Python minor version"]


def test_diff_explains_bad_inputs(tmp_path):
    empty = tmp_path / "empty"
    empty.mkdir()
    done = run_cli("env", "diff", str(empty), str(CUSTOMER))
    assert done.returncode == 2 and "without manifest.json" in done.stderr
    junk = tmp_path / "junk.txt"
    junk.write_text("hello\n")
    done = run_cli("env", "diff", str(junk), str(CUSTOMER))
    assert done.returncode == 2 and "no 'name==version' lines" in done.stderr


def _loaded(openmp):
    return {"label": "x", "kind": "snapshot", "python": "3.11.7", "torch": "2.13.0+cpu", "build": "cpu",
            "cuda": None, "platform": "Linux-x86_64", "openmp": openmp, "packages": {"torch": "2.13.0"}}


def test_openmp_is_compared_by_runtime_not_by_which_vendored_copies_a_process_mapped():
    # scikit-learn's wheel maps its own libgomp-<hash> once imported: the same runtime, another file name.
    with_sklearn = _loaded(["libgomp-e985bcbb.so.1.0.0", "libgomp.so.1"])
    assert diff_profiles(with_sklearn, _loaded(["libgomp.so.1"])) == []
    [difference] = diff_profiles(_loaded(["libgomp.so.1", "libiomp5.so"]), _loaded(["libgomp.so.1"]))
    assert difference.what == "OpenMP runtimes" and "Intel OpenMP" in difference.a
