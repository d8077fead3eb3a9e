"""Which files are the user's: a package installed with ``pip install --target DIR`` and put on the path is
library code (its folder holds ``*.dist-info``), so an exception raised inside it is placed at the user's
call, as for site-packages; a project's own folder on the path, even beside a setuptools ``*.egg-info``
(``pip install -e``), stays the user's."""

from __future__ import annotations

import json
import sys
import textwrap
from pathlib import Path

import pytest

from torchwork.doctor.findings import Locator
from torchwork.doctor.runner import run_script


def _package(folder: Path, name: str, metadata: str | None) -> Path:
    """``folder/name/__init__.py`` whose ``fail()`` raises, and ``folder/metadata`` when given."""
    (folder / name).mkdir(parents=True)
    module = folder / name / "__init__.py"
    module.write_text("def fail(size):\n    raise ValueError(f'no size {size}')\n", encoding="utf-8")
    if metadata:
        (folder / metadata).mkdir()
    return module


def test_a_pip_target_folder_is_library_code_and_a_project_folder_is_not(tmp_path: Path,
                                                                        monkeypatch: pytest.MonkeyPatch) -> None:
    vendored = _package(tmp_path / "vendor", "tinylib", "tinylib-1.0.dist-info")
    editable = _package(tmp_path / "project" / "src", "mine", "mine.egg-info")
    plain = _package(tmp_path / "scripts", "helpers", None)
    for folder in ("vendor", "project/src", "scripts"):
        monkeypatch.syspath_prepend(str(tmp_path / folder))
    locator = Locator()
    assert not locator.is_user_file(str(vendored))
    assert locator.is_user_file(str(editable))
    assert locator.is_user_file(str(plain))


def test_a_relative_path_entry_is_read_in_the_folder_the_process_is_in_now(tmp_path: Path,
                                                                          monkeypatch: pytest.MonkeyPatch) -> None:
    vendored = _package(tmp_path / "vendor" / "lib", "tinylib", "tinylib-1.0.dist-info")
    own = _package(tmp_path / "project" / "lib", "mine", None)
    monkeypatch.syspath_prepend("lib")  # relative: the working folder's lib/
    locator = Locator()
    monkeypatch.chdir(tmp_path / "project")
    assert locator.is_user_file(str(own))
    monkeypatch.chdir(tmp_path / "vendor")  # a script that changes folder: lib/ is now pip's target
    assert not locator.is_user_file(str(vendored))


def test_an_exception_raised_in_a_pip_target_package_is_placed_at_the_users_call(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    _package(tmp_path / "vendor", "tinylib", "tinylib-1.0.dist-info")
    monkeypatch.syspath_prepend(str(tmp_path / "vendor"))
    monkeypatch.delitem(sys.modules, "tinylib", raising=False)
    script = tmp_path / "train.py"
    script.write_text(textwrap.dedent("""\
        import tinylib

        width = 3
        tinylib.fail(width)
    """), encoding="utf-8")
    result = run_script(script)
    assert result.script_exit == 1
    assert [(f.id, Path(f.file or "").name, f.line) for f in result.findings] == [("exception", "train.py", 4)]


def test_the_script_the_doctor_runs_is_the_users_even_inside_an_installed_package(
        tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    vendor = tmp_path / "vendor"
    _package(vendor, "recipelib", "recipelib-1.0.dist-info")
    monkeypatch.delitem(sys.modules, "recipelib", raising=False)
    script = vendor / "recipelib" / "train.py"  # a recipe shipped in the package, run as the entry point
    script.write_text("import sys\nsys.path.insert(0, sys.argv[1])\nimport recipelib\n\nrecipelib.fail(3)\n",
                      encoding="utf-8")
    result = run_script(script, [str(vendor)])
    assert [(f.id, Path(f.file or "").name, f.line) for f in result.findings] == [("exception", "train.py", 5)]


def test_user_code_names_an_installed_library_of_your_own(tmp_path: Path, monkeypatch: pytest.MonkeyPatch,
                                                          capsys: pytest.CaptureFixture[str]) -> None:
    from torchwork.cli import main

    vendor = tmp_path / "vendor"
    module = _package(vendor, "ownlib", "ownlib-1.0.dist-info")
    monkeypatch.syspath_prepend(str(vendor))
    monkeypatch.delitem(sys.modules, "ownlib", raising=False)
    script = tmp_path / "train.py"
    script.write_text("import ownlib\n\nownlib.fail(3)\n", encoding="utf-8")
    assert main(["doctor", "--json", "--user-code", "ownlib", str(script)]) == 1
    findings = json.loads(capsys.readouterr().out)["findings"]
    assert [(f["id"], Path(f["file"]).resolve(), f["line"]) for f in findings] == [
        ("exception", module.resolve(), 2)]


def test_user_code_that_names_nothing_is_refused_before_the_script_runs(tmp_path: Path,
                                                                        capsys: pytest.CaptureFixture[str]) -> None:
    from torchwork.cli import main

    script = tmp_path / "train.py"
    script.write_text("open('ran', 'w').close()\n", encoding="utf-8")
    assert main(["doctor", "--user-code", str(tmp_path / "missing"), str(script)]) == 2
    err = capsys.readouterr().err
    assert "--user-code" in err and "neither a file or folder nor an importable package" in err
    assert not (tmp_path / "ran").exists() and not Path("ran").exists()
