"""Encoded image bytes (PNG, JPEG, ...) -> a fixed-size RGB array, bounded: what ``torchwork fit PHOTOS/``
trains on and what its artifact's preprocessing does to each image a request sends.

A file or request item is read as data with bounds: at most ``max_bytes`` bytes, and a header claiming more
than ``max_pixels`` pixels (a decompression bomb: a 30,000 x 30,000 PNG is a few kilobytes) is refused
before any pixel is decoded. Only the formats the folder reader lists are tried (Pillow never guesses
another one). Every image is converted to RGB (grey, palette and alpha images included) and resized to
``size`` x ``size``: a JPEG is first decoded at the smallest scale Pillow's draft mode allows.

:class:`ImagePreprocessor` is the artifact's preprocessing: it turns encoded images, base64 text of them, or
already-decoded ``(size, size, 3)`` uint8 arrays into the model's float input ``(N, 3, size, size)`` in
[0, 1], and saves and loads itself as JSON.

Example:
    >>> import io
    >>> from PIL import Image
    >>> buffer = io.BytesIO()
    >>> Image.new("L", (40, 20), 200).save(buffer, format="PNG")
    >>> decode_image(buffer.getvalue(), 8).shape
    (8, 8, 3)
    >>> pre = ImagePreprocessor(8)
    >>> pre([buffer.getvalue()]).shape
    torch.Size([1, 3, 8, 8])
    >>> try:
    ...     decode_image(b"not an image", 8)
    ... except DataError as error:
    ...     print(error)
    not an image Pillow can decode (JPEG, PNG, BMP, GIF, WEBP or TIFF): cannot identify image file
"""

from __future__ import annotations

import base64
import binascii
import io
import json
import os
import struct
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.errors import DataError

MAX_IMAGE_BYTES = 16 * 2**20  # one encoded image, in a request or a file
MAX_PIXELS = 89_478_485  # Pillow's MAX_IMAGE_PIXELS: a header claiming more is a decompression bomb
PREPROCESS_FILE = "image.json"
_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF")
_PILLOW_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, TypeError,
                  ZeroDivisionError)


def _formats() -> list[str]:
    from PIL import Image

    Image.init()
    return [name for name in _FORMATS if name in Image.OPEN]


def decode_image(data: bytes, size: int, *, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_PIXELS
                 ) -> np.ndarray:
    """``data`` (an encoded image) as a ``(size, size, 3)`` uint8 RGB array; :class:`DataError` for
    empty, oversized, undecodable or truncated data and for a header over ``max_pixels`` pixels."""
    from PIL import Image

    if not data:
        raise DataError("an empty image (0 bytes): send the image file's bytes")
    if len(data) > max_bytes:
        raise DataError(f"an image of {len(data):,} bytes, over the bound of {max_bytes:,}: send a smaller "
                               "(resized or recompressed) image")
    formats = _formats()
    try:
        with warnings.catch_warnings():
            warnings.simplefilter("ignore")  # Pillow's bomb warning (checked here) and palette notes
            with Image.open(io.BytesIO(data), formats=formats) as image:
                width, height = image.size
                if width * height > max_pixels:
                    raise DataError(f"a decompression bomb: the header says {width}x{height} pixels, over "
                                           f"{max_pixels:,}; not decoded. Resize the image")
                image.draft("RGB", (size, size))
                rgb = image.convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
                return np.asarray(rgb, dtype=np.uint8)
    except DataError:
        raise
    except Image.DecompressionBombError as error:
        raise DataError(f"a decompression bomb: the header claims more than {max_pixels:,} pixels "
                               f"(Pillow: {str(error).split(',')[0]}); not decoded. Resize the image") from None
    except MemoryError:
        raise DataError("an image too large to decode in memory: resize it") from None
    except _PILLOW_ERRORS as error:
        names = ", ".join(formats[:-1]) + f" or {formats[-1]}"
        detail = str(error).split(" <")[0]  # Pillow names the BytesIO object: not useful to anyone
        raise DataError(f"not an image Pillow can decode ({names}): {detail}") from None


def _from_text(text: str) -> bytes:
    try:
        return base64.b64decode(text, validate=True)
    except (binascii.Error, ValueError):
        raise DataError("not base64 text: send each image's file bytes base64-encoded "
                               "(base64.b64encode(open(path, 'rb').read()).decode())") from None


class ImagePreprocessor:
    """Images -> ``(N, 3, size, size)`` float32 in [0, 1]. An item is the encoded image's bytes, its base64
    text, or an already-decoded ``(size, size, 3)`` uint8 array; a 4-D uint8 array or tensor is a batch of
    decoded ones."""

    kind = "image"  # what torchwork serve reads to take image items

    def __init__(self, size: int, max_bytes: int = MAX_IMAGE_BYTES, max_pixels: int = MAX_PIXELS) -> None:
        if size < 8:
            raise DataError(f"size={size}: images are resized to size x size pixels; use at least 8.")
        self.size, self.max_bytes, self.max_pixels = int(size), int(max_bytes), int(max_pixels)

    def decode(self, item: Any) -> np.ndarray:
        """One item as a ``(size, size, 3)`` uint8 array (see the class)."""
        if isinstance(item, (bytes, bytearray, memoryview)):
            return decode_image(bytes(item), self.size, max_bytes=self.max_bytes, max_pixels=self.max_pixels)
        if isinstance(item, str):
            if len(item) > self.max_bytes * 4 // 3 + 4:
                raise DataError(f"base64 text of {len(item):,} characters: the image is over the bound "
                                       f"of {self.max_bytes:,} bytes; send a smaller image")
            return self.decode(_from_text(item))
        array = np.asarray(item)
        if array.shape != (self.size, self.size, 3) or array.dtype != np.uint8:
            raise DataError(f"an array of shape {array.shape} ({array.dtype}): a decoded image is "
                                   f"({self.size}, {self.size}, 3) uint8; or send the encoded image's bytes")
        return array

    def decoded(self, items: Any) -> np.ndarray:
        """The items as one ``(N, size, size, 3)`` uint8 array."""
        if hasattr(items, "numpy") and not isinstance(items, (list, tuple)):
            items = items.numpy()
        if isinstance(items, np.ndarray) and items.ndim == 4:
            return np.stack([self.decode(row) for row in items]) if len(items) else items
        if isinstance(items, (bytes, str)):
            items = [items]
        return np.stack([self.decode(item) for item in items])

    def __call__(self, items: Sequence[Any] | Any) -> Any:
        import torch

        batch = torch.from_numpy(np.ascontiguousarray(self.decoded(items)))
        return batch.permute(0, 3, 1, 2).float().div(255.0).contiguous()

    def save(self, directory: str | os.PathLike[str]) -> None:
        from torchwork.files import write_json

        write_json(Path(directory) / PREPROCESS_FILE, {"size": self.size, "max_bytes": self.max_bytes,
                                                         "max_pixels": self.max_pixels})

    @classmethod
    def load(cls, directory: str | os.PathLike[str]) -> ImagePreprocessor:
        from torchwork.paths import read_regular

        path = Path(directory) / PREPROCESS_FILE
        try:
            data = json.loads(read_regular(path, 4096))
            return cls(int(data["size"]), int(data["max_bytes"]), int(data["max_pixels"]))
        except (OSError, ValueError, KeyError, TypeError) as error:
            raise DataError(f"{path} is not an ImagePreprocessor's settings ({error}); export the model again") \
                from None
