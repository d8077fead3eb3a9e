"""Read a user's image folder: one sub-folder per class (``PHOTOS/cat/x.jpg``), optionally below ``train/``,
``val/`` (or ``validation/``) and ``test/`` (``PHOTOS/train/cat/x.jpg``), without decoding any image.

What is listed and what is only reported:

- image files by extension (``.jpg .jpeg .png .bmp .gif .webp .tif .tiff``, any case) inside a class folder,
  at any depth below it; each is a row whose id is its path relative to the folder (``train/cat/x.jpg``);
- hidden entries (a name starting with ``.``, or ``__MACOSX``): never a class, never read; reported
  (torchvision's ``ImageFolder`` takes ``.ipynb_checkpoints`` for a class: torchvision issue #2831);
- other files: reported as not images; class folders without an image file: reported as empty (where
  ``ImageFolder`` raises, torchvision issue #4925);
- links leading outside the folder, broken links, FIFOs, sockets and devices: skipped and reported; a link
  inside the folder is followed, but a link to a folder only once every real folder is read: a class
  folder is read under its own name, not a link's, and a folder already read is not read twice (the link
  is reported, naming where it leads).

A folder no classifier can be trained on (missing, a file, no class folder, a single class) is a
:class:`~torchwork.errors.DataError` saying what to do. Decoding, hashing and every check of the pixels are
:func:`torchwork.data.image_audit.audit_images`'s.

Example:
    >>> import pathlib, tempfile
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> for row in ["cat/a.png", "cat/b.jpg", "dog/c.png", "dog/notes.txt", ".ipynb_checkpoints/d.png"]:
    ...     (root / row).parent.mkdir(parents=True, exist_ok=True)
    ...     _ = (root / row).write_bytes(b"")
    >>> data = read_image_folder(root)
    >>> data.rows, data.labels, data.classes, data.splits
    (['cat/a.png', 'cat/b.jpg', 'dog/c.png'], ['cat', 'cat', 'dog'], ['cat', 'dog'], None)
    >>> data.hidden, data.not_images
    (['.ipynb_checkpoints'], ['dog/notes.txt'])
"""

from __future__ import annotations

import dataclasses
import functools
import os
import stat
from collections import Counter, deque
from collections.abc import Callable
from pathlib import Path

from torchwork.errors import DataError
from torchwork.finite import check_count

IMAGE_EXTENSIONS = frozenset({".jpg", ".jpeg", ".png", ".bmp", ".gif", ".webp", ".tif", ".tiff"})
SPLIT_FOLDERS = {"train": "train", "val": "validation", "valid": "validation", "validation": "validation",
                 "test": "test"}
HIDDEN_NAMES = frozenset({"__MACOSX"})
LAYOUT = "put each class's images in a sub-folder named after the class (PHOTOS/cat/x.jpg), optionally below " \
         "train/, val/ and test/ (PHOTOS/train/cat/x.jpg)"


@dataclasses.dataclass
class ImageFolderData:
    """The image files of a folder, each with its row id (path relative to the folder), class and split,
    and every entry left out, by reason."""

    folder: Path
    paths: list[Path]
    rows: list[str]
    labels: list[str]
    splits: list[str] | None  # None: no train/ val/ test/ folders
    classes: list[str]  # every class folder's name, sorted (empty ones included)
    empty_classes: list[str] = dataclasses.field(default_factory=list)  # rows of class folders without images
    hidden: list[str] = dataclasses.field(default_factory=list)
    not_images: list[str] = dataclasses.field(default_factory=list)
    skipped: list[tuple[str, str]] = dataclasses.field(default_factory=list)  # (row, why)

    @property
    def layout(self) -> str:
        return "class folders" if self.splits is None else "split folders"


def is_hidden(name: str) -> bool:
    """True for a name the folder reader never takes for a class or an image (``.x``, ``__MACOSX``).

    Example:
        >>> is_hidden(".DS_Store"), is_hidden("__MACOSX"), is_hidden("cat")
        (True, True, False)
    """
    return name.startswith(".") or name in HIDDEN_NAMES


@dataclasses.dataclass(frozen=True)
class _Class:
    """A class folder being read: its row, its class and its split."""

    row: str
    label: str
    split: str | None


