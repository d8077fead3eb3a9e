"""Hostile files for the C++ runner's tests, written by hand (the safetensors library refuses to write them):
safetensors files whose headers lie about their data, seeded mutations of a valid one and of an artifact's
manifest, and Python's own strict reading of a header (what the runner must have read, when it accepts a file).
"""

from __future__ import annotations

import json
import random
import struct
from pathlib import Path
from typing import Any

ELEMENT_BYTES = {"F64": 8, "F32": 4, "F16": 2, "BF16": 2, "I64": 8, "I32": 4, "I16": 2, "I8": 1, "U8": 1,
                 "BOOL": 1}
WRAP = 2**64 - 4096  # begin + the data's start wraps a 64-bit sum below the file's size


def safetensors_bytes(header: dict[str, Any] | bytes, data: bytes, length: int | None = None,
                      pad_to: int = 0) -> bytes:
    """A safetensors file: the header's length (``length`` to lie about it), the header, the data."""
    text = header if isinstance(header, bytes) else json.dumps(header).encode()
    text += b" " * max(0, pad_to - len(text))
    return struct.pack("<Q", len(text) if length is None else length) + text + data


def one_input(offsets: Any = (0, 32), shape: Any = (2, 4), dtype: Any = "F32", data: bytes = bytes(range(32)),
              **kwargs: Any) -> bytes:
    """A file of one tensor, ``input_0``: by default a valid float32 [2, 4]."""
    header = {"input_0": {"dtype": dtype, "shape": list(shape), "data_offsets": list(offsets)}}
    return safetensors_bytes(header, data, **kwargs)


# name -> (the file, what the runner's one-line refusal says)
HOSTILE_INPUTS: dict[str, tuple[bytes, str]] = {
    # the file: a 3000-byte header, so begin + 3008 wraps to 1088 bytes before the data
    "offsets that wrap a 64-bit sum": (one_input((WRAP, WRAP + 2048), (128, 4), data=bytes(64), pad_to=3000),
                                       "data_offsets that are not two whole numbers from 0 to 2^53"),
    "offsets past the end": (one_input((2**53 - 32, 2**53)), "outside the file's 32 bytes of data"),
    "a huge shape": (one_input(shape=(2**40, 2**40, 2**40)), "more elements than fit in memory"),
    "a dim over 2^53": (one_input(shape=(2**60, 0)), "has the dim 1152921504606846976 in its shape"),
    "a negative offset": (one_input((-8, 24)), "data_offsets that are not two whole numbers"),
    "a negative dim": (one_input(shape=(-2, -4)), "has the dim -2 in its shape"),
    "float offsets": (one_input((0.0, 32.0)), "data_offsets that are not two whole numbers"),
    "an exponent offset": (one_input((0, 3.2e1)), "data_offsets that are not two whole numbers"),
    "a float dim": (one_input(shape=(2.5, 4)), "has the dim 2.5 in its shape"),
    "a string dim": (one_input(shape=("2", 4)), 'has the dim "2" in its shape'),
    "offsets that end before they begin": (one_input((32, 0)), "[32, 0] that end before they begin"),
    "truncated data": (one_input(data=bytes(16)), "[0, 32] outside the file's 16 bytes of data"),
    "offsets that do not fit the shape": (one_input((0, 16)), "data_offsets of 16 bytes, but its dtype and shape "
                                                              "need 32"),
    "a header length past the end": (one_input(length=10**6), "the header length is 1000000 bytes, but the file "
                                                               "holds"),
    "a header length near 2^64": (one_input(length=2**64 - 1), "the header length is 18446744073709551615 bytes"),
    "a file shorter than its length": (b"\x01\x02\x03", "not a safetensors file (3 bytes"),
    "a number with a leading zero": (safetensors_bytes(b'{"input_0":{"dtype":"F32","shape":[02,4],'
                                                       b'"data_offsets":[0,32]}}', bytes(32)),
                                     "a number with a leading zero"),
    "an unknown dtype": (one_input(dtype="F8"), 'has the dtype "F8", not one of'),
}


def declared_slices(blob: bytes) -> dict[str, bytes]:
    """Python's strict reading of a safetensors file: {input_N: the bytes its header declares}, each checked to
    lie inside the file. Raises ValueError when the header is not what the runner may accept."""
    (length,) = struct.unpack("<Q", blob[:8])
    if length > len(blob) - 8:
        raise ValueError(f"header length {length} past the end")
    header = json.loads(blob[8:8 + length].decode("utf-8", "replace"), strict=False)
    data_start, slices = 8 + length, {}
    for name, entry in header.items():
        if not name.startswith("input_"):
            continue
        begin, end = entry["data_offsets"]
        numel = 1
        for dim in entry["shape"]:
            numel *= dim
        if not all(type(v) is int and 0 <= v <= 2**53 for v in (begin, end, *entry["shape"])):
            raise ValueError(f"{name}: offsets or dims that are not whole numbers up to 2^53")
        if not begin <= end <= len(blob) - data_start or end - begin != numel * ELEMENT_BYTES[entry["dtype"]]:
            raise ValueError(f"{name}: offsets [{begin}, {end}] outside the data or not of its shape")
        slices[name] = blob[data_start + begin:data_start + end]
    return slices


_VALUES = [0, 1, 8, 16, 24, 31, 32, 56, 64, -1, -0.0, 0.5, 1e300, 2**53, 2**53 + 1, 2**63, 2**64 - 1, 2**64,
           WRAP, 10**30, "1", None, True, [], {}]


