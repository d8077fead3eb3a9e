"""Request and response schemas, built at startup from what the predictor declares; error messages.

The request model validates everything a client can get wrong (types, shapes, NaN and Infinity, numbers
outside the item's dtype, empty or oversized lists and texts) before anything is queued, and its JSON
schema is the OpenAPI documentation of ``POST /predict``.

Example:
    >>> from torchwork.serve.schemas import Limits, request_model
    >>> Request = request_model("tensor", (2,), "float32", Limits(max_items=4))
    >>> Request.model_validate_json('{"inputs": [[1, 2.5]]}').inputs
    [[1.0, 2.5]]
    >>> from pydantic import ValidationError
    >>> try:
    ...     Request.model_validate_json('{"inputs": [[1, NaN]]}')
    ... except ValidationError as error:
    ...     print(validation_message(error))
    inputs[0][1]: Input should be a finite number (got nan)
"""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Sequence
from typing import TYPE_CHECKING, Annotated, Any

if TYPE_CHECKING:  # pragma: no cover
    from pydantic import BaseModel, ValidationError

_NUMBER_RANGE = {"float16": 65504.0, "bfloat16": 3.3895313892515355e38, "float32": 3.4028234663852886e38,
                 "float64": 1.7976931348623157e308, "int8": (-(2**7), 2**7 - 1), "int16": (-(2**15), 2**15 - 1),
                 "int32": (-(2**31), 2**31 - 1), "int64": (-(2**63), 2**63 - 1), "uint8": (0, 255)}


@dataclasses.dataclass(frozen=True)
class Limits:
    """What one request may hold. ``max_free_dim``: the longest list where an item's dimension is free."""

    max_items: int = 64
    max_text_length: int = 10_000
    max_free_dim: int = 4096


def request_model(kind: str, item_shape: Sequence[int | None], dtype: str, limits: Limits) -> type[BaseModel]:
    """The pydantic model of a ``POST /predict`` body: ``{"inputs": [item, ...]}``, nothing else."""
    from pydantic import BaseModel, ConfigDict, Field

    if kind == "text":
        item: Any = Annotated[str, Field(strict=True, min_length=1, max_length=limits.max_text_length)]
        example: Any = "a short text to classify"
    elif kind == "image":
        from torchwork.serve.images import image_item

        item, example = image_item(item_shape), "<base64 of a PNG or JPEG file>"
    else:
        bounds = _NUMBER_RANGE[dtype]
        if isinstance(bounds, tuple):
            item = Annotated[int, Field(strict=True, ge=bounds[0], le=bounds[1])]
        else:
            item = Annotated[float, Field(strict=True, allow_inf_nan=False, ge=-bounds, le=bounds)]
        example = 0
        for dim in reversed(tuple(item_shape)):
            low, high = (dim, dim) if dim is not None else (1, limits.max_free_dim)
            item = Annotated[list[item], Field(min_length=low, max_length=high)]  # type: ignore[valid-type]
            example = [example] * (dim or 1)

    class PredictRequest(BaseModel):
        model_config = ConfigDict(extra="forbid", json_schema_extra={"example": {"inputs": [example]}})
        inputs: Annotated[list[item], Field(  # type: ignore[valid-type]
            min_length=1, max_length=limits.max_items,
            description=f"1 to {limits.max_items} items, each "
                        + (f"a string of 1 to {limits.max_text_length} characters" if kind == "text" else
                           "an image file's bytes (PNG, JPEG, ...) as base64 text" if kind == "image" else
                           f"a nested list of numbers of shape {_shape_text(item_shape)} ({dtype})"))]

    return PredictRequest


def response_models(labels: Sequence[str] | None) -> tuple[type[BaseModel], type[BaseModel]]:
    """The pydantic models of a 200 answer (documentation only: answers are encoded by hand) and an error."""
    from pydantic import BaseModel, Field

    if labels is not None:
        class Prediction(BaseModel):
            label: str = Field(description=f"the most probable class, one of {list(labels)}")
            probabilities: dict[str, float] = Field(description="probability of each class")
    else:
        class Prediction(BaseModel):  # type: ignore[no-redef]
            output: Any = Field(description="the model's output for this item (a number or nested lists)")

    class PredictResponse(BaseModel):
        predictions: list[Prediction] = Field(description="one per input item, in the same order")

    class ErrorResponse(BaseModel):
        detail: str = Field(description="what was wrong, naming the field, and what to do")
        errors: list[dict[str, Any]] = Field(default_factory=list, description="each problem found")

    return PredictResponse, ErrorResponse


def field_name(loc: Sequence[Any]) -> str:
    """``("inputs", 0, 2)`` -> ``"inputs[0][2]"``; the empty location is the whole body."""
    name = "body"
    for part in loc:
        name = f"{name}[{part}]" if isinstance(part, int) else (str(part) if name == "body" else f"{name}.{part}")
    return name


def validation_errors(error: ValidationError, limit: int = 10) -> list[dict[str, Any]]:
    """Pydantic's errors as ``{"field", "message", "type"}`` dicts, with clearer words for a few types."""
    out = []
    for problem in error.errors(include_url=False)[:limit]:
        kind, message = problem["type"], problem["msg"]
        value = problem.get("input")
        if kind in ("less_than_equal", "greater_than_equal") and isinstance(value, (int, float)):
            message = f"{value!r} is outside the range of the model's input type"
        elif kind == "finite_number" and isinstance(value, float):
            message = f"{message} (got {value!r})"
        elif kind == "json_invalid":
            message = f"{message}; send a JSON object like {{\"inputs\": [...]}}"
        elif kind == "model_type":
            message = f"{message} like {{\"inputs\": [...]}}, got {type(value).__name__}"
        out.append({"field": field_name(problem["loc"]), "message": message, "type": kind})
    return out


def validation_message(error: ValidationError) -> str:
    """One line naming every field that was wrong (the first few, then how many more)."""
    problems = validation_errors(error, limit=5)
    text = "; ".join(f"{p['field']}: {p['message']}" for p in problems)
    more = error.error_count() - len(problems)
    return f"{text}; and {more} more problem(s)" if more > 0 else text


def error_body(message: str, errors: list[dict[str, Any]] | None = None) -> bytes:
    """The JSON bytes of an error answer: ``{"detail": message, "errors": [...]}``."""
    return json.dumps({"detail": message, "errors": errors or []}, default=repr).encode()


def check_rectangular(items: Sequence[Any], item_shape: Sequence[int | None]) -> str | None:
    """Where an item has a free dimension, check its sublists agree in length; return the problem or None.

    Fixed dimensions are checked by the request model; only free ones can differ between siblings.
    """
    if None not in item_shape:
        return None

    def walk(value: Any, depth: int, where: str) -> tuple[int, ...] | str:
        if depth == len(item_shape):
            return ()
        shapes = [walk(child, depth + 1, f"{where}[{i}]") for i, child in enumerate(value)]
        for shape in shapes:
            if isinstance(shape, str):
                return shape
        for i, shape in enumerate(shapes[1:], start=1):
            if shape != shapes[0]:
                return (f"{where}[{i}]: has shape {_shape_text(shape)} but {where}[0] has "
                        f"{_shape_text(shapes[0])}; every sublist of an item must have the same shape")
        return (len(value), *shapes[0])

    for index, item in enumerate(items):
        shape = walk(item, 0, f"inputs[{index}]")
        if isinstance(shape, str):
            return shape
    return None


def _shape_text(shape: Sequence[Any]) -> str:
    return "(" + ", ".join("N" if d is None else str(d) for d in shape) + ("," if len(shape) == 1 else "") + ")"
