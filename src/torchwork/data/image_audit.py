"""The data report of an image folder (read by :func:`~torchwork.data.image_folder.read_image_folder`): what
is wrong with it, found before any training, in the text report's format
(:class:`~torchwork.data.findings.DataReport`; a row is a path relative to the folder).

Kinds:

- ``corrupt-file`` (warning: they are left out): empty, truncated or undecodable files, and decompression
  bombs (a header claiming more than Pillow's ``MAX_IMAGE_PIXELS``, never decoded);
- ``hidden-entry`` and ``not-image`` (info), ``skipped-entry`` (warning: links leading out of the folder,
  FIFOs, devices, images outside any class folder), ``empty-class`` (warning: a class folder without a
  readable image);
- ``duplicate`` (warning): the same bytes, or a near copy (re-encoded, brightened, resized);
  ``cross-split-duplicate`` (error): an image of a later split (validation, test) also in an earlier one;
  ``conflicting-labels`` (warning): one image in two class folders;
- ``odd-size`` (warning): a side more than 4x from the median's, or an aspect ratio beyond 4:1;
  ``grayscale`` (info): grayscale images among colour ones, or the reverse;
- ``class-not-in-train`` (error): a class with images in val/ or test/ and none in train/;
- ``label-variants`` (error): class folders whose names spell one class two ways (``Cat/`` and ``cat/``,
  ``golden_retriever/`` and ``Golden Retriever/``: :mod:`torchwork.data.label_variants`), each read as a class
  of its own otherwise (and one folder on a case-insensitive file system);
- ``imbalance`` and ``rare-class``: as in the text report (:func:`torchwork.data.audit.class_findings`);
- of the split plan: ``empty-split`` (error: a validation or test split without an image, which fit cannot go
  on without), ``class-not-in-test`` (error: a trained class the test split has no image of; its F1 of 0
  would lower the macro-F1 that chooses the served model), ``class-not-in-validation`` (warning), and
  ``class-left-out`` (warning: a class whose every image is a tied copy of another class's, so that the model
  will not have it).

A planned split gives each class of 2 images (groups of copies count once) a test image, and each of 3 or
more a validation image too (:func:`torchwork.data.splits.stratified_split`). Names that are not UTF-8 (a zip
made on Windows) are shown with the bytes escaped (:func:`printable`); an empty class folder that holds a
torchwork run (``torchwork fit .`` inside the image folder) is said to be one.

Near copies: each image's 64-bit difference hash (:func:`dhash`) puts it in 8 buckets (one per byte), so two
hashes that differ in at most 7 bits share a bucket; two images of a bucket are near copies when their hashes
differ in at most 10 bits and their 16x16 grayscale thumbnails correlate at 0.995 or more (brightness and
contrast do not count). Measured on 20,000 Fashion-MNIST images and 300 copies (JPEG quality 75, or
brightened 15%): 296 copies found, and 66 originals (0.3%) in 26 groups of look-alikes. Equal hashes alone
would miss half the re-saved JPEGs and join different low-resolution images (a 9x8 hash is unchanged by a
JPEG re-save for 41% of images; 7% of images share their hash with another one). A bucket is compared in
chunks of 256 members sorted by hash: no step compares all pairs of images.

Example:
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> from PIL import Image
    >>> from torchwork.data.image_folder import read_image_folder
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> rng = np.random.default_rng(0)
    >>> for split, label, i in [(s, c, i) for s in ("train", "test") for c in ("cat", "dog") for i in range(3)]:
    ...     (root / split / label).mkdir(parents=True, exist_ok=True)
    ...     Image.fromarray(rng.integers(0, 255, (32, 32), dtype=np.uint8)).save(root / split / label / f"{i}.png")
    >>> _ = (root / "test" / "dog" / "2.png").write_bytes((root / "train" / "dog" / "0.png").read_bytes())
    >>> report = audit_images(read_image_folder(root))
    >>> [(f.kind, f.severity, f.rows) for f in report.findings]
    [('duplicate', 'warning', ['test/dog/2.png']), ('cross-split-duplicate', 'error', ['test/dog/2.png'])]
    >>> report.splits["test"]["classes"], report.source["layout"]
    ({'cat': 3, 'dog': 3}, 'split folders')
"""

