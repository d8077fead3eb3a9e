"""`torchwork fit PHOTOS/` on an image folder: Fashion-MNIST (Debian's dataset-fashion-mnist) written as PNG
folders, fitted once with tiny settings (one module fixture); the tests read that one run: the summary, the
report with its thumbnails, the artifact taking image bytes, and a real server answering /predict (base64)
and the Open Inference Protocol (BYTES) with image files, bad image bytes a 422. Bad folders and leakage
stop before anything is written."""

from __future__ import annotations

import base64
import io
import json
import sys
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest
from PIL import Image

from torchwork.cli import main

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "data"))
sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "serve"))
from serve_fixtures import ServerProcess  # noqa: E402
from test_data_image_folder import CLASSES, bomb_png, fashion_images, write_clean  # noqa: E402


@pytest.fixture(scope="module")
def fitted(tmp_path_factory: pytest.TempPathFactory) -> dict:
    """One `torchwork fit PHOTOS/ --quick` on 300 Fashion-MNIST PNGs (10 classes; train/ and test/), 32x32:
    its run folder and summary."""
    root = tmp_path_factory.mktemp("fit_images")
    images, labels = fashion_images()
    photos = root / "photos"
    write_clean(photos, images, labels)
    code = main(["fit", str(photos), "--quick", "--set", f"run_dir={root / 'runs'}", "--set", "image_size=32",
                 "--set", "quantize=false", "--set", "worst=6"])
    assert code == 0
    run = next(p for p in (root / "runs").iterdir() if (p / "summary.json").is_file())
    return {"root": root, "photos": photos, "run": run, "summary": json.loads((run / "summary.json").read_text())}


def _png(photos: Path) -> bytes:
    return next((photos / "test" / "bag").glob("*.png")).read_bytes()


def test_fit_reports_both_models_and_serves_the_one_beyond_the_noise(fitted) -> None:
    summary = fitted["summary"]
    assert summary["data"]["splits"] == {"train": 220, "validation": 20, "test": 60}
    assert sorted(summary["data"]["classes"]) == sorted(CLASSES)
    models = summary["models"]
    assert set(models) == {"cnn", "efficientnet_lite0"}
    assert all(0 <= models[m]["accuracy"] <= 1 and set(models[m]["per_class"]) == set(CLASSES) for m in models)
    comparison = summary["against_baseline"]
    served = "efficientnet-lite0" if comparison["beats"] else "cnn"
    assert summary["served"] == served and comparison["difference"]["low"] <= comparison["difference"]["value"]
    assert ("the fine-tuned model is served" if comparison["beats"] else "is NOT served") in comparison["reason"]
    low, high = summary["test"]["macro_f1_interval"]
    assert low <= summary["test"]["macro_f1"] <= high
    assert summary["deploy_variant"] == "onnx" and "onnx" in summary["deploy_choices"]
    assert summary["serve_command"] == f"torchwork serve {fitted['run'] / 'artifact'}"


def test_report_shows_the_worst_test_images_as_thumbnails(fitted) -> None:
    html = (fitted["run"] / "report.html").read_text()
    assert "The worst test images (highest loss)" in html and "Per class" in html and "Served:" in html
    thumbnails = html.count('alt="test/')
    assert thumbnails == 6
    start = html.index('alt="test/')
    encoded = html[html.index("base64,", start) + 7: html.index('"', html.index("base64,", start))]
    picture = Image.open(io.BytesIO(base64.b64decode(encoded)))
    assert picture.format == "PNG" and max(picture.size) <= 64


def test_the_artifact_takes_image_files_and_refuses_a_bomb(fitted) -> None:
    from torchwork.deploy import load_artifact
    from torchwork.errors import DataError

    artifact = load_artifact(fitted["run"] / "artifact")
    rows = np.asarray(artifact([_png(fitted["photos"])]))
    assert rows.shape == (1, 10) and abs(float(rows.sum()) - 1) < 1e-4
    with pytest.raises(DataError, match="decompression bomb: the header claims more than 89,478,485 pixels"):
        artifact([bomb_png()])


