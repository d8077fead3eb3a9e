"""The data report of an image folder on real images: Fashion-MNIST (Debian's dataset-fashion-mnist) written
as PNG folders, a clean copy and a copy with planted faults (corrupt files, a decompression bomb, hidden
entries, an empty class, links out, a FIFO, exact and near copies across splits, an odd size, colour among
grayscale). Every planted fault of the listing is found; 95% or more of the cross-split copies."""

from __future__ import annotations

import dataclasses
import io
import os
import struct
import zlib
from pathlib import Path

import numpy as np
import pytest
from PIL import Image, ImageEnhance

from torchwork.data.findings import DataReport
from torchwork.data.image_audit import audit_images, inspect_image
from torchwork.data.image_folder import read_image_folder

CLASSES = ("tshirt", "trouser", "pullover", "dress", "coat", "sandal", "shirt", "sneaker", "bag", "boot")
PER_CLASS, TEST_PER_CLASS = 30, 6


@dataclasses.dataclass
class Planted:
    """The rows of each planted fault, by kind."""

    rows: dict[str, list[str]] = dataclasses.field(default_factory=dict)

    def add(self, kind: str, row: str) -> None:
        self.rows.setdefault(kind, []).append(row)


def fashion_images() -> tuple[np.ndarray, np.ndarray]:
    """Fashion-MNIST's test images and labels, or a skip saying how to install them."""
    from torchwork.data.datasets import fashion_mnist_files, read_idx
    from torchwork.errors import DataError

    try:
        files = fashion_mnist_files()
    except DataError as error:
        pytest.skip(f"needs Fashion-MNIST from Debian's dataset-fashion-mnist: {error}")
    return read_idx(files["test_images"]), read_idx(files["test_labels"])


def _save(image: Image.Image, path: Path, **options: object) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    image.save(path, **options)


def write_clean(root: Path, images: np.ndarray, labels: np.ndarray) -> dict[str, list[int]]:
    """PER_CLASS images of each class as PNG below train/ and test/; the image indices used per class."""
    used = {}
    for c, name in enumerate(CLASSES):
        indices = [int(i) for i in np.flatnonzero(labels == c)[:PER_CLASS]]
        used[name] = indices
        for k, i in enumerate(indices):
            split = "test" if k < TEST_PER_CLASS else "train"
            _save(Image.fromarray(images[i]), root / split / name / f"{i:05d}.png")
    return used


def bomb_png(width: int = 30000, height: int = 30000) -> bytes:
    """A valid PNG signature and IHDR that claim ``width`` x ``height`` pixels, and a tiny IDAT: never to be
    decoded."""
    def chunk(kind: bytes, body: bytes) -> bytes:
        return struct.pack(">I", len(body)) + kind + body + struct.pack(">I", zlib.crc32(kind + body))

    header = struct.pack(">IIBBBBB", width, height, 8, 0, 0, 0, 0)
    return b"\x89PNG\r\n\x1a\n" + chunk(b"IHDR", header) + chunk(b"IDAT", zlib.compress(b"\x00" * 64)) + chunk(
        b"IEND", b"")