from __future__ import annotations

import dataclasses
import hashlib
import re
import statistics
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.data.findings import DataReport, Finding, example, finding
from torchwork.data.image_facts import (  # noqa: F401 (FORMATS, dhash, inspect_image: their old import path)
    DEFAULT_MAX_PIXELS,
    FORMATS,
    MAX_BYTES,
    MAX_PIXELS_LIMIT,
    THUMB,
    ImageFacts,
    check_limits,
    dhash,
    inspect_image,
)
from torchwork.data.image_folder import ImageFolderData
from torchwork.data.split_findings import Layout, split_classes, split_findings
from torchwork.errors import ConfigError, DataError
from torchwork.quoting import quote_value
from torchwork.seeding import check_seed

BANDS, MAX_HAMMING, MIN_CORRELATION, CHUNK = 8, 10, 0.995, 256
ODD_SIDE, ODD_ASPECT = 4.0, 4.0
SPLIT_ORDER = ("train", "validation", "test")


class _Groups:
    """Union-find over image indices: the groups of exact and near copies."""

    def __init__(self, n: int) -> None:
        self.parent = list(range(n))

    def find(self, i: int) -> int:
        while self.parent[i] != i:
            self.parent[i] = self.parent[self.parent[i]]
            i = self.parent[i]
        return i

    def join(self, a: int, b: int) -> None:
        ra, rb = self.find(a), self.find(b)
        if ra != rb:
            self.parent[max(ra, rb)] = min(ra, rb)

    def groups(self) -> list[list[int]]:
        members: dict[int, list[int]] = defaultdict(list)
        for i in range(len(self.parent)):
            members[self.find(i)].append(i)
        return [m for m in members.values() if len(m) > 1]


_POPCOUNT = np.array([bin(b).count("1") for b in range(256)], dtype=np.uint8)


def _link_near(chunk: list[int], hashes: np.ndarray, thumbs: np.ndarray, groups: _Groups) -> None:
    t = thumbs[chunk]
    h = hashes[chunk]  # (m, 8) bytes of each hash
    bits_apart = _POPCOUNT[h[:, None, :] ^ h[None, :, :]].sum(axis=2)
    close = (t @ t.T >= MIN_CORRELATION) & (bits_apart <= MAX_HAMMING)
    for a, c in np.argwhere(np.triu(close, 1)):
        groups.join(chunk[a], chunk[c])


def duplicate_groups(facts: Sequence[ImageFacts]) -> list[list[int]]:
    """Groups (indices into ``facts``, each sorted, at least 2) of exact copies (the same bytes) and near
    copies (see the module) among the readable images.

    Example:
        >>> a = ImageFacts("x" * 64, 8, 8, "L")
        >>> duplicate_groups([a, ImageFacts("y" * 64, 8, 8, "L"), a])
        [[0, 2]]
    """
    groups = _Groups(len(facts))
    readable = [i for i, f in enumerate(facts) if f.problem is None and f.sha256]
    first: dict[str, int] = {}
    for i in readable:
        groups.join(first.setdefault(facts[i].sha256, i), i)
    thumbs = np.zeros((len(facts), THUMB * THUMB), dtype=np.float32)
    for i in readable:
        if len(facts[i].thumb) == THUMB * THUMB:
            t = np.frombuffer(facts[i].thumb, dtype=np.uint8).astype(np.float32)
            t -= t.mean()
            norm = float(np.linalg.norm(t))
            thumbs[i] = t / norm if norm > 1e-3 else 0.0  # a flat image is nobody's near copy
    hashes = np.frombuffer(b"".join(f.dhash.to_bytes(8, "big") for f in facts), dtype=np.uint8).reshape(-1, 8)
    width = 64 // BANDS
    for band in range(BANDS):
        buckets: dict[int, list[int]] = defaultdict(list)
        for i in readable:
            buckets[(facts[i].dhash >> (width * band)) & ((1 << width) - 1)].append(i)
        for members in buckets.values():
            members.sort(key=lambda i: facts[i].dhash)
            for start in range(0, len(members) - 1, CHUNK):
                _link_near(members[start:start + CHUNK], hashes, thumbs, groups)
    return sorted(groups.groups())