def mutated_input(rng: random.Random) -> tuple[str, bytes]:
    """One seeded mutation of a valid two-tensor file: (what was done, the file). About a third stay valid."""
    header: dict[str, Any] = {"input_0": {"dtype": "F32", "shape": [2, 4], "data_offsets": [0, 32]},
                              "input_1": {"dtype": "I64", "shape": [3], "data_offsets": [32, 56]}}
    data, length, cut = bytes(rng.randrange(256) for _ in range(56)), None, None
    name = rng.choice(["input_0", "input_1"])
    entry = header[name]
    op = rng.randrange(9)
    if op == 0:
        entry["shape"][rng.randrange(len(entry["shape"]))] = rng.choice(_VALUES)
    elif op == 1:
        entry["data_offsets"][rng.randrange(2)] = rng.choice(_VALUES)
    elif op == 2:
        entry["dtype"] = rng.choice(["F32", "I32", "U8", "F64", "BOOL", "F8", 4, None])
    elif op == 3:
        length = rng.choice([0, 7, 8, 2**32, 2**63, 2**64 - 1, 10**6])
    elif op == 4:
        cut = rng.randrange(1, 120)
    elif op == 5:  # valid: the same bytes seen as another shape or dtype of the same size
        entry["shape"], entry["dtype"] = ([4, 2], "I32") if name == "input_0" else ([1, 3, 1], "F64")
    elif op == 6:  # valid: metadata, padding and trailing bytes
        header["__metadata__"] = {"format": "pt"}
        data += bytes(rng.randrange(1, 40))
    else:  # both offsets moved: inside the data (overlapping the other tensor), or far outside it
        shift = rng.choice([-8, 8, 16, 24, -32, 2**53 - 64, WRAP])
        entry["data_offsets"] = [v + shift for v in entry["data_offsets"]]
    blob = safetensors_bytes(header, data, length)
    if op == 8:  # a byte of the header flipped
        index = rng.randrange(8, len(blob) - len(data))
        blob = blob[:index] + bytes([rng.randrange(256)]) + blob[index + 1:]
        op_name = f"header byte {index} flipped"
    else:
        op_name = f"mutation {op} of {name}: {json.dumps(header)[:160]} length={length}"
    return op_name, blob if cut is None else blob[:cut]


_PATHS = ["../outside", "/etc/passwd", "a/../../etc/passwd", "", "cpp/../../x", "\u001b[2Jescape", "nul\u0000x",
          "./examples.safetensors", "examples.safetensors/", "missing.bin"]
_SIZES = [-1, 0, 1, 2**53 + 1, 2**64 - 1, 1e300, 104.0, "104", None, True]


def plant_special(root: Path, rng: random.Random) -> tuple[str, dict[str, Any]]:
    """A link out of ``root``, a link to a device, a FIFO, or a link inside (which the loader accepts): its name
    and a file-table entry that matches what the link leads to (so only the link check can refuse it)."""
    import hashlib
    import os

    kind = rng.choice(["passwd", "zero", "fifo", "inside"])
    path = root / f"planted-{kind}"
    if kind == "fifo":
        os.mkfifo(path)
        return path.name, {"bytes": 0, "sha256": hashlib.sha256(b"").hexdigest()}
    target = {"passwd": Path("/etc/passwd"), "zero": Path("/dev/zero"), "inside": root / "examples.safetensors"}[kind]
    os.symlink(target, path)
    content = b"" if kind == "zero" else target.read_bytes()
    return path.name, {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}


def mutated_manifest(rng: random.Random, manifest: dict[str, Any], root: Path) -> tuple[str, bytes]:
    """One seeded mutation of an artifact's manifest (the artifact copied at ``root``, where links and FIFOs may
    be planted): (what was done, the manifest's new bytes)."""
    data = json.loads(json.dumps(manifest))
    files = data["files"]
    name = rng.choice(sorted(files))
    op = rng.randrange(9)
    if op == 0:
        files[name]["bytes"] = rng.choice(_SIZES + [files[name]["bytes"] + 1])
    elif op == 1:
        sha = files[name]["sha256"]
        files[name]["sha256"] = rng.choice([sha.upper(), sha[:63], "z" * 64, 0, None, sha + "0"])
    elif op == 2:
        files[rng.choice(_PATHS)] = files.pop(name)
    elif op == 3:
        planted, entry = plant_special(root, rng)
        files[planted] = entry
    elif op == 4:
        data["torchwork_artifact"] = rng.choice([2, "1", 1.5, None, [1]])
    elif op == 5:
        data[rng.choice(["examples", "files"])] = rng.choice(["weights.safetensors", "../x", "unlisted", [], {}, 7])
    elif op == 6:
        data["variants"]["torchscript"]["file"] = rng.choice(["../x", "unlisted.pt", "manifest.json", 3])
    elif op == 7:  # valid: a field the runner does not read
        data["created_utc"] = rng.choice(["", "tomorrow", 0])
    text = json.dumps(data).encode()
    if op == 8:  # bytes of the text flipped, inserted or removed
        index = rng.randrange(len(text))
        text = rng.choice([text[:index] + bytes([rng.randrange(256)]) + text[index + 1:],
                           text[:index] + rng.choice([b"{", b"[", b"-", b"\\", b"\"", b"9" * 40]) + text[index:],
                           text[:index]])
        return f"text byte {index} changed", text
    return f"mutation {op} of {name!r}", text
