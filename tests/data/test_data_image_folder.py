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
    assert "900,000,000" in corrupt["train/boot/bomb.png"]


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


def test_a_folder_named_like_a_text_file_is_said_to_be_a_folder(folders, tmp_path) -> None:
    """`torchwork data check x.csv` on a folder named x.csv was told about image class sub-folders."""
    from torchwork.errors import DataError

    target = _tiny(tmp_path / "reviews.csv", ["a.png", "b.png"], folders["images"])
    with pytest.raises(DataError, match=r"reviews\.csv is a folder, not a file: give the path of your \.csv file"):
        read_image_folder(target)


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


def _listed(root: Path, rows: list[str]) -> Path:
    """Empty files at ``rows`` below ``root``: the folder reader lists them without decoding any."""
    for row in rows:
        (root / row).parent.mkdir(parents=True, exist_ok=True)
        (root / row).write_bytes(b"")
    return root


@pytest.mark.parametrize("alias", ["a_trouser_alias", "z_trouser_alias"])
def test_a_link_to_a_class_folder_never_renames_the_class(tmp_path, alias) -> None:
    root = _listed(tmp_path / "alias", [f"{name}/{k}.png" for name in ("boot", "trouser", "tshirt") for k in range(3)])
    os.symlink("trouser", root / alias)  # sorted before its target, or after it
    data = read_image_folder(root)
    assert data.classes == ["boot", "trouser", "tshirt"] and data.labels.count("trouser") == 3
    assert data.skipped == [(alias, "a link to 'trouser', a folder already read: not read twice")]
    assert data.empty_classes == [] and alias not in data.labels


def test_links_to_split_and_sub_folders_are_read_after_every_real_folder(tmp_path) -> None:
    root = _listed(tmp_path / "photos", [f"train/{name}/{k}.png" for name in ("cat", "dog") for k in range(3)]
                   + ["train/dog/more/x.png", "elsewhere/cat/y.png"])
    os.symlink("train", root / "test")  # "test" sorts before "train"
    os.symlink("../dog/more", root / "train" / "cat" / "a_more")  # before dog/ is read
    os.symlink("../../elsewhere/cat", root / "train" / "dog" / "b_linked")  # a folder no real folder reads
    data = read_image_folder(root)
    assert set(data.splits or []) == {"train"} and data.labels.count("dog") == 5 and data.labels.count("cat") == 3
    assert "train/dog/b_linked/y.png" in data.rows and data.empty_classes == []
    assert dict(data.skipped) == {"elsewhere": "outside train/, val/ and test/: not read",
                                  "test": "a link to 'train', a folder already read: not read twice",
                                  "train/cat/a_more": "a link to 'train/dog/more', a folder already read: not read "
                                                      "twice"}


RAMP = np.tile(np.arange(64), (64, 1))


@pytest.mark.parametrize(("values", "formats", "expected"), [
    pytest.param((RAMP * 1040).astype(np.uint16), ("PNG", "TIFF"), RAMP * 1040 / 257, id="I;16"),
    pytest.param((RAMP * 1040).astype(">u2"), ("TIFF",), RAMP * 1040 / 257, id="I;16B"),
    pytest.param((RAMP * 1040).astype(np.int32), ("TIFF",), RAMP * 1040 / 257, id="I-16-bit-values"),
    pytest.param((RAMP * 4).astype(np.int32), ("TIFF",), RAMP * 4, id="I-8-bit-values"),
    pytest.param((RAMP * 100_000 - 5).astype(np.int32), ("TIFF",), RAMP * 255 / 63, id="I-own-range"),
    pytest.param((RAMP / 63).astype(np.float32), ("TIFF",), RAMP * 255 / 63, id="F-0-to-1"),
    pytest.param((RAMP * 10 - 100).astype(np.float32), ("TIFF",), RAMP * 255 / 63, id="F-own-range"),
])
def test_wide_images_are_brought_to_8_bits_not_saturated(values, formats, expected) -> None:
    from torchwork.data.image_decode import decode_image

    for kind in formats:
        buffer = io.BytesIO()
        Image.fromarray(values).save(buffer, kind)
        decoded = decode_image(buffer.getvalue(), 64)
        assert np.abs(decoded[..., 0].astype(float) - expected).max() <= 0.51, kind
        assert (decoded[..., 0] == decoded[..., 2]).all()


def test_little_endian_16_bit_nan_and_flat_images_are_8_bit() -> None:
    from torchwork.data.image_decode import eight_bit

    little = Image.frombytes("I;16L", (64, 64), (RAMP * 1040).astype("<u2").tobytes())
    assert np.array_equal(np.asarray(eight_bit(little)), np.rint(RAMP * 1040 / 257))
    with_nan = Image.fromarray(np.array([[np.nan, 0.0, 0.5, np.inf]], dtype=np.float32))
    assert np.asarray(eight_bit(with_nan)).tolist() == [[0, 0, 128, 255]]
    flat = Image.fromarray(np.full((4, 4), 7.5, dtype=np.float32))
    assert eight_bit(flat).mode == "L" and not np.asarray(eight_bit(flat)).any()
    rgb = Image.new("RGB", (4, 4), "red")
    assert eight_bit(rgb) is rgb