def printable(name: str) -> str:
    """``name`` with each byte that was not UTF-8 in the file system's name (a zip made on Windows) written as
    ``\\xNN``: a name every terminal, JSON file and web page can show, the same for the same bytes.

    Example:
        >>> import os
        >>> printable(os.fsdecode(b"caf\\xe9.png")), printable("café.png"), printable("two\\nlines")
        ('caf\\\\xe9.png', 'café.png', 'two\\\\x0alines')
    """
    shown = name.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
    # a control character (a newline in a folder's name) broke the report's one line per entry
    return re.sub(r"[\x00-\x1f\x7f]", lambda m: f"\\x{ord(m.group()):02x}", shown)


def _printable_names(data: ImageFolderData) -> ImageFolderData:
    """``data`` with its rows, classes and folder in :func:`printable` form; its paths (to read) unchanged."""
    return dataclasses.replace(
        data, folder=Path(printable(str(data.folder))), rows=[printable(r) for r in data.rows],
        labels=[printable(label) for label in data.labels], classes=[printable(c) for c in data.classes],
        empty_classes=[printable(r) for r in data.empty_classes], hidden=[printable(r) for r in data.hidden],
        not_images=[printable(r) for r in data.not_images], skipped=[(printable(r), why) for r, why in data.skipped])


def _split_rank(name: str) -> int:
    return SPLIT_ORDER.index(name) if name in SPLIT_ORDER else len(SPLIT_ORDER)


@dataclasses.dataclass(frozen=True)
class _Audit:
    """The folder and the facts of each of its images, for the checks below."""

    data: ImageFolderData
    facts: list[ImageFacts]
    groups: list[list[int]]

    @property
    def readable(self) -> list[int]:
        return [i for i, f in enumerate(self.facts) if f.problem is None]

    def split(self, i: int) -> str:
        return self.data.splits[i] if self.data.splits is not None else "train"

    def example(self, i: int, **extra: Any) -> dict[str, Any]:
        return example(self.data.rows[i], self.facts[i].describe(), **extra)


def _listed(kind: str, severity: str, entries: Sequence[tuple[str, str]], fix: str, what: str) -> Finding | None:
    """A finding about entries of the listing (no image decoded): ``(row, note)`` each."""
    if not entries:
        return None
    return finding(kind, severity, len(entries), [example(row, note) for row, note in entries], fix,
                   f"{len(entries):,} {what}", sorted(row for row, _ in entries))


def run_folders(folder: Path, rows: Sequence[str]) -> set[str]:
    """The folders of ``rows`` (relative to ``folder``) that hold a torchwork run (a ``manifest.json`` beside
    ``checkpoints/``, up to 3 levels down): ``torchwork fit .`` run inside the image folder writes ``runs/``.

    Example:
        >>> import pathlib, tempfile
        >>> root = pathlib.Path(tempfile.mkdtemp())
        >>> (root / "runs" / "fit" / "20260101T000000Z" / "checkpoints").mkdir(parents=True)
        >>> _ = (root / "runs" / "fit" / "20260101T000000Z" / "manifest.json").write_text("{}")
        >>> (root / "cat").mkdir()
        >>> sorted(run_folders(root, ["runs", "cat"]))
        ['runs']
    """
    def holds_run(path: Path) -> bool:
        return any((m.parent / "checkpoints").is_dir()
                   for pattern in ("manifest.json", "*/manifest.json", "*/*/manifest.json")
                   for m in path.glob(pattern))

    return {row for row in rows if holds_run(folder / row)}


