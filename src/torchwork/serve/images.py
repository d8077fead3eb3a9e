"""Image items of a served image model (an artifact whose preprocessing is
:class:`~torchwork.data.image_decode.ImagePreprocessor`): each request item is an encoded image (PNG, JPEG,
...), decoded once while the request is validated, so that bad bytes are a 422 naming the item before
anything is queued, and the model's batch only stacks ``(size, size, 3)`` uint8 arrays.

- ``POST /predict``: ``{"inputs": ["<base64 of the image file>", ...]}``;
- ``POST /v2/models/{name}/infer``: one ``BYTES`` input named ``image`` of shape ``[N]`` (or ``[N, 1]``),
  each element an image file's bytes (in JSON as base64 text, or raw with the binary tensor extension).

Each image is bounded (:data:`~torchwork.data.image_decode.MAX_IMAGE_BYTES` bytes, and a decompression bomb is
refused from its header), on top of the server's bound on a body.

Example:
    >>> import base64, io
    >>> from PIL import Image
    >>> buffer = io.BytesIO()
    >>> Image.new("RGB", (5, 7), "red").save(buffer, format="PNG")
    >>> from torchwork.serve.schemas import Limits, request_model
    >>> Request = request_model("image", (8, 8, 3), "uint8", Limits())
    >>> Request.model_validate_json('{"inputs": ["%s"]}' % base64.b64encode(buffer.getvalue()).decode()).inputs[0].shape
    (8, 8, 3)
    >>> decoded_images([b"GIF89a"], (8, 8, 3))
    Traceback (most recent call last):
      ...
    torchwork.serve.inference_protocol.ProtocolError: input 'image' element 0: not an image Pillow can decode (JPEG, PNG, BMP, GIF, WEBP or TIFF): cannot identify image file
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Annotated, Any

from torchwork.data.image_decode import MAX_IMAGE_BYTES, ImagePreprocessor
from torchwork.errors import DataError
from torchwork.serve.inference_protocol import ProtocolError

INPUT_NAME = "image"


def _preprocessor(item_shape: Sequence[int | None]) -> ImagePreprocessor:
    size = item_shape[0] if item_shape else None
    if not isinstance(size, int):
        raise ValueError(f"item_shape={tuple(item_shape)!r}: an image model's item is (size, size, 3)")
    return ImagePreprocessor(size)


def image_item(item_shape: Sequence[int | None]) -> Any:
    """The pydantic type of one ``/predict`` image item: base64 text, decoded to a ``(size, size, 3)`` array."""
    from pydantic import AfterValidator, Field

    preprocessor = _preprocessor(item_shape)

    def decoded(text: str) -> Any:
        try:
            return preprocessor.decode(text)
        except DataError as error:
            raise ValueError(str(error)) from None

    return Annotated[str, Field(strict=True, min_length=1, max_length=MAX_IMAGE_BYTES * 4 // 3 + 4),
                     AfterValidator(decoded)]


def decoded_images(values: Sequence[bytes], item_shape: Sequence[int | None],
                   shape: Sequence[int] | None = None) -> list[Any]:
    """A ``BYTES`` input's elements decoded (the Open Inference Protocol's route); a :class:`ProtocolError`
    (422) naming the element that is not an image."""
    if shape is not None and (len(shape) not in (1, 2) or len(shape) == 2 and shape[1] != 1):
        raise ProtocolError(422, f"input {INPUT_NAME!r} has shape {list(shape)}; send [N] (or [N, 1]) images, "
                                 "each element an image file's bytes")
    preprocessor = _preprocessor(item_shape)
    images = []
    for index, value in enumerate(values):
        try:
            images.append(_decode_either(preprocessor, bytes(value)))
        except DataError as error:
            raise ProtocolError(422, f"input {INPUT_NAME!r} element {index}: {error}") from None
    return images


def _decode_either(preprocessor: ImagePreprocessor, value: bytes) -> Any:
    """The image file ``value``, or (JSON requests carry BYTES as text) the image whose base64 text it is."""
    try:
        return preprocessor.decode(value)
    except DataError:
        if not value.isascii():
            raise
        try:
            return preprocessor.decode(value.decode("ascii"))
        except DataError:
            pass
        raise
