"""One image file inspected for the data report: read once with bounds, checked by Pillow, decoded once into
the facts the audit compares (its bytes' hash, size, mode, grayness, difference hash and thumbnail), or the
problem that stops it (truncated, undecodable, a decompression bomb). Never an exception for a bad file.

Example:
    >>> import pathlib, tempfile
    >>> from PIL import Image
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "ramp.png"
    >>> Image.linear_gradient("L").save(path)
    >>> facts = inspect_image(path)
    >>> facts.describe(), facts.gray, facts.problem
    ('256x256 L', True, None)
"""

from __future__ import annotations

import dataclasses
import hashlib
import io
import struct
import warnings
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.data.image_decode import MAX_IMAGE_BYTES, bomb_detail, eight_bit, pillow_detail
from torchwork.data.tables_detect import MAX_READ_BYTES, read_regular_file
from torchwork.errors import DataError
from torchwork.finite import check_count

# The formats the folder's extensions name: Pillow is never asked to try others (EPS would run Ghostscript).
FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF")
DEFAULT_MAX_PIXELS = 89_478_485  # Pillow's MAX_IMAGE_PIXELS: a larger header is a decompression bomb
MAX_BYTES = MAX_IMAGE_BYTES  # what training reads is what the served artifact takes (image_decode)
# The largest max_pixels a caller may set: 2**34 pixels (17 gigapixels) decode to 51 GB as RGB, past what one
# image of a training set may take.
MAX_PIXELS_LIMIT = 2**34
DRAFT = 128  # a JPEG is decoded at the smallest scale that keeps both sides at least this long
THUMB = 16
GRAY_SPREAD = 10  # a pixel whose channels differ by at most this much is gray


@dataclasses.dataclass(frozen=True)
class ImageFacts:
    """What one file is: its bytes' hash, its size and mode, whether its content is gray, its difference
    hash and 16x16 grayscale thumbnail; or the problem (``truncated``, ...) and what Pillow said."""

    sha256: str
    width: int = 0
    height: int = 0
    mode: str = ""
    gray: bool = False
    dhash: int = 0
    thumb: bytes = b""
    problem: str | None = None
    detail: str = ""

    def describe(self) -> str:
        return f"{self.width}x{self.height} {self.mode}" if self.problem is None else f"{self.problem}: {self.detail}"


def dhash(image: Any) -> int:
    """The 64-bit difference hash of a Pillow image: grayscale, resized to 9x8, one bit per pair of
    horizontal neighbours (1 where the left one is brighter), row by row.

    Example:
        >>> from PIL import Image
        >>> ramp = Image.linear_gradient("L").rotate(90)  # dark on the left, bright on the right
        >>> f"{dhash(ramp):016x}", f"{dhash(ramp.transpose(Image.Transpose.FLIP_LEFT_RIGHT)):016x}"
        ('0000000000000000', 'ffffffffffffffff')
    """
    from PIL import Image

    small = np.asarray(image.convert("L").resize((9, 8), Image.Resampling.LANCZOS), dtype=np.int16)
    return int.from_bytes(np.packbits(small[:, :-1] > small[:, 1:]).tobytes(), "big")


def _is_gray(image: Any) -> bool:
    from PIL import Image

    if image.mode in ("1", "L", "LA", "I", "F") or image.mode.startswith("I;"):
        return True
    rgb = np.asarray(image.convert("RGB").resize((32, 32), Image.Resampling.BOX), dtype=np.int16)
    spread = rgb.max(axis=2) - rgb.min(axis=2)
    return float(np.percentile(spread, 99)) <= GRAY_SPREAD


def _formats() -> list[str]:
    """:data:`FORMATS`, less those this Pillow was built without."""
    from PIL import Image

    Image.init()
    return [name for name in FORMATS if name in Image.OPEN]


def _decoded(sha: str, data: bytes, max_pixels: int) -> ImageFacts:
    from PIL import Image

    formats = _formats()
    with Image.open(io.BytesIO(data), formats=formats) as image:
        width, height = image.size
        if width * height > max_pixels:
            return ImageFacts(sha, width, height, image.mode, problem="decompression bomb",
                              detail=f"the header says {width}x{height} pixels, over {max_pixels:,}; not decoded")
        image.verify()  # checksums and structure, without decoding
    with Image.open(io.BytesIO(data), formats=formats) as image:
        mode = image.mode
        image.draft("RGB", (DRAFT, DRAFT))
        image.load()  # a real decode: verify() does not see a truncated pixel stream in every format
        gray_image = eight_bit(image).convert("L")  # a 16-bit scan's hash, not its saturated white
        thumb = gray_image.resize((THUMB, THUMB), Image.Resampling.BOX).tobytes()
        return ImageFacts(sha, width, height, mode, _is_gray(image), dhash(gray_image), thumb)


def check_limits(max_bytes: int, max_pixels: int | None) -> tuple[int, int | None]:
    """``(max_bytes, max_pixels)`` as ints when each is a count (``max_pixels`` may be None for Pillow's
    limit), else a ConfigError before any file is read."""
    max_bytes = check_count(max_bytes, "max_bytes", 1, MAX_READ_BYTES,
                            " (the largest image file read, in bytes; 2**40: each file is held in memory)")
    if max_pixels is not None:
        max_pixels = check_count(max_pixels, "max_pixels", 1, MAX_PIXELS_LIMIT,
                                 " (the most pixels an image may decode to; 2**34), or None for Pillow's limit")
    return max_bytes, max_pixels


def inspect_image(path: str | Path, *, max_bytes: int = MAX_BYTES, max_pixels: int | None = None) -> ImageFacts:
    """The :class:`ImageFacts` of the image file ``path``: read once (a regular file of at most
    ``max_bytes``), checked with Pillow's ``verify()`` and decoded once; a file that fails is an
    ``ImageFacts`` with a ``problem``, never an exception.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "x.png"
        >>> _ = path.write_bytes(b"\\x89PNG\\r\\n\\x1a\\n" + b"\\x00" * 20)
        >>> inspect_image(path).problem
        'undecodable'
    """
    from PIL import Image

    max_bytes, max_pixels = check_limits(max_bytes, max_pixels)
    try:
        data = read_regular_file(Path(path), max_bytes)
    except DataError as error:
        return ImageFacts("", problem="unreadable file", detail=str(error))
    sha = hashlib.sha256(data).hexdigest()
    if not data:
        return ImageFacts(sha, problem="empty file", detail="0 bytes")
    limit = max_pixels or Image.MAX_IMAGE_PIXELS or DEFAULT_MAX_PIXELS
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # bomb warnings (checked above) and palette-transparency notes
            return _decoded(sha, data, int(limit))
    except Image.DecompressionBombError as error:
        return ImageFacts(sha, problem="decompression bomb", detail=bomb_detail(error, int(limit)))
    except (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, TypeError,
            ZeroDivisionError, MemoryError) as error:  # what Pillow's decoders raise on damaged files
        truncated = "truncated" in str(error) or isinstance(error, EOFError)
        return ImageFacts(sha, problem="truncated" if truncated else "undecodable",
                          detail=f"{type(error).__name__}: {pillow_detail(error)}")
