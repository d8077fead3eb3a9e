"""Encoded image bytes (PNG, JPEG, ...) -> a fixed-size RGB array, bounded: what ``torchwork fit PHOTOS/``
trains on and what its artifact's preprocessing does to each image a request sends.

A file or request item is read as data with bounds: at most ``max_bytes`` bytes, and a header claiming more
than ``max_pixels`` pixels (a decompression bomb: a 30,000 x 30,000 PNG is a few kilobytes) is refused
before any pixel is decoded. Only the formats the folder reader lists are tried (Pillow never guesses
another one). An image is first turned upright as its EXIF orientation says, 16-bit, 32-bit and float images
are brought to 8 bits (:func:`eight_bit`), then every image is converted to RGB (grey, palette and alpha images included) and resized to ``size`` x ``size``: a
JPEG is first decoded at the smallest scale Pillow's draft mode allows.

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
import re
import struct
import warnings
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import numpy as np

from torchwork.errors import DataError

# One encoded image, in a file training reads or in a request: one bound, so that every image a model was
# trained on can be sent to it served (a 20 MB scan trained but was refused at 16 MiB). A request's size is
# bounded by the server's --max-body-bytes, and the memory a decode takes by MAX_PIXELS.
MAX_IMAGE_BYTES = 256 * 2**20
MAX_PIXELS = 89_478_485  # Pillow's MAX_IMAGE_PIXELS: a header claiming more is a decompression bomb
PREPROCESS_FILE = "image.json"
_FORMATS = ("JPEG", "PNG", "BMP", "GIF", "WEBP", "TIFF")
_PILLOW_ERRORS = (OSError, SyntaxError, ValueError, EOFError, struct.error, IndexError, TypeError,
                  ZeroDivisionError)


def _formats() -> list[str]:
    from PIL import Image

    Image.init()
    return [name for name in _FORMATS if name in Image.OPEN]


def eight_bit(image: Any) -> Any:
    """``image`` as an 8-bit grey (``L``) Pillow image when its mode holds wider values, else ``image`` itself:
    Pillow's ``convert`` clips such values to 0..255, which turns a 16-bit scan white and a float image in
    [0, 1] black.

    - 16-bit (``I;16``, ``I;16B``, ``I;16L``): value / 257, the type's range (65,535 is 255);
    - 32-bit integers (``I``): as they are when they lie in 0..255, / 257 when in 0..65,535 (Pillow reads
      some 16-bit greys, and TIFF writers store 8- and 16-bit ones, in this mode: the type's own range
      would turn every real picture black), else scaled from the image's own minimum (0) to maximum (255);
    - float (``F``): x 255 when the values lie in [0, 1], the usual range of a float image, else scaled
      from its own minimum to maximum. NaN counts as the minimum, infinities as the finite extremes; an
      image of one value outside the range it is read in is black.

    Example:
        >>> from PIL import Image
        >>> wide = Image.fromarray(np.array([[0, 32896, 65535]], dtype=np.uint16))
        >>> wide.mode, np.asarray(wide.convert("L")).tolist(), np.asarray(eight_bit(wide)).tolist()
        ('I;16', [[0, 255, 255]], [[0, 128, 255]])
        >>> np.asarray(eight_bit(Image.fromarray(np.array([[0.0, 0.5, 1.0]], dtype=np.float32)))).tolist()
        [[0, 128, 255]]
    """
    from PIL import Image

    if image.mode not in ("I", "F") and not image.mode.startswith("I;16"):
        return image
    values = np.asarray(image)
    finite = np.isfinite(values)
    if not finite.any():
        return Image.new("L", image.size)
    low, high = _value_range(image.mode, values if finite.all() else values[finite])
    scaled = values.astype(np.float32)
    np.nan_to_num(scaled, copy=False, nan=low, posinf=high, neginf=low)
    scaled -= low
    scaled *= 255 / (high - low) if high > low else 0
    np.rint(np.clip(scaled, 0, 255, out=scaled), out=scaled)
    return Image.fromarray(scaled.astype(np.uint8), "L")


def _value_range(mode: str, values: np.ndarray) -> tuple[float, float]:
    """The values that :func:`eight_bit` maps to 0 and to 255 (see there)."""
    if mode.startswith("I;16"):
        return 0.0, 65535.0
    low, high = float(values.min()), float(values.max())
    usual = [(0.0, 1.0)] if mode == "F" else [(0.0, 255.0), (0.0, 65535.0)]
    return next(((a, b) for a, b in usual if a <= low and high <= b), (low, high))


def pillow_detail(error: BaseException) -> str:
    """What Pillow said, less the ``<_io.BytesIO object at 0x...>`` it names the file by: not useful to anyone.

    Example:
        >>> pillow_detail(OSError("cannot identify image file <_io.BytesIO object at 0x7f3a>"))
        'cannot identify image file'
    """
    return str(error).split(" <")[0]


def bomb_detail(error: BaseException, max_pixels: int) -> str:
    """Why Pillow's ``DecompressionBombError`` refused an image, with torchwork's bound (``max_pixels``) in
    place of Pillow's own (twice ``Image.MAX_IMAGE_PIXELS``, which is only the stricter one when
    ``max_pixels`` is larger).

    Example:
        >>> error = OSError("Image size (900000000 pixels) exceeds limit of 178956970 pixels, could be ...")
        >>> bomb_detail(error, 89_478_485)
        'the header claims more than 89,478,485 pixels (900,000,000); not decoded'
    """
    from PIL import Image

    pillow = 2 * Image.MAX_IMAGE_PIXELS if Image.MAX_IMAGE_PIXELS else max_pixels
    bound = min(max_pixels, pillow)
    claimed = re.search(r"\((\d+) pixels\)", str(error))
    said = f" ({int(claimed.group(1)):,})" if claimed else ""
    return f"the header claims more than {bound:,} pixels{said}; not decoded"


def _upright(image: Any) -> Any:
    """``image`` turned as its EXIF orientation says (a phone's portrait photo is stored sideways with a tag
    saying so; trained and served alike, since both decode here); as it is when it has no such tag, or a
    damaged one."""
    from PIL import ImageOps

    try:
        return ImageOps.exif_transpose(image)
    except (ValueError, TypeError, OSError, KeyError, SyntaxError):  # a damaged EXIF block: the pixels stand
        return image


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
                rgb = eight_bit(_upright(image)).convert("RGB").resize((size, size), Image.Resampling.BILINEAR)
                return np.asarray(rgb, dtype=np.uint8)
    except DataError:
        raise
    except Image.DecompressionBombError as error:
        raise DataError(f"a decompression bomb: {bomb_detail(error, max_pixels)}. Resize the image") from None
    except MemoryError:
        raise DataError("an image too large to decode in memory: resize it") from None
    except _PILLOW_ERRORS as error:
        names = ", ".join(formats[:-1]) + f" or {formats[-1]}"
        raise DataError(f"not an image Pillow can decode ({names}): {pillow_detail(error)}") from None


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
