"""The first stage of ``torchwork fit PHOTOS/``: read the image folder, write nothing, audit it (the data
report: errors stop here, before any training), plan splits in which near copies never straddle two splits
(:func:`torchwork.data.image_audit.audit_and_plan`), and decode each split's images once to ``size`` x
``size`` RGB (:func:`torchwork.data.image_decode.decode_image`).

Example:
    >>> import pathlib, tempfile
    >>> import numpy as np
    >>> from PIL import Image
    >>> root = pathlib.Path(tempfile.mkdtemp())
    >>> rng = np.random.default_rng(0)
    >>> for label in ("cat", "dog"):
    ...     (root / label).mkdir()
    ...     for i in range(10):
    ...         Image.fromarray(rng.integers(0, 255, (12, 16, 3), dtype=np.uint8)).save(root / label / f"{i}.png")
    >>> data = load_image_folder(root, size=8, say=lambda line: None)
    >>> data.classes, {name: split.images.shape for name, split in data.splits.items()}["train"]
    (['cat', 'dog'], (16, 8, 8, 3))
"""

from __future__ import annotations

import dataclasses
import os
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.data.findings import DataReport
from torchwork.errors import DataError


@dataclasses.dataclass
class ImageSplit:
    """One split's decoded images ``(N, size, size, 3)`` uint8, class ids and rows (paths in the folder)."""

    images: np.ndarray
    labels: np.ndarray
    rows: list[str]

    def dataset(self) -> Any:
        """A dataset of ``(float image (3, size, size) in [0, 1], class id)``; the split stays uint8 in memory
        (a quarter of float32's)."""
        return _Images(self.images, self.labels)

    def tensor(self) -> Any:
        """All the images as one float ``(N, 3, size, size)`` tensor in [0, 1]."""
        import torch

        return torch.from_numpy(self.images).permute(0, 3, 1, 2).float().div(255.0)


class _Images:
    def __init__(self, images: np.ndarray, labels: np.ndarray) -> None:
        import torch

        self.images, self.labels = torch.from_numpy(images).permute(0, 3, 1, 2), torch.from_numpy(labels)

    def __getitem__(self, index: int) -> tuple[Any, Any]:
        return self.images[index].float().div(255.0), self.labels[index]

    def __len__(self) -> int:
        return len(self.labels)


@dataclasses.dataclass
class ImageFitData:
    """The folder's data report, classes and decoded splits."""

    folder: Path
    report: DataReport
    classes: list[str]
    splits: dict[str, ImageSplit]
    size: int


def blocking(report: DataReport) -> list[str]:
    """The report's error findings, one line each: training does not start past them."""
    return [f"{f.kind}: {f.summary}; fix: {f.fix}" for f in report.errors]


def _decode_split(paths: list[Path], size: int, say: Callable[[str], Any]) -> np.ndarray:
    from torchwork.data.image_audit import MAX_BYTES
    from torchwork.data.image_decode import decode_image
    from torchwork.data.tables_detect import read_regular_file

    images = np.empty((len(paths), size, size, 3), dtype=np.uint8)
    for index, path in enumerate(paths):
        images[index] = decode_image(read_regular_file(path, MAX_BYTES), size, max_bytes=MAX_BYTES)
        if (index + 1) % 10_000 == 0:
            say(f"  decoded {index + 1:,} of {len(paths):,} images")
    return images


def load_image_folder(folder: str | os.PathLike[str], *, size: int = 64, seed: int = 0,
                      say: Callable[[str], Any] = print) -> ImageFitData:
    """Read, audit and split ``folder``, print the data report, and decode the splits (see the module); a
    DataError, before any file is written, for a folder training must not go on with."""
    from torchwork.data.image_audit import audit_and_plan
    from torchwork.data.image_folder import read_image_folder

    data = read_image_folder(folder)
    say(f"image folder {data.folder}: {len(data.rows):,} image files in {len(data.classes)} classes "
        f"({data.layout})")
    audited = audit_and_plan(data, seed=seed, progress=lambda done, total: say(f"  read {done:,} of {total:,} images"))
    for line in audited.report.lines():
        say(line)
    errors = blocking(audited.report)
    if errors:
        raise DataError(f"{folder}: the data report found {len(errors)} error(s); nothing was trained. "
                        + " | ".join(errors))
    classes = sorted(set(audited.plan.labels[j] for part in audited.plan.indices.values() for j in part))
    empty = [name for name in ("train", "validation", "test") if not audited.plan.indices[name]]
    if empty:  # the report's empty-split error stops first: this guards the splits fit_images needs
        raise DataError(f"{folder}: the {' and '.join(empty)} split(s) hold no image; see the data report's "
                        "empty-split finding for what to add.")
    splits = {}
    for name in ("train", "validation", "test"):
        paths, rows, labels = audited.split_paths(data, name)
        ids = np.array([classes.index(label) for label in labels], dtype=np.int64)
        splits[name] = ImageSplit(_decode_split(paths, size, say), ids, rows)
    return ImageFitData(data.folder, audited.report, classes, splits, size)