def _listing_findings(data: ImageFolderData, unreadable_classes: Sequence[str],
                      runs: set[str]) -> list[Finding | None]:
    return [
        _listed("hidden-entry", "info", [(row, "hidden") for row in data.hidden],
                "hidden files and folders (.name, __MACOSX) are never read nor taken for a class; delete them if "
                "they are leftovers (notebook checkpoints, macOS metadata)", "hidden entries are left out"),
        _listed("not-image", "info", [(row, Path(row).suffix or "no extension") for row in data.not_images],
                "only .jpg .jpeg .png .bmp .gif .webp .tif .tiff files are read; rename an image saved under "
                "another extension", "files are not images (by extension) and are left out"),
        _listed("skipped-entry", "warning", data.skipped,
                "torchwork reads only regular files inside the folder; copy the files a link points to into the "
                "folder, and move images into a class folder", "entries are skipped (links out of the folder, "
                "links to a folder already read, special files, images outside a class folder)"),
        _listed("empty-class", "warning",
                [(row, "a torchwork run folder" if row in runs else "no image file") for row in data.empty_classes]
                + [(row, "no readable image") for row in unreadable_classes],
                "add images to these class folders, or remove the folders: a class without images cannot be "
                "learnt (torchvision's ImageFolder refuses such a folder)" + (
                    "; a run folder is written there by fit run inside the image folder: move it out, and give fit "
                    "--set run_dir=DIR outside the image folder" if runs else ""),
                "class folders hold no usable image"
                + (f" ({', '.join(sorted(runs))}: a torchwork run folder, not a class)" if runs else "")),
    ]


def _class_variants(data: ImageFolderData) -> Finding | None:
    """``label-variants``: the images of each class folder whose name is another's spelled another way."""
    from torchwork.data.label_variants import SpellingFacts

    facts = SpellingFacts.of(data.labels)
    if not facts.groups:
        return None
    examples = [example(data.rows[facts.first[s]], f"class folder {s!r}", label=s, merged_into=usual,
                        note=f"{facts.counts[s]:,} images in {s!r}, {usual!r} spelled another way")
                for s, usual in facts.respelled()]
    return finding(
        "label-variants", "error", len(facts.respelled_rows()), examples,
        "move the images of each such folder into the folder its class is usually spelled as (in every split "
        "folder), and remove the empty one: one folder per class",
        f"{len(facts.groups)} class(es) spelled more than one way as folders ({facts.summary()}): each folder "
        "would be a class of its own", [data.rows[i] for i in facts.respelled_rows()])


def _corrupt(audit: _Audit) -> Finding | None:
    bad = [i for i, f in enumerate(audit.facts) if f.problem is not None]
    if not bad:
        return None
    kinds = Counter(audit.facts[i].problem for i in bad)
    return finding(
        "corrupt-file", "warning", len(bad), [audit.example(i) for i in bad],
        "these files are left out; re-export or re-download them, or delete them",
        f"{len(bad):,} files cannot be decoded (" + ", ".join(f"{n:,} {k}" for k, n in kinds.most_common()) + ")",
        [audit.data.rows[i] for i in bad])