@pytest.fixture(scope="module")
def image_server(fitted) -> Iterator[ServerProcess]:
    server = ServerProcess(fitted["run"] / "artifact", None, log_dir=fitted["root"])
    try:
        yield server
    finally:
        server.stop()


def test_the_server_answers_image_bytes_on_both_routes(fitted, image_server: ServerProcess) -> None:
    png = _png(fitted["photos"])
    status, _, answer = image_server.predict([base64.b64encode(png).decode()])
    assert status == 200 and answer["predictions"][0]["label"] in CLASSES
    status, _, answer = image_server.predict(["aGVsbG8="])  # base64 of b"hello"
    assert status == 422 and answer["detail"].startswith("inputs[0]: Value error, not an image Pillow can decode")
    status, _, answer = image_server.predict([base64.b64encode(bomb_png()).decode()])
    assert status == 422 and "decompression bomb" in answer["detail"]

    from torchwork.serve.inference_protocol import join_bytes
    from torchwork.serve.server import model_name_for

    name = model_name_for(str(fitted["run"] / "artifact"))
    status, _, meta = image_server.request("GET", f"/v2/models/{name}")
    assert status == 200 and meta["inputs"] == [{"name": "image", "datatype": "BYTES", "shape": [-1]}]
    raw = join_bytes([png, png])  # the binary extension: each image file's bytes behind its length
    header = json.dumps({"inputs": [{"name": "image", "datatype": "BYTES", "shape": [2],
                                     "parameters": {"binary_data_size": len(raw)}}]}).encode()
    status, _, answer = image_server.request("POST", f"/v2/models/{name}/infer", header + raw,
                                             headers={"Inference-Header-Content-Length": str(len(header))})
    assert status == 200 and answer["outputs"][0]["data"][0] in CLASSES and answer["outputs"][0]["shape"] == [2]
    body = {"inputs": [{"name": "image", "datatype": "BYTES", "shape": [1], "data": ["not an image"]}]}
    status, _, answer = image_server.request("POST", f"/v2/models/{name}/infer", body)
    assert status == 422 and "input 'image' element 0: not an image" in answer["error"]


def _two_classes(root: Path, per_class: int = 10) -> Path:
    rng = np.random.default_rng(1)
    for label in ("cat", "dog"):
        (root / label).mkdir(parents=True)
        for i in range(per_class):
            Image.fromarray(rng.integers(0, 256, (16, 16, 3), dtype=np.uint8)).save(root / label / f"{i}.png")
    return root


@pytest.mark.parametrize("layout", ["no class folders", "one class", "leak", "no test folder"])
def test_a_folder_fit_cannot_learn_from_is_one_line_and_writes_nothing(
        tmp_path: Path, capsys: pytest.CaptureFixture[str], layout: str) -> None:
    photos = tmp_path / "photos"
    if layout == "no class folders":
        photos.mkdir()
        Image.new("RGB", (8, 8)).save(photos / "loose.png")
        expected = "has no class sub-folders"
    elif layout == "one class":
        _two_classes(photos)
        for path in (photos / "dog").iterdir():
            path.unlink()
        (photos / "dog").rmdir()
        expected = "a classifier needs at least 2 classes"
    elif layout == "leak":
        for split in ("train", "test"):
            _two_classes(photos / split)
        (photos / "test" / "dog" / "0.png").write_bytes((photos / "train" / "cat" / "3.png").read_bytes())
        expected = "the data report found 1 error(s); nothing was trained. cross-split-duplicate"
    elif layout == "no test folder":
        _two_classes(photos / "train")
        expected = "nothing was trained. empty-split: the test split(s) hold no image"
    runs = tmp_path / "runs"
    assert main(["fit", str(photos), "--set", f"run_dir={runs}"]) == 2
    err = capsys.readouterr().err
    assert expected in err and len(err.strip().splitlines()) == 1
    assert not runs.exists()