def test_every_image_training_reads_can_be_served(tmp_path) -> None:
    from torchwork.data.image_audit import MAX_BYTES
    from torchwork.data.image_decode import ImagePreprocessor

    buffer = io.BytesIO()
    Image.new("RGB", (40, 40), "red").save(buffer, "PNG")
    scan = buffer.getvalue() + b"\x00" * (17 * 2**20)  # over 16 MiB: ignored after the PNG's end
    assert ImagePreprocessor(32).max_bytes == MAX_BYTES
    assert ImagePreprocessor(32)([scan]).shape == (1, 3, 32, 32)


def test_a_bomb_over_pillow_s_own_limit_names_torchwork_s_bound() -> None:
    from torchwork.data.image_decode import decode_image
    from torchwork.errors import DataError

    with pytest.raises(DataError) as raised:
        decode_image(bomb_png(), 32)  # 900,000,000 pixels: Pillow refuses it before torchwork looks
    assert str(raised.value) == ("a decompression bomb: the header claims more than 89,478,485 pixels "
                                 "(900,000,000); not decoded. Resize the image")


def test_what_pillow_says_is_shown_without_the_object_it_read_from() -> None:
    from torchwork.data.image_decode import bomb_detail, pillow_detail

    with pytest.raises(OSError) as unreadable:
        Image.open(io.BytesIO(b"not an image"))
    assert pillow_detail(unreadable.value) == "cannot identify image file"
    with pytest.raises(Image.DecompressionBombError) as bomb:
        Image.open(io.BytesIO(bomb_png()))
    assert bomb_detail(bomb.value, 89_478_485) == ("the header claims more than 89,478,485 pixels (900,000,000); "
                                                   "not decoded")


def _classes(root: Path, per_class: dict[str, int], images: np.ndarray, split: str = "") -> Path:
    """``per_class[name]`` distinct images in ``root/split/name/`` each; the image indices never repeat."""
    start = sum(1 for _ in root.rglob("*.png")) if root.exists() else 0
    rows = [f"{split}/{name}/{k}.png".lstrip("/") for name, n in per_class.items() for k in range(n)]
    for k, row in enumerate(rows):
        _save(Image.fromarray(images[start + k]), root / row)
    return root


@pytest.mark.parametrize("per_class", [3, 4, 5])
def test_a_class_of_three_to_five_images_gets_a_validation_and_a_test_image(folders, tmp_path, per_class) -> None:
    root = _classes(tmp_path / "photos", {"boot": per_class, "trouser": 30, "tshirt": 30}, folders["images"])
    report = audit_images(read_image_folder(root))
    assert report.errors == [] and report.of_kind("class-not-in-test") is None
    for split in ("validation", "test"):
        assert report.splits[split]["classes"]["boot"] >= 1, (split, report.splits)
    assert report.splits["train"]["classes"]["boot"] == per_class - 2


def test_a_class_that_cannot_be_scored_is_an_error_naming_it(folders, tmp_path) -> None:
    images = folders["images"]
    two = audit_images(read_image_folder(_classes(tmp_path / "two", {"boot": 2, "tshirt": 30}, images)))
    assert two.splits["test"]["classes"]["boot"] == 1 and two.splits["train"]["classes"]["boot"] == 1
    assert two.errors == [] and two.of_kind("class-not-in-validation").examples == [{"class": "boot",
                                                                                     "train_images": 1}]
    one = audit_images(read_image_folder(_classes(tmp_path / "one", {"boot": 1, "tshirt": 30}, images)))
    unscored = one.of_kind("class-not-in-test")
    assert unscored.severity == "error" and "'boot'" in unscored.summary and "at least 2 images" in unscored.fix
    every = audit_images(read_image_folder(_classes(tmp_path / "all", {"boot": 2, "tshirt": 2}, images)))
    assert [(f.kind, f.examples) for f in every.errors] == [("empty-split", [{"split": "validation"}])]


@pytest.mark.parametrize("given", [("train",), ("train", "val")])
def test_split_folders_without_a_test_folder_are_an_error(folders, tmp_path, given) -> None:
    root = tmp_path / "photos"
    for split in given:
        _classes(root, {"boot": 8, "tshirt": 8}, folders["images"], split)
    report = audit_images(read_image_folder(root))
    empty = report.of_kind("empty-split")
    assert [f.kind for f in report.errors] == ["empty-split"] and empty.examples == [{"split": "test"}]
    assert "add a test/ folder" in empty.fix and report.splits["test"]["rows"] == 0