def _duplicates(audit: _Audit) -> list[Finding | None]:
    rows, labels, facts = audit.data.rows, audit.data.labels, audit.facts
    copies, leaked, conflicts = [], [], []
    exact = 0
    for group in audit.groups:
        # the earliest split's first; within it the largest image is the original (a resized or re-encoded
        # copy was named the original when its name sorted first, and "delete the copies" lost the full size)
        members = sorted(group, key=lambda i: (_split_rank(audit.split(i)), -facts[i].width * facts[i].height, i))
        first = members[0]
        earliest = audit.split(first)
        for i in members[1:]:
            same = facts[i].sha256 == facts[first].sha256
            exact += same
            how = "exact copy" if same else "near copy"
            copies.append(audit.example(i, note=f"{how} of {rows[first]}", first_row=rows[first], exact=same))
        leaked += [audit.example(i, split=audit.split(i), note=f"in {audit.split(i)}, also in {earliest} as "
                                 f"{rows[first]}") for i in members if audit.split(i) != earliest]
        seen = Counter(labels[i] for i in members)
        if len(seen) > 1:
            conflicts.append((members, seen))
    found: list[Finding | None] = []
    if copies:
        copies.sort(key=lambda e: (e["exact"], e["row"]))  # near copies are the less obvious: first
        found.append(finding(
            "duplicate", "warning", len(copies), copies,
            "torchwork keeps one image of each group for training and never puts a group in two splits; delete "
            "the copies to keep the counts honest",
            f"{len(copies):,} images repeat another one ({exact:,} the same bytes, {len(copies) - exact:,} near "
            "copies)", sorted(e["row"] for e in copies)))
    if leaked:
        found.append(finding(
            "cross-split-duplicate", "error", len(leaked), leaked,
            "delete these images from the later split (validation, test), or move them to the split that holds "
            "their copy; scores measured with them are inflated",
            f"{len(leaked):,} images of a later split are also (or nearly) in an earlier one (leakage)",
            sorted(e["row"] for e in leaked)))
    if conflicts:
        found.append(_conflicting(audit, conflicts))
    return found


def _conflicting(audit: _Audit, conflicts: list[tuple[list[int], Counter[str]]]) -> Finding:
    rows = audit.data.rows
    examples = [audit.example(members[0], labels=dict(seen), rows=[rows[i] for i in members],
                              note="in " + ", ".join(f"{label} ×{n}" for label, n in seen.most_common()))
                for members, seen in conflicts]
    hit = sorted(rows[i] for members, _ in conflicts for i in members)
    return finding(
        "conflicting-labels", "warning", len(hit), examples,
        "keep each image in the one class folder it belongs to; for training torchwork keeps the most frequent "
        "class of each group and drops a group whose classes tie",
        f"{len(conflicts):,} images ({len(hit):,} files) are in more than one class folder", hit)


def _odd_sizes(audit: _Audit) -> Finding | None:
    readable = audit.readable
    if not readable:
        return None
    facts = audit.facts
    width = statistics.median(facts[i].width for i in readable)
    height = statistics.median(facts[i].height for i in readable)

    def why(f: ImageFacts) -> str | None:
        aspect = max(f.width / f.height, f.height / f.width) if f.width and f.height else float("inf")
        if aspect > ODD_ASPECT:
            return f"aspect ratio {aspect:.1f}:1"
        if max(f.width / width, width / max(f.width, 1), f.height / height, height / max(f.height, 1)) > ODD_SIDE:
            return f"far from the median size {width:g}x{height:g}"
        return None

    odd = [(i, reason) for i in readable if (reason := why(facts[i]))]
    if not odd:
        return None
    return finding(
        "odd-size", "warning", len(odd), [audit.example(i, note=reason) for i, reason in odd],
        "every image is resized to the model's input size: these are squashed or blown up; crop them, or check "
        "they belong (a banner, an icon, a scan of a page)",
        f"{len(odd):,} images have a size far from the others' (median {width:g}x{height:g}) or an extreme shape",
        [audit.data.rows[i] for i, _ in odd])


def _grayscale(audit: _Audit) -> Finding | None:
    readable = audit.readable
    gray = [i for i in readable if audit.facts[i].gray]
    if not gray or len(gray) == len(readable):
        return None
    few_gray = len(gray) <= len(readable) / 2
    minority = gray if few_gray else [i for i in readable if not audit.facts[i].gray]
    what, among = ("grayscale", "colour") if few_gray else ("colour", "grayscale")
    return finding(
        "grayscale", "info", len(minority), [audit.example(i, note=what) for i in minority],
        "torchwork converts every image to RGB; check these belong (a scan, an X-ray among photos), and that a "
        "class is not told apart by its colour alone",
        f"{len(minority):,} of {len(readable):,} images are {what} among {among} ones",
        [audit.data.rows[i] for i in minority])


