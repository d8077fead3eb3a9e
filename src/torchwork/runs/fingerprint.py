"""Data fingerprints: what each split held, row by row, as the model saw it (after cleaning).

A split's fingerprint is its row count, its class counts and a SHA-256 over its rows in order; the rows
themselves are kept as a small binary file in the run folder (``data/<split>.rows``: per row an 8-byte
BLAKE2b digest of its content and its label, little-endian ``uint64`` pairs), so that ``torchwork runs
diff`` can say which rows were added, removed or relabelled, not only that something changed.

Example:
    >>> from torchwork.data import TextDataset
    >>> rows = split_rows(TextDataset(["good", "bad", "meh"], [2, 0, 1]))
    >>> summary = summarise(rows)
    >>> summary["rows"], summary["classes"]
    (3, {'0': 1, '1': 1, '2': 1})
    >>> summary == summarise(split_rows(TextDataset(["good", "bad", "meh"], [2, 0, 1])))
    True
    >>> summarise(split_rows(TextDataset(["good", "bad", "meh"], [2, 0, 0])))["sha256"] != summary["sha256"]
    True
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.errors import ConfigError
from torchwork.runs.folder_files import read_run_file

ROW_DTYPE = np.dtype("<u8")  # (content digest, label) pairs
DIGEST_BYTES = 8


def _digest(data: bytes) -> int:
    return int.from_bytes(hashlib.blake2b(data, digest_size=DIGEST_BYTES).digest(), "little")


def _labels(labels: Any) -> np.ndarray:
    return np.asarray([int(y) for y in labels], dtype=np.int64)


def _array_rows(array: np.ndarray) -> list[int]:
    flat = np.ascontiguousarray(array).reshape(len(array), -1)
    return [_digest(row.tobytes()) for row in flat]


def _tensor_numpy(value: Any) -> np.ndarray | None:
    if callable(getattr(value, "detach", None)):  # a torch.Tensor, read without importing torch here
        return value.detach().cpu().contiguous().numpy()
    return value if isinstance(value, np.ndarray) else None


def split_rows(dataset: Any) -> np.ndarray | None:
    """The ``(digest, label)`` rows of a dataset, shape (N, 2), or None when its rows cannot be read
    without loading every item (a dataset that reads files in ``__getitem__``).

    Known shapes: ``.texts`` + ``.labels`` (text datasets, already cleaned), ``.images`` + ``.labels``,
    ``TensorDataset`` (the last tensor is the label when it is 1-D integers), ``Subset`` of any of these.
    """
    indices = None
    while hasattr(dataset, "dataset") and hasattr(dataset, "indices"):  # torch.utils.data.Subset
        picked = np.asarray(dataset.indices, dtype=np.int64)
        indices = picked if indices is None else picked[indices]
        dataset = dataset.dataset
    digests: list[int] | None = None
    labels: np.ndarray | None = None
    if isinstance(getattr(dataset, "texts", None), list) and hasattr(dataset, "labels"):
        digests = [_digest(t.encode("utf-8", "surrogatepass")) for t in dataset.texts]
        labels = _labels(dataset.labels)
    elif hasattr(dataset, "images") and hasattr(dataset, "labels"):
        images = _tensor_numpy(dataset.images)
        if images is not None:
            digests = _array_rows(images)
            labels = _labels(dataset.labels)
    elif isinstance(getattr(dataset, "tensors", None), tuple) and dataset.tensors:
        converted = [_tensor_numpy(t) for t in dataset.tensors]
        arrays = [a for a in converted if a is not None]
        if len(arrays) == len(converted):
            last = arrays[-1]
            is_label = len(arrays) > 1 and last.ndim == 1 and last.dtype.kind in "iub"
            features = arrays[:-1] if is_label else arrays
            rows = [b"".join(a[i].tobytes() for a in features) for i in range(len(arrays[0]))]
            digests = [_digest(r) for r in rows]
            labels = last.astype(np.int64) if is_label else np.zeros(len(rows), np.int64)
    if digests is None or labels is None:
        return None
    if indices is not None:
        labels, digests = labels[indices], [digests[i] for i in indices]
    table = np.empty((len(digests), 2), dtype=ROW_DTYPE)
    table[:, 0] = np.asarray(digests, dtype=np.uint64)
    table[:, 1] = labels.astype(np.int64).view(np.uint64)
    return table


def summarise(rows: np.ndarray) -> dict[str, Any]:
    """Row count, class counts (label -> rows) and the SHA-256 of the rows in order."""
    labels, counts = np.unique(rows[:, 1].view(np.int64), return_counts=True)
    return {"rows": int(len(rows)), "classes": {str(int(k)): int(v) for k, v in zip(labels, counts)},
            "sha256": hashlib.sha256(rows.astype(ROW_DTYPE).tobytes()).hexdigest()}


def record_splits(run: Path, splits: Mapping[str, Any]) -> dict[str, Any]:
    """Fingerprint each named dataset (or DataLoader, through its ``.dataset``) into ``run/data/`` and
    return what the manifest records: ``{split: {rows, classes, sha256, row_file}}`` (``{rows, why}`` for a
    dataset whose rows cannot be read cheaply)."""
    from torchwork.files import atomic_write

    recorded: dict[str, Any] = {}
    for name, source in splits.items():
        if source is None:
            continue
        dataset = getattr(source, "dataset", source)
        try:
            rows = split_rows(dataset)
        except (ValueError, TypeError, IndexError) as error:  # labels that are not integers, say: never stop a run
            recorded[name] = {"rows": None, "why": f"its rows could not be read ({type(error).__name__}: {error})"[:300]}
            continue
        if rows is None:
            size = getattr(dataset, "__len__", None)  # a plain list of batches has no rows to count
            recorded[name] = {"rows": size() if callable(size) and dataset is not source else None,
                              "why": f"{type(dataset).__name__} has no .texts/.images/.tensors with .labels: "
                                     "its rows are not fingerprinted"}
            continue
        relative = f"data/{name}.rows"
        (run / "data").mkdir(exist_ok=True)
        with atomic_write(run / relative, "wb") as handle:
            handle.write(rows.tobytes())
        recorded[name] = {**summarise(rows), "row_file": relative}
    return recorded


def changed_splits(run: Path, recorded: Mapping[str, Any], splits: Mapping[str, Any]) -> list[str]:
    """How the splits about to resume ``run`` differ from the fingerprints its manifest recorded: one line
    per split whose rows changed (counts, and which rows when the run kept them); nothing for a split that
    either side could not fingerprint."""
    changed = []
    for name, source in splits.items():
        entry = recorded.get(name)
        if source is None or not isinstance(entry, Mapping) or not isinstance(entry.get("sha256"), str):
            continue
        try:
            rows = split_rows(getattr(source, "dataset", source))
        except (ValueError, TypeError, IndexError):
            continue
        if rows is None or summarise(rows)["sha256"] == entry["sha256"]:
            continue
        before = read_rows(run, entry)
        counts = compare_rows(before, rows) if before is not None else {}
        what = ", ".join(f"{n} {k}" for k, n in counts.items() if n and k != "reordered")
        what = what or ("the same rows in another order" if counts.get("reordered") else "other rows")
        changed.append(f"data: the {name} split changed since the run was recorded ({entry.get('rows')} -> "
                       f"{len(rows)} rows: {what})")
    return changed


def read_rows(run: Path, entry: Mapping[str, Any]) -> np.ndarray | None:
    """The rows a manifest's fingerprint entry names, or None when the file is missing or does not match."""
    relative, rows = entry.get("row_file"), entry.get("rows")
    if not isinstance(relative, str) or Path(relative).is_absolute() or ".." in Path(relative).parts:
        return None
    if not isinstance(rows, int) or isinstance(rows, bool) or not 0 <= rows < 2**40:
        return None
    try:  # the file must hold exactly the rows the manifest counts: read no more than that
        data = read_run_file(run, relative, rows * 2 * ROW_DTYPE.itemsize)
    except (OSError, ConfigError):
        return None
    if len(data) % (2 * ROW_DTYPE.itemsize):
        return None
    rows = np.frombuffer(data, dtype=ROW_DTYPE).reshape(-1, 2)
    return rows if len(rows) == entry.get("rows") else None