def test_a_test_folder_without_a_class_is_an_error(folders, tmp_path) -> None:
    root = _classes(tmp_path / "photos", {"boot": 8, "tshirt": 8}, folders["images"], "train")
    _classes(root, {"tshirt": 3}, folders["images"], "test")
    report = audit_images(read_image_folder(root))
    unscored = report.of_kind("class-not-in-test")
    assert unscored.severity == "error" and unscored.examples == [{"class": "boot", "train_images": 7}]
    assert "test/<class>/" in unscored.fix


def test_a_class_whose_images_all_copy_another_class_is_said_to_be_left_out(folders, tmp_path) -> None:
    root = _classes(tmp_path / "photos", {"boot": 20, "tshirt": 20}, folders["images"])
    (root / "copycat").mkdir()
    for k in range(6):
        (root / "copycat" / f"{k}.png").write_bytes((root / "tshirt" / f"{k}.png").read_bytes())
    report = audit_images(read_image_folder(root))
    left_out = report.of_kind("class-left-out")
    assert left_out.severity == "warning" and left_out.examples[0]["class"] == "copycat"
    assert "will not be in the model" in left_out.summary
    assert "copycat" not in {c for split in report.splits.values() for c in split["classes"]}


@pytest.mark.skipif(os.name == "nt", reason="a file name of bytes that are not UTF-8 needs a POSIX file system")
def test_names_that_are_not_utf8_are_escaped_and_hashed_stably(folders, tmp_path) -> None:
    import json

    root = _classes(tmp_path / "photos", {"boot": 10, "tshirt": 10}, folders["images"])
    os.rename(bytes(root / "tshirt"), bytes(root) + b"/t\xe9shirt")
    (root / "boot" / os.fsdecode(b"caf\xe9.png")).write_bytes((root / "boot" / "0.png").read_bytes())
    report = audit_images(read_image_folder(root))
    assert "t\\xe9shirt" in report.splits["train"]["classes"]
    assert report.of_kind("duplicate").rows == ["boot/caf\\xe9.png"]
    "\n".join(report.lines()).encode("utf-8")  # no surrogate left to fail a terminal or a file
    json.dumps(report.to_dict(), ensure_ascii=False).encode("utf-8")
    again = audit_images(read_image_folder(root))
    assert again.source["fingerprint"] == report.source["fingerprint"] and again.splits == report.splits


def test_a_run_folder_inside_the_image_folder_is_named_as_one(folders, tmp_path) -> None:
    root = _classes(tmp_path / "photos", {"boot": 10, "tshirt": 10}, folders["images"])
    run = root / "runs" / "fit" / "20260101T000000Z-000001"
    (run / "checkpoints").mkdir(parents=True)
    (run / "manifest.json").write_text("{}")
    (root / "empty").mkdir()
    empty = audit_images(read_image_folder(root)).of_kind("empty-class")
    assert {e["row"]: e["text"] for e in empty.examples} == {"runs": "a torchwork run folder", "empty": "no image file"}
    assert "run_dir" in empty.fix and "runs: a torchwork run folder" in empty.summary


def test_the_largest_of_a_group_of_near_copies_is_named_the_original(folders, tmp_path) -> None:
    """A resized copy whose name sorted first was called the original, and the fix "delete the copies" then
    deleted the full-size image."""
    images = folders["images"]
    root = tmp_path / "photos"
    for k in range(6):
        for label, offset in (("boot", 0), ("bag", 100)):
            _save(Image.fromarray(images[offset + k]), root / label / f"{k}.png")
    full = Image.fromarray(images[50]).resize((256, 256), Image.Resampling.BICUBIC)
    _save(full, root / "boot" / "z_full.png")
    _save(full.resize((128, 128), Image.Resampling.LANCZOS), root / "boot" / "a_small.png")
    copies = audit_images(read_image_folder(root)).of_kind("duplicate")
    assert copies is not None
    (example,) = [e for e in copies.examples if "a_small" in str(e["row"]) or "z_full" in str(e["row"])]
    assert example["row"] == "boot/a_small.png" and example["first_row"] == "boot/z_full.png"


def test_a_photo_is_turned_upright_as_its_exif_orientation_says() -> None:
    """A phone's portrait photo, stored sideways with an orientation tag, was trained and served sideways."""
    import io

    from torchwork.data.image_decode import decode_image

    pixels = np.zeros((40, 80, 3), np.uint8)
    pixels[:, :40] = 255  # the left half white, as stored
    stored = Image.fromarray(pixels)
    tagged, plain = io.BytesIO(), io.BytesIO()
    exif = stored.getexif()
    exif[0x0112] = 6  # shown turned 90 degrees clockwise: the white half on top
    stored.save(tagged, "JPEG", exif=exif.tobytes())
    stored.save(plain, "JPEG")
    upright, as_stored = decode_image(tagged.getvalue(), 32), decode_image(plain.getvalue(), 32)
    assert upright[:12, :, 0].min() > 200 and upright[20:, :, 0].max() < 50  # white on top, black below
    assert as_stored[:, :12, 0].min() > 200 and as_stored[:, 20:, 0].max() < 50  # untagged: as stored