@dataclasses.dataclass
class _Walk:
    """What reading a folder has found so far. A link to a folder is read only after every real folder, so
    that a real folder is read under its own name, whatever the names of the links to it."""

    root: Path
    real_root: str
    max_files: int
    max_depth: int
    data: ImageFolderData
    seen_dirs: dict[str, str] = dataclasses.field(default_factory=dict)  # real path: the row it was read as
    links: deque[tuple[Path, str, Callable[[], object]]] = dataclasses.field(default_factory=deque)
    class_rows: list[str] = dataclasses.field(default_factory=list)
    images: Counter[str] = dataclasses.field(default_factory=Counter)  # class folder row: image files read

    def entries(self, folder: Path, rel: str) -> list[tuple[str, str, Path]]:
        """``(kind, row, path)`` of each entry of ``folder``, sorted by name: kind ``dir``, ``link`` (to a
        folder inside the folder) or ``file``; hidden entries, links out of the folder and special files are
        recorded and left out."""
        out = []
        try:
            names = sorted(os.listdir(folder))
        except OSError as error:
            self.data.skipped.append((rel or ".", f"cannot be listed ({error.strerror})"))
            return []
        for name in names:
            row = f"{rel}/{name}" if rel else name
            if is_hidden(name):
                self.data.hidden.append(row)
                continue
            kind = self.kind(folder / name, row)
            if kind is not None:
                out.append((kind, row, folder / name))
        return out

    def kind(self, path: Path, row: str) -> str | None:
        try:
            info = os.lstat(path)
            link = stat.S_ISLNK(info.st_mode)
            if link:
                target = os.path.realpath(path)
                if os.path.commonpath([target, self.real_root]) != self.real_root:
                    self.data.skipped.append((row, f"a link leading outside the folder (to {target})"))
                    return None
                info = os.stat(path)
        except FileNotFoundError:
            self.data.skipped.append((row, f"a broken link (to {os.readlink(path)})"))
            return None
        except OSError as error:
            self.data.skipped.append((row, f"cannot be read ({error.strerror})"))
            return None
        if stat.S_ISDIR(info.st_mode):
            return "link" if link else "dir"
        if stat.S_ISREG(info.st_mode):
            return "file"
        special = ((stat.S_ISFIFO, "a FIFO (named pipe)"), (stat.S_ISSOCK, "a socket"),
                   (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"))
        what = next((name for test, name in special if test(info.st_mode)), "not a regular file")
        self.data.skipped.append((row, what))
        return None

    def visit(self, path: Path, row: str, read: Callable[[], object], link: bool) -> None:
        """``read()`` the folder ``path`` now, or, for a link, once every real folder is read."""
        if link:
            self.links.append((path, row, read))
        elif self.first_visit(path, row):
            read()

    def follow_links(self) -> None:
        """Read the folders the links lead to that no real folder (nor earlier link) has read."""
        while self.links:
            path, row, read = self.links.popleft()
            if self.first_visit(path, row):
                read()

    def first_visit(self, path: Path, row: str) -> bool:
        real = os.path.realpath(path)
        if real in self.seen_dirs:
            target = os.path.relpath(real, self.real_root)
            where = "the folder itself" if target == "." else repr(target)
            read_as = self.seen_dirs[real]
            also = f" (as {read_as!r})" if read_as not in (target, ".") else ""
            self.data.skipped.append((row, f"a link to {where}, a folder already read{also}: not read twice"))
            return False
        self.seen_dirs[real] = row or "."
        return True

    def class_folder(self, path: Path, row: str, cls: _Class, depth: int = 0) -> None:
        """Record the images below a class folder (``depth`` levels below ``cls``'s own folder)."""
        for kind, child, child_path in self.entries(path, row):
            if kind == "file":
                if child_path.suffix.lower() in IMAGE_EXTENSIONS:
                    self.add(child_path, child, cls)
                else:
                    self.data.not_images.append(child)
            elif depth + 1 > self.max_depth:
                self.data.skipped.append((child, f"deeper than {self.max_depth} folders below its class"))
            else:
                self.visit(child_path, child, functools.partial(self.class_folder, child_path, child, cls, depth + 1),
                           kind == "link")

    def add(self, path: Path, row: str, cls: _Class) -> None:
        if len(self.data.paths) >= self.max_files:
            raise DataError(f"{self.root} holds more than {self.max_files:,} image files (max_files). Check the "
                            "size of the folder, or raise max_files if it is right.")
        self.data.paths.append(path)
        self.data.rows.append(row)
        self.data.labels.append(cls.label)
        self.images[cls.row] += 1
        if self.data.splits is not None:
            self.data.splits.append(cls.split or "train")

    def classes_below(self, folder: Path, rel: str, split: str | None) -> None:
        """Read the class folders of ``folder`` (the root, or a split folder)."""
        for kind, row, path in self.entries(folder, rel):
            if kind == "file":
                if path.suffix.lower() in IMAGE_EXTENSIONS:
                    self.data.skipped.append((row, "an image outside any class folder has no class: move it "
                                                   "into one"))
                else:
                    self.data.not_images.append(row)
                continue
            self.visit(path, row, functools.partial(self.a_class, path, _Class(row, path.name, split)),
                       kind == "link")

    def a_class(self, path: Path, cls: _Class) -> None:
        self.class_rows.append(cls.row)
        self.class_folder(path, cls.row, cls)

    def finish(self) -> None:
        """Follow the links, then record the classes and the class folders without an image file."""
        self.follow_links()
        self.data.classes = sorted({Path(row).name for row in self.class_rows})
        self.data.empty_classes = [row for row in self.class_rows if not self.images[row]]


def _split_folders(root: Path) -> dict[str, list[str]]:
    """``{split: [folder names]}`` of the split folders directly below ``root``."""
    found: dict[str, list[str]] = {}
    for name in sorted(os.listdir(root)):
        split = SPLIT_FOLDERS.get(name.casefold())
        if split and (root / name).is_dir():
            found.setdefault(split, []).append(name)
    return found


# Every image's path and row are held in memory (a few hundred bytes each): 10**9 files (the recipes' MAX_ROWS)
# is already past most machines' memory.
MAX_FILES = 10**9
# Each folder level below a class is one recursive call: 256 is far deeper than any photo collection and well
# within Python's recursion limit (1000).
MAX_DEPTH = 256


def read_image_folder(folder: str | os.PathLike[str], *, max_files: int = 2_000_000,
                      max_depth: int = 16) -> ImageFolderData:
    """The image files of ``folder`` (see the module): their paths, rows, classes and splits, and every
    entry left out; a DataError, before any image is read, for a folder no classifier can learn from.
    ``max_files`` (at most 10**9) and ``max_depth`` (0: images directly in the class folders; at most 256)
    are refused with a ConfigError before the folder is looked at."""
    max_files = check_count(max_files, "max_files", 1, MAX_FILES, " (image files read at most)")
    max_depth = check_count(max_depth, "max_depth", 0, MAX_DEPTH,
                            " (folder levels read below a class folder; 0 reads only the class folder itself)")
    root = Path(folder)
    if not root.exists():
        raise DataError(f"{root}: no such folder (relative paths start at {Path.cwd()}). Check the path.")
    if not root.is_dir():
        raise DataError(f"{root} is a file, not a folder. torchwork data check reads a text table file or an "
                        f"image folder: {LAYOUT}.")
    splits = _split_folders(root)
    data = ImageFolderData(root, [], [], [], [] if splits else None, [])
    walk = _Walk(root, os.path.realpath(root), max_files, max_depth, data)
    walk.seen_dirs[walk.real_root] = "."
    if not splits:
        walk.classes_below(root, "", None)
    elif "train" not in splits:
        raise DataError(f"{root} has {', '.join(n + '/' for names in splits.values() for n in names)} but no "
                        "train/ folder. Add train/ with one sub-folder per class, or put the class folders "
                        "directly in the folder (a split is then planned).")
    else:
        for kind, row, path in walk.entries(root, ""):
            split = SPLIT_FOLDERS.get(path.name.casefold()) if kind != "file" else None
            if split is None:
                data.skipped.append((row, "outside train/, val/ and test/: not read"))
            else:
                walk.visit(path, row, functools.partial(walk.classes_below, path, row, split), kind == "link")
    walk.finish()
    _require_classes(root, data)
    return data


def _require_classes(root: Path, data: ImageFolderData) -> None:
    if not data.classes:
        from torchwork.data.tables_detect import FORMATS

        if root.suffix.lower() in FORMATS:  # x.csv/ a folder: a file was meant, not an image folder
            raise DataError(f"{root} is a folder, not a file: give the path of your {root.suffix} file itself "
                            "(or, for images, a folder with one sub-folder per class).")
        raise DataError(f"{root} has no class sub-folders (hidden ones are not classes). To train a classifier, "
                        f"{LAYOUT}.")
    with_images = sorted(set(data.labels))
    if len(with_images) < 2:
        which = f"only the class folder {with_images[0]!r} holds" if with_images else "no class folder holds"
        raise DataError(f"{root}: {which} image files ({', '.join(sorted(IMAGE_EXTENSIONS))}); a classifier "
                        f"needs at least 2 classes. {LAYOUT[0].upper() + LAYOUT[1:]}.")