def _corrupt(root: Path, images: np.ndarray, planted: Planted) -> None:
    png = io.BytesIO()
    Image.fromarray(images[9000]).save(png, "PNG")
    jpeg = io.BytesIO()
    Image.fromarray(images[9001]).convert("RGB").save(jpeg, "JPEG", quality=90)
    rng = np.random.default_rng(0)
    files = {"train/coat/truncated.png": png.getvalue()[: len(png.getvalue()) // 2],
             "train/bag/truncated.jpg": jpeg.getvalue()[: len(jpeg.getvalue()) * 2 // 3],
             "train/shirt/random.png": rng.integers(0, 256, 2000, dtype=np.uint8).tobytes(),
             "test/dress/random.jpg": rng.integers(0, 256, 500, dtype=np.uint8).tobytes(),
             "train/sandal/empty.png": b"", "train/boot/bomb.png": bomb_png()}
    for row, data in files.items():
        (root / row).write_bytes(data)
        planted.add("corrupt-file", row)


def _hidden_and_odd_entries(root: Path, images: np.ndarray, planted: Planted, outside: Path) -> None:
    _save(Image.fromarray(images[9002]), root / "train" / ".ipynb_checkpoints" / "x.png")
    _save(Image.fromarray(images[9003]), root / "__MACOSX" / "train" / "coat" / "._x.png")
    (root / "train" / "coat" / ".DS_Store").write_bytes(b"\x00\x00\x00\x01Bud1")
    planted.rows["hidden-entry"] = ["__MACOSX", "train/.ipynb_checkpoints", "train/coat/.DS_Store"]
    (root / "train" / "empty_class").mkdir()
    planted.add("empty-class", "train/empty_class")
    (root / "train" / "bag" / "notes.txt").write_text("where these came from")
    planted.add("not-image", "train/bag/notes.txt")
    _save(Image.fromarray(images[9004]), outside / "elsewhere.png")
    os.symlink(outside / "elsewhere.png", root / "train" / "bag" / "link.png")
    planted.add("skipped-entry", "train/bag/link.png")
    if hasattr(os, "mkfifo"):
        os.mkfifo(root / "train" / "bag" / "pipe.png")
        planted.add("skipped-entry", "train/bag/pipe.png")
    _save(Image.fromarray(images[9005]).resize((400, 20)), root / "train" / "trouser" / "banner.png")
    planted.add("odd-size", "train/trouser/banner.png")
    for k in range(12):  # colour-tinted images among grayscale ones
        gray = images[9010 + k].astype(np.float32)
        tinted = np.stack([gray, gray * 0.55, gray * 0.2], axis=2).astype(np.uint8)
        _save(Image.fromarray(tinted), root / "train" / "sneaker" / f"tinted{k}.png")
        planted.add("grayscale", f"train/sneaker/tinted{k}.png")


def _duplicates(root: Path, images: np.ndarray, used: dict[str, list[int]], planted: Planted) -> None:
    """Cross-split copies of training images into test/ (10 exact, 10 re-saved as JPEG, 10 brightened), two
    copies within train/ and one image in two classes."""
    ways = ["exact"] * 10 + ["jpeg"] * 10 + ["bright"] * 10
    for k, way in enumerate(ways):
        name = CLASSES[k % len(CLASSES)]
        i = used[name][TEST_PER_CLASS + k // len(CLASSES)]
        source = root / "train" / name / f"{i:05d}.png"
        row = f"test/{name}/copy{k}-{way}." + ("jpg" if way == "jpeg" else "png")
        if way == "exact":
            (root / row).write_bytes(source.read_bytes())
        elif way == "jpeg":
            Image.fromarray(images[i]).save(root / row, "JPEG", quality=75)
        else:
            ImageEnhance.Brightness(Image.fromarray(images[i])).enhance(1.15).save(root / row)
        planted.add("cross-split-duplicate", row)
        planted.add("duplicate", row)
    for k, name in enumerate(("coat", "shirt")):
        i = used[name][-1]
        (root / "train" / name / f"again{k}.png").write_bytes((root / "train" / name / f"{i:05d}.png").read_bytes())
        planted.add("duplicate", f"train/{name}/again{k}.png")
    i = used["pullover"][-2]
    (root / "train" / "shirt" / "mislabelled.png").write_bytes(  # after pullover/: the copy, not the first
        (root / "train" / "pullover" / f"{i:05d}.png").read_bytes())
    planted.add("duplicate", "train/shirt/mislabelled.png")
    planted.rows["conflicting-labels"] = sorted(["train/shirt/mislabelled.png", f"train/pullover/{i:05d}.png"])


def write_planted(root: Path, images: np.ndarray, labels: np.ndarray, outside: Path) -> Planted:
    """The clean folder with every planted fault added; the planted rows by kind."""
    used = write_clean(root, images, labels)
    planted = Planted()
    _corrupt(root, images, planted)
    _hidden_and_odd_entries(root, images, planted, outside)
    _duplicates(root, images, used, planted)
    return planted


@pytest.fixture(scope="module")
def folders(tmp_path_factory: pytest.TempPathFactory) -> dict[str, object]:
    images, labels = fashion_images()
    base = tmp_path_factory.mktemp("images")
    write_clean(base / "clean", images, labels)
    (base / "outside").mkdir()
    planted = write_planted(base / "planted", images, labels, base / "outside")
    return {"clean": base / "clean", "planted": base / "planted", "rows": planted.rows, "images": images,
            "labels": labels, "base": base}


@pytest.fixture(scope="module")
def planted_report(folders) -> DataReport:
    return audit_images(read_image_folder(folders["planted"]))


def _found(report: DataReport, kind: str) -> set[str]:
    finding = report.of_kind(kind)
    return set(finding.rows) if finding is not None else set()


def test_the_clean_copy_raises_nothing_above_info(folders) -> None:
    data = read_image_folder(folders["clean"])
    assert len(data.rows) == PER_CLASS * len(CLASSES) and data.classes == sorted(CLASSES)
    report = audit_images(data)
    assert [f.line() for f in report.findings if f.severity != "info"] == []
    assert {name: split["rows"] for name, split in report.splits.items()} == {"train": 220, "validation": 20,
                                                                              "test": 60}
    assert report.source["images"] == 300 and report.source["layout"] == "split folders"


@pytest.mark.parametrize("kind", ["corrupt-file", "hidden-entry", "empty-class", "not-image", "skipped-entry",
                                  "odd-size", "grayscale", "conflicting-labels"])
def test_every_planted_fault_of_the_listing_and_pixels_is_found(folders, planted_report, kind) -> None:
    planted = set(folders["rows"][kind])
    found = _found(planted_report, kind)
    assert found == planted, (kind, sorted(planted - found), sorted(found - planted))
    finding = planted_report.of_kind(kind)
    assert finding.fix and finding.summary and 1 <= len(finding.examples) <= min(5, len(planted))


def test_cross_split_copies_exact_jpeg_and_brightened_are_found(folders, planted_report) -> None:
    planted = set(folders["rows"]["cross-split-duplicate"])
    found = _found(planted_report, "cross-split-duplicate")
    assert len(found & planted) >= 0.95 * len(planted), sorted(planted - found)
    assert found <= planted, sorted(found - planted)
    assert planted_report.of_kind("cross-split-duplicate").severity == "error"
    duplicates = _found(planted_report, "duplicate")
    assert duplicates == set(folders["rows"]["duplicate"]), sorted(duplicates ^ set(folders["rows"]["duplicate"]))


def test_severities_and_the_terminal_lines(planted_report) -> None:
    severities = {f.kind: f.severity for f in planted_report.findings}
    assert severities["corrupt-file"] == "warning" and severities["hidden-entry"] == "info"
    assert severities["empty-class"] == "warning" and severities["cross-split-duplicate"] == "error"
    lines = planted_report.lines()
    assert lines[0].startswith("data report: 1 error(s)")
    at = next(k for k, line in enumerate(lines) if line.startswith("warning corrupt-file"))
    assert lines[at + 1].startswith("          row ") and lines[at + 3].startswith("          fix: ")
    assert lines[-1].startswith("split test: 90 rows (bag 9, ")
    corrupt = {e["row"]: e["text"] for e in planted_report.of_kind("corrupt-file").examples}
    assert corrupt["train/sandal/empty.png"].startswith("empty file")
    assert "900000000 pixels" in corrupt["train/boot/bomb.png"]


def test_a_decompression_bomb_is_read_from_its_header_only(tmp_path) -> None:
    path = tmp_path / "bomb.png"
    path.write_bytes(bomb_png())
    facts = inspect_image(path)
    assert facts.problem == "decompression bomb" and "not decoded" in facts.detail
    path.write_bytes(bomb_png(2000, 2000))  # under Pillow's limit, over the one given
    assert inspect_image(path, max_pixels=1_000_000).problem == "decompression bomb"
    assert inspect_image(path).problem == "truncated"  # decoded: its 64 bytes of pixels are too few


def _tiny(root: Path, rows: list[str], images: np.ndarray) -> Path:
    for k, row in enumerate(rows):
        _save(Image.fromarray(images[k]), root / row)
    return root


@pytest.mark.parametrize(("rows", "message"), [
    (None, "no such folder"),
    ([], "is a file, not a folder"),
    (["a.png", "b.png"], "has no class sub-folders"),
    (["cat/a.png", "cat/b.png", ".hidden/c.png"], "only the class folder 'cat' holds"),
    (["test/cat/a.png", "test/dog/b.png"], "but no train/ folder"),
])
def test_a_folder_no_classifier_can_learn_from_is_refused_in_one_line(folders, tmp_path, rows, message) -> None:
    from torchwork.errors import DataError

    target = tmp_path / "photos"
    if rows == []:
        target.write_bytes(b"")
    elif rows:
        _tiny(target, rows, folders["images"])
    with pytest.raises(DataError, match=message) as raised:
        read_image_folder(target)
    assert "\n" not in str(raised.value) and str(target) in str(raised.value)


def test_without_split_folders_a_split_is_planned_and_copies_stay_together(folders, tmp_path) -> None:
    images, labels = folders["images"], folders["labels"]
    rows = [f"{CLASSES[int(labels[i])]}/{i:05d}.png" for i in range(200)]
    root = _tiny(tmp_path / "photos", rows, images[:200])
    for k in range(10):  # ten exact copies under another name, in the same class
        (root / f"{rows[k]}.copy.png").write_bytes((root / rows[k]).read_bytes())
    report = audit_images(read_image_folder(root), seed=1)
    assert report.of_kind("duplicate").count == 10 and report.of_kind("cross-split-duplicate") is None
    assert sum(split["rows"] for split in report.splits.values()) == 200  # one image of each copied pair
    assert report.source["layout"] == "class folders" and report.source["dropped"]["duplicate"] == 10
    again = audit_images(read_image_folder(root), seed=1)
    assert again.source["fingerprint"] == report.source["fingerprint"] and again.splits == report.splits
    (root / rows[20]).write_bytes((root / rows[21]).read_bytes())
    assert audit_images(read_image_folder(root), seed=1).source["fingerprint"] != report.source["fingerprint"]


def test_a_class_with_test_images_and_no_training_images_is_an_error(folders, tmp_path) -> None:
    rows = [f"train/{name}/{k}.png" for name in ("cat", "dog") for k in range(6)] + [
        f"test/{name}/{k}.png" for name in ("cat", "dog", "eel") for k in range(2)]
    root = _tiny(tmp_path / "photos", rows, folders["images"])
    (root / "train" / "eel").mkdir()
    report = audit_images(read_image_folder(root))
    untrained = report.of_kind("class-not-in-train")
    assert untrained.severity == "error" and untrained.examples == [{"class": "eel", "splits": ["test"]}]
    assert report.of_kind("empty-class").rows == ["train/eel"]