def _untrained_classes(audit: _Audit) -> Finding | None:
    """Classes with readable images in validation/ or test/ and none in train/: a model cannot learn them."""
    if audit.data.splits is None:
        return None
    splits: dict[str, set[str]] = defaultdict(set)
    for i in audit.readable:
        splits[audit.data.labels[i]].add(audit.split(i))
    missing = sorted(label for label, found in splits.items() if "train" not in found)
    if not missing:
        return None
    return finding(
        "class-not-in-train", "error", len(missing),
        [{"class": label, "splits": sorted(splits[label], key=_split_rank)} for label in missing],
        "add training images of these classes to train/<class>/, or remove their folders from val/ and test/",
        f"{len(missing)} classes have images in val/ or test/ but none in train/: "
        + ", ".join(repr(label) for label in missing[:10]))


def _unreadable_classes(audit: _Audit) -> list[str]:
    """Class folders (``train/cat`` or ``cat``) that hold image files but none readable."""
    files: dict[str, list[int]] = defaultdict(list)
    for i, (label, row) in enumerate(zip(audit.data.labels, audit.data.rows)):
        files[f"{row.split('/', 1)[0]}/{label}" if audit.data.splits is not None else label].append(i)
    return sorted(folder for folder, members in files.items()
                  if all(audit.facts[i].problem is not None for i in members))


def _plan(audit: _Audit, seed: int) -> Any:
    """The split plan of the readable images: the folder's splits, or a grouped split; either way the images
    of a duplicate group count as one (the splits' ``texts`` are the groups' keys)."""
    from torchwork.data.splits import given_split, grouped_split

    group_of = {i: members[0] for members in audit.groups for i in members}
    readable = audit.readable
    keys = [f"image group {group_of.get(i, i)}" for i in readable]
    labels = [audit.data.labels[i] for i in readable]
    if audit.data.splits is None:
        return grouped_split(keys, labels, seed=seed)
    return given_split(keys, labels, [audit.split(i) for i in readable], seed=seed)


def _unscored(audit: _Audit, plan: Any) -> list[Finding]:
    """``empty-split``, ``class-not-in-test`` and ``class-not-in-validation``
    (:mod:`torchwork.data.split_findings`), worded for an image folder."""
    given = audit.data.splits is not None
    empty_fix = ("add a test/ folder with one sub-folder per class (and val/ likewise, or let torchwork take the "
                 "validation images from train/), or move the class folders directly into the folder, without "
                 "train/, so that torchwork plans every split") if given else ""
    add = {split: f"add {split} images of these classes ({folder}<class>/), or remove their folders"
           for split, folder in (("test", "test/"), ("validation", "val/"))}
    return split_findings(plan, Layout("image", planned=not given, add=add, empty_fix=empty_fix))


def _lost_classes(audit: _Audit, plan: Any) -> Finding | None:
    """``class-left-out`` (warning): classes whose every readable image is a copy of another class's image
    whose classes tie, so that no image is left to learn them from."""
    kept = set(split_classes(plan))
    lost = sorted({audit.data.labels[i] for i in audit.readable} - kept)
    if not lost:
        return None
    return finding(
        "class-left-out", "warning", len(lost), [{"class": c, "reason": "every image is a copy of another "
                                                 "class's image (conflicting-labels)"} for c in lost],
        "keep each image in the one class folder it belongs to (see conflicting-labels), or remove these folders",
        f"{len(lost)} class(es) have no image left once the copies in other class folders are dropped, and will "
        "not be in the model: " + ", ".join(repr(c) for c in lost[:10]))


