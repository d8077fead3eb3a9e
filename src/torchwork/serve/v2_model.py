"""One served model as the Open Inference Protocol describes it: its input and outputs, requests turned into
the batcher's items, and the batcher's answers turned into output tensors.

A text model takes one ``BYTES`` input named ``text`` of shape ``[N]`` (or ``[N, 1]``), each element a UTF-8
string; a tensor model one input of its datatype (``FP32`` for float32, ...) and shape ``[N, *item]``. A
classifier answers two outputs, ``label`` (``BYTES [N]``) and ``probabilities`` (``[N, len(labels)]``, in
the order of the labels); any other model one, ``output`` (``[N, *row]``). The outputs are read from the very
answers ``POST /predict`` gives (the JSON fragments the model process encodes), so the two routes answer
the same numbers for the same items.

Example:
    >>> import torch
    >>> from torchwork.serve import TorchPredictor
    >>> model = V2Model("digits", "1", TorchPredictor(torch.nn.Linear(4, 3), item_shape=(4,), labels="abc"))
    >>> model.metadata()["inputs"], [o["name"] for o in model.metadata()["outputs"]]
    ([{'name': 'input', 'datatype': 'FP32', 'shape': [-1, 4]}], ['label', 'probabilities'])
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np  # this module is imported by the app only, with its dependencies
import orjson

from torchwork.serve.inference_protocol import (
    DATATYPE_OF,
    InferRequest,
    ProtocolError,
    binary_answer_template,
    datatype_of,
    encode_response,
    join_bytes,
    pack_numbers,
)
from torchwork.serve.predictor import ServedModel
from torchwork.serve.schemas import Limits


class V2Model:
    """``predictor`` served as ``name`` (version ``version``) under ``/v2/models/``."""

    def __init__(self, name: str, version: str, predictor: ServedModel, limits: Limits | None = None) -> None:
        self.name, self.version, self.predictor = name, version, predictor
        self.limits = limits or Limits()
        self.labels = list(predictor.labels) if predictor.labels is not None else None
        # Each label as a BYTES element of a binary answer (length-prefixed), encoded once.
        self._label_bytes = {str(label): join_bytes([str(label).encode()]) for label in self.labels or ()}
        self.item_shape: tuple[int | None, ...] = ()
        self.image_shape: tuple[int | None, ...] | None = None
        if predictor.kind == "text":
            self.input_name, self.datatype = "text", "BYTES"
        elif predictor.kind == "image":  # BYTES elements, each an image file (torchwork.serve.images)
            self.input_name, self.datatype = "image", "BYTES"
            self.image_shape = tuple(predictor.item_shape)
        else:
            self.input_name = str(getattr(predictor, "input_name", "input"))  # an artifact's, from its manifest
            self.datatype = DATATYPE_OF[predictor.dtype]
            self.item_shape = tuple(predictor.item_shape)
        # What the outputs hold, learned from one warm-up answer (:meth:`learn_outputs`); FP32 until then.
        self.output_dtype: Any = "float32"
        self._value_type: str | None = "FP32"  # the protocol's name of output_dtype (None: it has none)
        self.row_shape: tuple[int, ...] | None = None
        self.output_names = ["label", "probabilities"] if self.labels is not None else ["output"]
        self._names = tuple(self.output_names)
        self._templates: dict[tuple[tuple[str, ...], str], bytes] = {}  # binary answers' headers, as % formats

    # ------------------------------------------------------------------ metadata
    def metadata(self) -> dict[str, Any]:
        """``GET /v2/models/{name}``: inputs and outputs with name, datatype and shape (-1: any length)."""
        shape = [-1, *(-1 if d is None else d for d in self.item_shape)]
        value_type = DATATYPE_OF.get(str(self.output_dtype), "FP32")
        if self.labels is not None:
            outputs = [{"name": "label", "datatype": "BYTES", "shape": [-1]},
                       {"name": "probabilities", "datatype": value_type, "shape": [-1, len(self.labels)]}]
        else:
            free = None in self.item_shape or self.row_shape is None
            row = [-1] * len(self.row_shape or (0,)) if free else list(self.row_shape or ())
            outputs = [{"name": "output", "datatype": value_type, "shape": [-1, *row]}]
        variant = getattr(self.predictor, "variant", None)
        return {"name": self.name, "versions": [self.version],
                "platform": f"torchwork_{variant}" if variant else "torchwork",
                "inputs": [{"name": self.input_name, "datatype": self.datatype, "shape": shape}],
                "outputs": outputs}

    def learn_outputs(self, rows: Any) -> None:
        """Record the dtype and row shape of the model's output from a batch of its rows (warm-up)."""

        array = np.asarray(rows)
        if array.dtype.kind == "f":
            self.output_dtype = array.dtype.name
        elif array.dtype.kind in "iub" and self.labels is None:
            self.output_dtype = array.dtype.name
        self.row_shape = tuple(array.shape[1:])
        try:
            self._value_type = datatype_of(self.output_dtype)
        except ProtocolError:  # no such type: every answer says so (datatype_of raises again there)
            self._value_type = None

    # ------------------------------------------------------------------ requests
    def items(self, request: InferRequest) -> list[Any]:
        """The request's items, in the form ``POST /predict`` validates them to; raise :class:`ProtocolError`
        (422) naming what does not fit this model."""

        if len(request.inputs) != 1 or request.inputs[0].name != self.input_name:
            names = [tensor.name for tensor in request.inputs]
            raise ProtocolError(422, f"model {self.name!r} takes one input {self.input_name!r} ({self.datatype}); "
                                     f"the request has {names}")
        tensor = request.inputs[0]
        if tensor.datatype != self.datatype:
            raise ProtocolError(422, f"input {self.input_name!r} is {self.datatype}, not {tensor.datatype}")
        count = tensor.shape[0] if tensor.shape else 0
        if not 1 <= count <= self.limits.max_items:
            raise ProtocolError(422, f"input {self.input_name!r}: {count} items; send 1 to "
                                     f"{self.limits.max_items} (the first dimension of its shape)")
        if self.image_shape is not None:
            from torchwork.serve.images import decoded_images

            return decoded_images(tensor.array, self.image_shape, tensor.shape)
        if self.datatype == "BYTES":
            return self._texts(tensor.shape, tensor.array)
        item = tensor.shape[1:]
        wanted = self.item_shape
        if len(item) != len(wanted) or any(w is not None and w != got for w, got in zip(wanted, item)) or \
                any(w is None and not 1 <= got <= self.limits.max_free_dim for w, got in zip(wanted, item)):
            expected = ", ".join(f"N <= {self.limits.max_free_dim}" if d is None else str(d) for d in wanted)
            raise ProtocolError(422, f"input {self.input_name!r} has shape {list(tensor.shape)}; this model takes "
                                     f"[items, {expected}]")
        array = tensor.array
        if array.dtype.kind == "f" and not np.isfinite(array).all():
            where = [int(i) for i in np.argwhere(~np.isfinite(array))[0]]
            raise ProtocolError(422, f"input {self.input_name!r} at {where} is not a finite number "
                                     f"({float(array[tuple(where)])!r})")
        return list(array)

    def _texts(self, shape: Sequence[int], values: list[bytes]) -> list[str]:
        if len(shape) not in (1, 2) or len(shape) == 2 and shape[1] != 1:
            raise ProtocolError(422, f"input 'text' has shape {list(shape)}; send [N] (or [N, 1]) strings")
        texts = []
        longest = self.limits.max_text_length
        for index, value in enumerate(values):
            try:
                text = value.decode()
            except UnicodeDecodeError:
                raise ProtocolError(422, f"input 'text' element {index} is not UTF-8 text") from None
            if not 1 <= len(text) <= longest:
                raise ProtocolError(422, f"input 'text' element {index} has {len(text)} characters; send 1 to "
                                         f"{longest}")
            texts.append(text)
        return texts

    def check_outputs(self, request: InferRequest) -> None:
        """Refuse (400) an output the request names that this model does not have."""
        for name in request.outputs or ():
            if name not in self.output_names:
                raise ProtocolError(400, f"model {self.name!r} has no output {name!r}; its outputs are "
                                         f"{self.output_names}")

    # ------------------------------------------------------------------ answers
    def answer(self, request: InferRequest, fragments: Sequence[bytes | None]) -> tuple[bytes, int | None]:
        """The answer's body and JSON length from one request's prediction fragments (see
        :mod:`torchwork.serve.encoding`); :class:`ProtocolError` (422) for an item whose output is not finite."""

        if None in fragments:
            index = list(fragments).index(None)
            raise ProtocolError(422, f"item {index}: the model's output for it is not a finite number (NaN or "
                                     "Infinity), so it cannot be answered; the input is probably far outside "
                                     "the range the model was trained on")
        value_type = self._value_type or datatype_of(self.output_dtype)  # the latter raises: no such type
        if self.labels is not None:
            labels: list[str] = []  # plain lists: no array is needed for a JSON answer
            probabilities: list[float] = []
            for fragment in fragments:
                prediction = orjson.loads(fragment)  # type: ignore[arg-type]
                labels.append(prediction["label"])
                probabilities.extend(prediction["probabilities"].values())
            if request.outputs is None and request.id is None and request.binary_output:
                # tritonclient's default (every output binary, no id): the header from a template
                return self._binary_answer(self._names, value_type, labels, probabilities)
            names = list(request.outputs) if request.outputs is not None else self.output_names
            binary = request.binary(names)
            if request.id is None and all(binary.values()):
                return self._binary_answer(names, value_type, labels, probabilities)
            count = len(labels)
            label_values = self._joined(labels) if binary.get("label") else labels
            outputs = {"label": ("label", "BYTES", [count], label_values),
                       "probabilities": ("probabilities", value_type, [count, len(self.labels)], probabilities)}
            return encode_response(self.name, self.version, request.id, [outputs[n] for n in names], binary)
        names = list(request.outputs) if request.outputs is not None else self.output_names
        binary = request.binary(names)
        array = np.asarray([orjson.loads(f)["output"] for f in fragments],  # type: ignore[arg-type]
                           dtype=self.output_dtype)
        output = ("output", value_type, list(array.shape), array.ravel().tolist())
        return encode_response(self.name, self.version, request.id, [output for _ in names], binary)

    def _joined(self, labels: Sequence[str]) -> bytes:
        """The labels as a binary ``BYTES`` tensor (each length-prefixed, encoded once per label)."""
        return b"".join([self._label_bytes[label] for label in labels])

    def _binary_answer(self, names: Sequence[str], value_type: str, labels: Sequence[str],
                       probabilities: list[float]) -> tuple[bytes, int]:
        """A classifier's answer with every output binary and no request id: what :func:`encode_response`
        writes, its JSON header formatted into a template made once per outputs asked."""
        key = (names if isinstance(names, tuple) else tuple(names), value_type)
        template = self._templates.get(key)
        if template is None:
            rows = {"label": ("BYTES", ()), "probabilities": (value_type, (len(self.labels or ()),))}
            template = binary_answer_template(self.name, self.version, [(n, *rows[n]) for n in names])
            self._templates[key] = template  # at most one per order of the two outputs and datatype
        count = len(labels)
        tails, numbers = [], []
        for name in names:
            tail = self._joined(labels) if name == "label" else pack_numbers(probabilities, value_type)
            tails.append(tail)
            numbers += (count, len(tail))
        header = template % tuple(numbers)
        tails.insert(0, header)
        return b"".join(tails), len(header)
