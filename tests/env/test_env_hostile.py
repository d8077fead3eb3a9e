"""`torchwork env diff` and `env check --artifact` on hostile inputs: a one-line message (exit 2) or a
failed check (exit 1), never a traceback, and never work that grows faster than the input."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from torchwork.cli import main as cli_main
from torchwork.deploy import export
from torchwork.deploy.manifest import MANIFEST

GOOD_LOCK = "# python: 3.11.7\ntorch==2.13.0+cpu\nnumpy==2.1.0\n"
SNAPSHOT = {"torchwork_env": 1, "python": "3.11.7", "torch": "2.13.0+cpu", "build": "cpu",
            "packages": {"torch": "2.13.0+cpu", "numpy": "2.1.0"}, "openmp": ["libgomp.so.1"]}
LONG = "9" * 5000


def _snapshot(**change):
    return {**SNAPSHOT, **change}


def _manifest(**change):
    return {"torchwork_artifact": 1, **change}


# Each case is the text of the second file; the first is a good lock file.
CASES = {
    "packages-list": json.dumps(_snapshot(packages=["torch==2.0"])),
    "packages-string": json.dumps(_snapshot(packages="torch")),
    "packages-number": json.dumps(_snapshot(packages=5)),
    "package-version-number": json.dumps(_snapshot(packages={"numpy": 1.26})),
    "package-version-list": json.dumps(_snapshot(packages={"numpy": ["1"]})),
    "package-version-nan": json.dumps(_snapshot(packages={"numpy": float("nan")})),
    "python-number": json.dumps(_snapshot(python=3.11)),
    "python-nan": json.dumps(_snapshot(python=float("nan"))),
    "python-infinity": json.dumps(_snapshot(python=float("inf"))),
    "python-list": json.dumps(_snapshot(python=[3, 11])),
    "python-5000-digits": json.dumps(_snapshot(python=LONG)),
    "torch-number": json.dumps(_snapshot(torch=2)),
    "torch-5000-digits": json.dumps(_snapshot(torch="2." + LONG)),
    "torch-major-5000-digits": json.dumps(_snapshot(torch=LONG + ".1")),
    "build-number": json.dumps(_snapshot(build=5)),
    "build-blank": json.dumps(_snapshot(build=" ")),
    "build-unknown-family": json.dumps(_snapshot(build="xpu 1.0")),
    "build-cuda-5000-digits": json.dumps(_snapshot(build="cuda " + LONG)),
    "openmp-string": json.dumps(_snapshot(openmp="libgomp")),
    "openmp-numbers": json.dumps(_snapshot(openmp=[1, 2])),
    "openmp-object": json.dumps(_snapshot(openmp={"a": 1})),
    "cuda-number": json.dumps(_snapshot(cuda=12)),
    "platform-list": json.dumps(_snapshot(platform=[])),
    "json-array": "[1, 2]",
    "json-nan": "NaN",
    "json-deep": "[" * 100_000 + "]" * 100_000,
    "object-deep": '{"torchwork_env": 1, "packages": ' + "[" * 100_000 + "]" * 100_000 + "}",
    "not-utf8": b"{\"torchwork_env\": 1, \"python\": \"\xff\xfe\"}".decode("latin-1"),
    "manifest-environment-list": json.dumps(_manifest(environment=[1])),
    "manifest-versions-list": json.dumps(_manifest(versions=["torch"])),
    "manifest-versions-string": json.dumps(_manifest(versions="torch")),
    "manifest-versions-torch-number": json.dumps(_manifest(versions={"torch": 2.1})),
    "manifest-versions-torch-nan": json.dumps(_manifest(versions={"torch": float("nan")})),
    "manifest-versions-python-object": json.dumps(_manifest(versions={"python": {}})),
    "manifest-versions-cuda-list": json.dumps(_manifest(versions={"cuda": [12]})),
    "manifest-environment-packages-list": json.dumps(_manifest(environment={"packages": [1]})),
    "lock-5000-digit-version": f"torch=={LONG}\nnumpy==1.0\n",
    "lock-5000-digit-major": f"torch=={LONG}.1\n",
    "lock-5000-digit-python": f"# python: {LONG}.1\ntorch==2.13.0\n",
    "lock-binary": "\x00\x01\x02 torch\x00==\x00",
    "lock-empty": "",
    "lock-only-comments": "# python: 3.11.7\n# nothing\n",
}


@pytest.mark.parametrize("name", sorted(CASES))
def test_env_diff_answers_every_hostile_input_with_a_message(tmp_path, capsys, within, name):
    good, bad = tmp_path / "good.txt", tmp_path / "bad.txt"
    good.write_text(GOOD_LOCK)
    bad.write_text(CASES[name], encoding="latin-1" if name == "not-utf8" else "utf-8")
    with within(20):
        code = cli_main(["env", "diff", str(good), str(bad)])
        code_json = cli_main(["env", "diff", "--json", str(bad), str(good)])
    err = capsys.readouterr().err
    assert code in (1, 2) and code_json in (1, 2)
    if code == 2:
        assert err.startswith("torchwork: error: ") and "Traceback" not in err
        assert all(len(line) < 600 for line in err.splitlines()), err[:300]


@pytest.mark.parametrize("line", [
    "a" + " " * 50_000 + "x",  # a name, then spaces: two adjacent \s* patterns backtracked quadratically
    "# python" + " " * 50_000 + "x",
    "# python version" + "\t" * 50_000,
    "torch" + " " * 50_000 + "[" + " " * 50_000,
])
def test_lock_lines_cannot_backtrack(tmp_path, capsys, within, monkeypatch, line):
    from torchwork.env import sources

    monkeypatch.setattr(sources, "MAX_LINE_CHARS", 10 ** 7)  # the patterns alone: linear in the line's length
    lock = tmp_path / "lock.txt"
    lock.write_text(GOOD_LOCK + line.replace(" " * 50_000, " " * 1_000_000).replace("\t" * 50_000, "\t" * 1_000_000)
                    + "\n")
    with within(5):
        assert cli_main(["env", "diff", str(lock), str(lock)]) == 0


def test_an_absurdly_long_lock_line_is_refused_at_once(tmp_path, capsys, within):
    lock = tmp_path / "lock.txt"
    lock.write_text(GOOD_LOCK + "torch" + " " * 1_000_000 + "==1\n")
    with within(5):
        assert cli_main(["env", "diff", str(lock), str(lock)]) == 2
    assert "line 4 holds 1000008 characters" in capsys.readouterr().err


# ---------------------------------------------------------------------------------------------- env check --artifact
@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(6, 12), torch.nn.Tanh(), torch.nn.Linear(12, 3))
    out = tmp_path_factory.mktemp("hostile") / "artifact"
    export(model, torch.randn(5, 6), out, formats=("onnx",))
    return out


MANIFEST_CHANGES = {
    "outputs-entry-string": lambda m: m.update(example_outputs="x"),
    "outputs-file-number": lambda m: m["example_outputs"].update(file=5),
    "outputs-atol-string": lambda m: m["example_outputs"].update(atol="x"),
    "outputs-atol-nan": lambda m: m["example_outputs"].update(atol=float("nan")),
    "outputs-atol-infinity": lambda m: m["example_outputs"].update(atol=float("inf")),
    "outputs-atol-negative": lambda m: m["example_outputs"].update(atol=-1),
    "outputs-rtol-list": lambda m: m["example_outputs"].update(rtol=[1]),
    "outputs-rtol-5000-digits": lambda m: m["example_outputs"].update(rtol="__LONG__"),  # written as a bare number
    "environment-list": lambda m: m.update(environment=[1]),
    "environment-torch-nan": lambda m: m["environment"].update(torch=float("nan")),
    "environment-packages-list": lambda m: m["environment"].update(packages=[1]),
    "versions-string": lambda m: m.update(versions="x"),
    "files-list": lambda m: m.update(files=[1]),
    "variants-list": lambda m: m.update(variants=[1]),
    "format-nan": lambda m: m.update(torchwork_artifact=float("nan")),
}


@pytest.mark.parametrize("name", sorted(MANIFEST_CHANGES))
def test_env_check_artifact_answers_a_hostile_manifest_with_a_message(exported, tmp_path, capsys, within, name):
    copy = tmp_path / "artifact"
    shutil.copytree(exported, copy)
    manifest = json.loads((copy / MANIFEST).read_text())
    MANIFEST_CHANGES[name](manifest)
    (copy / MANIFEST).write_text(json.dumps(manifest).replace('"__LONG__"', LONG))
    with within(60):
        code = cli_main(["env", "check", "--artifact", str(copy)])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    if name in ("environment-torch-nan", "environment-packages-list"):  # what the exporting machine was does
        # not change the replay
        assert code == 0, captured.out
    else:
        assert code in (1, 2), captured.out
    if code == 2:
        assert captured.err.startswith("torchwork: error: ")