def _source(audit: _Audit, plan: Any) -> dict[str, Any]:
    data = audit.data
    listing = "\n".join(f"{row}\t{f.sha256}" for row, f in sorted(zip(data.rows, audit.facts)))
    digest = hashlib.sha256(listing.encode("utf-8", "surrogateescape")).hexdigest()
    return {"folder": str(data.folder), "layout": data.layout, "fingerprint": "sha256:" + digest,
            "files": len(data.rows),
            "images": len(audit.readable), "classes": list(data.classes), "dropped": plan.dropped}


@dataclasses.dataclass(frozen=True)
class AuditedImages:
    """The data report of an image folder, and what training needs of it: the split plan (its indices are
    positions in ``readable``) and the index into the folder's ``paths`` of each readable image."""

    report: DataReport
    plan: Any  # torchwork.data.splits.SplitPlan
    readable: list[int]

    def split_paths(self, data: ImageFolderData, name: str) -> tuple[list[Path], list[str], list[str]]:
        """The paths, rows and (training) labels of split ``name``; rows and labels in :func:`printable` form."""
        chosen = [self.readable[j] for j in self.plan.indices[name]]
        labels = [self.plan.labels[j] for j in self.plan.indices[name]]
        return [data.paths[i] for i in chosen], [printable(data.rows[i]) for i in chosen], labels


def audit_images(data: ImageFolderData, *, seed: int = 0, max_bytes: int = MAX_BYTES,
                 max_pixels: int | None = None, progress: Callable[[int, int], Any] | None = None) -> DataReport:
    """The data report of the image folder ``data`` (see the module for the kinds), with the images of each
    split (the folder's train/ val/ test/, else a seeded grouped split) and where the images came from.

    Every file is read once (a regular file of at most ``max_bytes``) and decoded once; ``progress(done,
    total)`` is called every 1000 files.
    """
    return audit_and_plan(data, seed=seed, max_bytes=max_bytes, max_pixels=max_pixels, progress=progress).report


def audit_and_plan(data: ImageFolderData, *, seed: int = 0, max_bytes: int = MAX_BYTES,
                   max_pixels: int | None = None, progress: Callable[[int, int], Any] | None = None
                   ) -> AuditedImages:
    """:func:`audit_images`'s report with its split plan: near copies never straddle two splits."""
    from torchwork.data.audit import class_findings

    max_bytes, max_pixels = check_limits(max_bytes, max_pixels)
    check_seed(seed)
    if progress is not None and not callable(progress):
        raise ConfigError(f"progress={quote_value(progress)} must be a function of (done, total), or None.")
    facts = []
    for done, path in enumerate(data.paths, 1):
        facts.append(inspect_image(path, max_bytes=max_bytes, max_pixels=max_pixels))
        if progress is not None and (done % 1000 == 0 or done == len(data.paths)):
            progress(done, len(data.paths))
    runs = {printable(row) for row in run_folders(data.folder, data.empty_classes)}
    data = _printable_names(data)  # the paths still read the files
    audit = _Audit(data, facts, duplicate_groups(facts))
    labels = [data.labels[i] for i in audit.readable]
    if len(set(labels)) < 2:
        raise DataError(f"{data.folder}: fewer than 2 classes hold a readable image (of {len(data.rows):,} image "
                        "files, " + f"{len(labels):,} can be decoded). Replace the damaged files.")
    found: list[Finding | None] = [
        _corrupt(audit), *_listing_findings(data, _unreadable_classes(audit), runs), *_duplicates(audit),
        _untrained_classes(audit), _class_variants(data), _odd_sizes(audit), _grayscale(audit),
        *class_findings(labels, unit="images"),
    ]
    plan = _plan(audit, seed)
    found += [*_unscored(audit, plan), _lost_classes(audit, plan)]
    return AuditedImages(DataReport([f for f in found if f is not None], plan.counts(), _source(audit, plan)), plan,
                         audit.readable)