def compare_rows(a: np.ndarray, b: np.ndarray) -> dict[str, int]:
    """Rows only in A (removed), only in B (added), in both with another label (relabelled), and whether
    the same rows come in another order (``reordered``: 1 or 0)."""
    labels_a = dict(zip(a[:, 0].tolist(), a[:, 1].tolist()))
    labels_b = dict(zip(b[:, 0].tolist(), b[:, 1].tolist()))
    shared = labels_a.keys() & labels_b.keys()
    relabelled = sum(1 for key in shared if labels_a[key] != labels_b[key])
    same_set = len(shared) == len(labels_a) == len(labels_b)
    return {"removed": len(labels_a) - len(shared), "added": len(labels_b) - len(shared),
            "relabelled": relabelled,
            "reordered": int(same_set and not relabelled and not np.array_equal(a, b))}


def class_shift(a: Mapping[str, int], b: Mapping[str, int]) -> dict[str, tuple[int, int]]:
    """The classes whose row counts differ: ``{label: (rows in A, rows in B)}``."""
    return {k: (int(a.get(k, 0)), int(b.get(k, 0))) for k in sorted(set(a) | set(b), key=_label_order)
            if a.get(k, 0) != b.get(k, 0)}


def _label_order(key: str) -> tuple[int, str]:
    return (int(key), "") if key.lstrip("-").isdigit() else (0, key)