def test_text_file_options_are_refused_for_a_folder(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    photos = _two_classes(tmp_path / "photos")
    assert main(["fit", str(photos), "--label", "kind"]) == 2
    err = capsys.readouterr().err
    assert "is an image folder: --label applies to a text file only" in err and len(err.strip().splitlines()) == 1


def test_near_copies_never_straddle_the_planned_splits(tmp_path: Path) -> None:
    from torchwork.data.image_audit import audit_and_plan
    from torchwork.data.image_folder import read_image_folder

    images, labels = fashion_images()
    photos = tmp_path / "photos"
    copies = {}
    for c, name in enumerate(CLASSES[:3]):
        (photos / name).mkdir(parents=True)
        for i in np.flatnonzero(labels == c)[:40]:
            Image.fromarray(images[i]).save(photos / name / f"{i}.png")
            if i % 4 == 0:  # a near copy: brightened by 10% and saved as JPEG
                bright = np.clip(images[i].astype(np.float32) * 1.1, 0, 255).astype(np.uint8)
                Image.fromarray(bright).save(photos / name / f"{i}-copy.jpg", quality=90)
                copies[f"{name}/{i}.png"] = f"{name}/{i}-copy.jpg"
    data = read_image_folder(photos)
    audited = audit_and_plan(data, seed=0)
    split_of = {}
    for split in ("train", "validation", "test"):
        for row in audited.split_paths(data, split)[1]:
            split_of[row] = split
    together = [a for a, b in copies.items() if b not in split_of or split_of.get(a) in (None, split_of[b])]
    assert len(together) >= 0.95 * len(copies)
    assert {"train", "validation", "test"} == set(split_of.values())


def test_corrupt_files_and_a_bomb_are_listed_and_left_out_of_the_splits(tmp_path: Path) -> None:
    from torchwork.recipes.image_data import load_image_folder

    photos = _two_classes(tmp_path / "photos")
    (photos / "cat" / "bomb.png").write_bytes(bomb_png())  # 30,000 x 30,000 claimed: never decoded
    (photos / "dog" / "half.png").write_bytes((photos / "dog" / "1.png").read_bytes()[:60])
    lines: list[str] = []
    data = load_image_folder(photos, size=32, say=lines.append)
    corrupt = data.report.of_kind("corrupt-file")
    assert corrupt is not None and sorted(corrupt.rows) == ["cat/bomb.png", "dog/half.png"]
    rows = [row for split in data.splits.values() for row in split.rows]
    assert len(rows) == 20 and not {"cat/bomb.png", "dog/half.png"} & set(rows)
    assert data.splits["train"].images.shape[1:] == (32, 32, 3)
    assert any("corrupt-file" in line for line in lines)


def test_the_run_records_the_folder_as_a_text_fit_records_its_file(fitted) -> None:
    run, summary = fitted["run"], fitted["summary"]
    report = json.loads((run / "data_report.json").read_text())
    assert report["source"]["fingerprint"] == summary["data"]["fingerprint"]
    for manifest in (run / "manifest.json", next((run / "pretrained").iterdir()) / "manifest.json"):
        config = json.loads(manifest.read_text())["config"]
        assert config["data_source"]["fingerprint"] == summary["data"]["fingerprint"]
        assert config["data_report_counts"] == summary["data"]["report_counts"]


def test_resuming_on_a_changed_image_folder_stops_before_training(fitted, tmp_path, capsys, monkeypatch) -> None:
    import shutil

    photos = shutil.copytree(fitted["photos"], tmp_path / "photos")
    bag, boot = (next((photos / "train" / name).glob("*.png")) for name in ("bag", "boot"))
    bag.write_bytes(boot.read_bytes())  # one image replaced by another: the same names, other data
    run = fitted["run"]
    before = sorted(str(p) for p in run.rglob("*"))
    monkeypatch.setenv("TORCHWORK_RESUME", str(run))  # what torchwork resume sets
    code = main(["fit", str(photos), "--quick", "--set", f"run_dir={fitted['root'] / 'runs'}", "--set",
                 "image_size=32", "--set", "quantize=false", "--set", "worst=6"])
    captured = capsys.readouterr()
    assert code == 2
    (line,) = captured.err.strip().splitlines()
    assert f"is not the image folder the resumed run {run} was started on" in line
    assert "== 2." not in captured.out and sorted(str(p) for p in run.rglob("*")) == before
