"""`torchwork data check PHOTOS/` on an image folder: the same report as for a text file, exit 1 on leakage
and on a class folder spelled two ways, and the text table's options refused in one line."""

from __future__ import annotations

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from torchwork.cli import main


def _photos(root: Path) -> Path:
    rng = np.random.default_rng(0)
    for split, count in (("train", 8), ("test", 3)):
        for label in ("cat", "dog"):
            (root / split / label).mkdir(parents=True)
            for k in range(count):
                pixels = rng.integers(0, 256, (24, 32, 3), dtype=np.uint8)
                Image.fromarray(pixels).save(root / split / label / f"{k}.png")
    return root


def test_data_check_reports_an_image_folder(tmp_path, capsys: pytest.CaptureFixture[str],
                                            monkeypatch: pytest.MonkeyPatch) -> None:
    # The command sets OMP_WAIT_POLICY when torch is not imported yet, and the image report never imports it.
    monkeypatch.setenv("OMP_WAIT_POLICY", "PASSIVE")
    photos = _photos(tmp_path / "photos")
    assert main(["data", "check", str(photos)]) == 0
    out = capsys.readouterr().out
    assert "image folder" in out and "22 image files in 2 classes (split folders)" in out
    assert "data report: 0 error(s)" in out and "split test: 6 rows (cat 3, dog 3)" in out

    (photos / "test" / "dog" / "leak.png").write_bytes((photos / "train" / "cat" / "0.png").read_bytes())
    assert main(["data", "check", str(photos), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    leak = next(f for f in report["findings"] if f["kind"] == "cross-split-duplicate")
    assert leak["severity"] == "error" and leak["rows"] == ["test/dog/leak.png"]
    assert report["source"]["folder"] == str(photos) and report["source"]["fingerprint"].startswith("sha256:")

    assert main(["data", "check", str(photos), "--label", "kind", "--test", "x.csv"]) == 2
    err = capsys.readouterr().err
    assert "is an image folder: --label, --test apply to a text table only" in err
    assert len(err.strip().splitlines()) == 1


def test_a_class_folder_spelled_two_ways_is_an_error_naming_its_images(tmp_path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    photos = _photos(tmp_path / "photos")
    (photos / "test" / "Dog").mkdir()  # the test split's dogs partly in a folder spelled otherwise
    for name in ("1.png", "2.png"):
        (photos / "test" / "dog" / name).rename(photos / "test" / "Dog" / name)
    assert main(["data", "check", str(photos), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    variants = next(f for f in report["findings"] if f["kind"] == "label-variants")
    assert variants["severity"] == "error" and variants["count"] == 2
    assert variants["rows"] == ["test/Dog/1.png", "test/Dog/2.png"]
    assert variants["examples"][0]["label"] == "Dog" and variants["examples"][0]["merged_into"] == "dog"
    assert "'dog' ×9 / 'Dog' ×2" in variants["summary"]


def test_split_folders_without_test_images_exit_1_as_fit_refuses_them(tmp_path,
                                                                      capsys: pytest.CaptureFixture[str]) -> None:
    photos = _photos(tmp_path / "photos")
    shutil.rmtree(photos / "test")
    assert main(["data", "check", str(photos)]) == 1
    out = capsys.readouterr().out
    assert "data report: 1 error(s)" in out and "error   empty-split" in out and "split test: 0 rows" in out
    assert main(["data", "check", str(photos), "--json"]) == 1
    report = json.loads(capsys.readouterr().out)
    assert [(f["kind"], f["examples"]) for f in report["findings"]] == [("empty-split", [{"split": "test"}])]
