"""``torchwork graph``'s options checked before the script or the model runs, each refusal one line: ``--high``
below 1, past int64 or past the model's embeddings (or an index out of range on the random ids), inputs of too
many elements, ``-o`` a directory."""

from __future__ import annotations

import textwrap
from pathlib import Path
from typing import Any

import pytest

import torchwork.deploy.factory as factory
from torchwork.cli import main

MODELS = textwrap.dedent("""\
    import torch

    def embedded():
        return torch.nn.Sequential(torch.nn.Embedding(50, 4), torch.nn.Linear(4, 2))

    class Gather(torch.nn.Module):
        def __init__(self):
            super().__init__()
            self.table = torch.nn.Parameter(torch.ones(10, 3))

        def forward(self, ids):
            return self.table[ids].sum()

    def gather():
        return Gather()
    """)


@pytest.fixture
def models(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")  # what the command sets before torch loads
    (tmp_path / "models.py").write_text(MODELS)
    return tmp_path


def _refused(capsys: pytest.CaptureFixture[str], argv: list[str], words: str) -> None:
    assert main(["graph", *argv]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and err[0].startswith("torchwork: error: "), err
    assert words in err[0], err[0]


@pytest.mark.parametrize("options, words", [
    (["--high", "0"], "--high 0: the random ids are drawn from 0 to --high - 1, so it must be 1 or more"),
    (["--high", "-5"], "--high -5: the random ids are drawn from 0"),
    (["--high", str(2**63)], f"--high {2**63}: past the largest int64"),
    (["--input-shape", "99999999,99999999"], "9,999,999,800,000,001 elements in all, over the 268,435,456"),
    (["-o", "."], "-o . is a directory; give a file name for the page"),
])
def test_a_bad_option_is_refused_before_the_model_is_built(models: Path, capsys, monkeypatch: pytest.MonkeyPatch,
                                                           options: list[str], words: str) -> None:
    def must_not_run(*args: Any, **kwargs: Any) -> Any:
        raise AssertionError("torchwork graph built the model before refusing an option")

    monkeypatch.setattr(factory, "load_factory", must_not_run)
    shape = [] if "--input-shape" in options else ["--input-shape", "2,3"]
    _refused(capsys, [*shape, "--input-dtype", "int64", *options, "models.py:embedded"], words)


def test_an_output_directory_is_refused_before_the_script_runs(models: Path, capsys) -> None:
    (models / "train.py").write_text("open('ran', 'w').write('yes')\n")
    (models / "out").mkdir()
    _refused(capsys, ["-o", "out", "train.py"], "-o out is a directory")
    (models / "file").write_text("")
    _refused(capsys, ["-o", "file/graph.html", "train.py"], "is not a directory, so the page cannot be written")
    assert not (models / "ran").exists()


def test_high_past_the_models_embeddings_is_refused_before_it_runs(models: Path, capsys) -> None:
    _refused(capsys, ["--input-shape", "2,3", "--input-dtype", "int64", "--high", "51", "models.py:embedded"],
             "--high 51: the random ids reach 50, past the model's largest embedding ('0', 50 entries); give "
             "--high 50 or less.")
    assert main(["graph", "--input-shape", "2,3", "--input-dtype", "int64", "--high", "50", "--no-dot", "-o",
                 "page.html", "models.py:embedded"]) == 0
    assert (models / "page.html").is_file()


def test_an_index_out_of_range_on_the_random_ids_is_one_line(models: Path, capsys) -> None:
    _refused(capsys, ["--input-shape", "2,3", "--input-dtype", "int64", "--high", "1000", "models.py:gather"],
             "--high 1000: the model indexed out of range on random ids below 1000 (index ")
