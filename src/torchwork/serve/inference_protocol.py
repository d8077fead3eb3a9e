"""The Open Inference Protocol's tensors (KServe v2, as Triton speaks it): requests in, answers out.

A request is a JSON object (``{"id", "parameters", "inputs": [...], "outputs": [...]}``); each input names
its ``datatype`` and ``shape`` and carries its elements either as JSON ``data`` (flat in row-major order,
or nested) or, with the binary tensor extension, as raw bytes after the JSON: the request's
``Inference-Header-Content-Length`` header says where the JSON ends, and each binary input's
``parameters.binary_data_size`` how many bytes it takes, in input order. Binary numbers are little-endian;
a ``BYTES`` element is a 4-byte little-endian length and that many bytes. Answers use the same encoding:
an output is sent binary when the request asks for it (``outputs[i].parameters.binary_data``, or
``parameters.binary_data_output`` for every output), which is what ``tritonclient.http`` asks by default.

Everything here is data: sizes are checked against the body before anything is read, element counts against
the shape, and nothing else is interpreted. A malformed request raises :class:`ProtocolError` with the HTTP
status to answer (400: not the protocol; 422: the protocol, but not what this model takes).

Example:
    >>> import numpy as np
    >>> body = b'{"inputs": [{"name": "x", "shape": [2], "datatype": "FP32", "data": [1.5, 2]}]}'
    >>> request = parse_request(body, None)
    >>> request.inputs[0].array
    array([1.5, 2. ], dtype=float32)
    >>> answer, header_length = encode_response("m", "1", None, [("y", "FP32", [1], [0.25])], {"y": True})
    >>> header_length, answer[header_length:] == np.float32(0.25).tobytes()
    (129, True)
"""

from __future__ import annotations

import dataclasses
import math
import struct
from collections.abc import Mapping, Sequence
from types import MappingProxyType
from typing import Any

import numpy as np  # this module is imported by the app only, with its dependencies
import orjson

HEADER = "inference-header-content-length"  # the binary extension's request and answer header (lower case)

# The protocol's datatypes and numpy's (little-endian); BYTES is an object array of bytes.
NUMERIC = {"BOOL": "|b1", "UINT8": "|u1", "UINT16": "<u2", "UINT32": "<u4", "UINT64": "<u8", "INT8": "|i1",
           "INT16": "<i2", "INT32": "<i4", "INT64": "<i8", "FP16": "<f2", "FP32": "<f4", "FP64": "<f8"}
DATATYPE_OF = {"bool": "BOOL", "uint8": "UINT8", "uint16": "UINT16", "uint32": "UINT32", "uint64": "UINT64",
               "int8": "INT8", "int16": "INT16", "int32": "INT32", "int64": "INT64", "float16": "FP16",
               "float32": "FP32", "float64": "FP64", "bfloat16": "FP32"}  # bfloat16 items travel as FP32
_LENGTH = struct.Struct("<I")
# The same datatypes as struct codes: a few numbers pack faster with struct than through a numpy array.
_STRUCT_CODE = {"BOOL": "?", "UINT8": "B", "UINT16": "H", "UINT32": "I", "UINT64": "Q", "INT8": "b", "INT16": "h",
                "INT32": "i", "INT64": "q", "FP16": "e", "FP32": "f", "FP64": "d"}


class ProtocolError(ValueError):
    """A request the protocol (or this model) cannot take; ``status`` is the HTTP status to answer. It never
    reaches a user as an exception (the routes answer it), so it is not one of torchwork's error classes."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


@dataclasses.dataclass(slots=True)
class InputTensor:
    """One decoded input: its name, datatype, shape and elements (a numeric array of that shape, or for
    ``BYTES`` the flat list of its elements' bytes)."""

    name: str
    datatype: str
    shape: tuple[int, ...]
    array: Any


@dataclasses.dataclass(slots=True)
class InferRequest:
    """A decoded request: its id (echoed back), inputs, the outputs asked for (``None``: every output) with
    whether each is wanted binary, and whether unnamed outputs are binary (``binary_data_output``)."""

    id: str | None
    inputs: list[InputTensor]
    outputs: Mapping[str, bool | None] | None
    binary_output: bool

    def binary(self, names: Sequence[str]) -> dict[str, bool]:
        """Whether each of ``names`` goes binary: as its entry in ``outputs`` asks, else as
        ``binary_data_output`` says."""
        asked = self.outputs or {}
        return {name: self.binary_output if asked.get(name) is None else bool(asked[name]) for name in names}


def parse_request(body: bytes, header_length: int | None, max_elements: int = 1 << 26) -> InferRequest:
    """Decode a request body; ``header_length``: the ``Inference-Header-Content-Length`` header (``None``:
    the whole body is JSON). Raise :class:`ProtocolError` (400) when it is not a well-formed request."""

    if header_length is None:
        return _layout(body, max_elements).decode(memoryview(b""))
    if not 0 <= header_length <= len(body):
        raise ProtocolError(400, f"Inference-Header-Content-Length={header_length} but the body has "
                                 f"{len(body)} bytes")
    header = body[:header_length]
    if header_length > _LAYOUT_BYTES:  # a header this large is not tritonclient's: checked, never kept
        return _layout(header, max_elements).decode(memoryview(body)[header_length:])
    key = (header, max_elements)
    layout = _LAYOUTS.get(key)
    if layout is None:
        layout = _layout(header, max_elements)
        if layout.reusable:
            if len(_LAYOUTS) >= _LAYOUTS_KEPT:
                del _LAYOUTS[next(iter(_LAYOUTS))]  # the oldest
            _LAYOUTS[key] = layout
    return layout.decode(memoryview(body)[header_length:])


@dataclasses.dataclass(slots=True)
class _InputSpec:
    """One input as its JSON header declares it: checked, its elements still to be read (``size``: its binary
    bytes) or already decoded from JSON (``data``)."""

    where: str
    name: str
    datatype: str
    shape: tuple[int, ...]
    count: int
    size: int | None
    data: Any = None


@dataclasses.dataclass(slots=True)
class _Layout:
    """A request's JSON header, checked: everything but its binary data. A header whose inputs are all
    binary is ``reusable``: tritonclient sends the very same header for every request of the same shapes and
    sizes, so the server checks it once (:data:`_LAYOUTS`) and then only reads the bytes after it."""

    id: str | None
    inputs: tuple[_InputSpec, ...]
    outputs: Mapping[str, bool | None] | None
    binary_output: bool

    @property
    def reusable(self) -> bool:
        return all(spec.size is not None for spec in self.inputs)

    def decode(self, binary: memoryview) -> InferRequest:
        """The request: each binary input read from ``binary``, checked against its declared size."""
        tensors, offset, left = [], 0, len(binary)
        for spec in self.inputs:
            array: Any
            if spec.size is None:
                array = spec.data
            else:
                if offset + spec.size > left:
                    raise ProtocolError(400, f"{spec.where}.binary_data_size={spec.size!r} but {left - offset} "
                                             "bytes of binary data are left in the body")
                raw = binary[offset:offset + spec.size]
                offset += spec.size
                array = _split_bytes(raw, spec.count, spec.where) if spec.datatype == "BYTES" else \
                    np.frombuffer(raw, dtype=NUMERIC[spec.datatype]).reshape(spec.shape)
            tensors.append(InputTensor(spec.name, spec.datatype, spec.shape, array))
        if offset != left:
            raise ProtocolError(400, f"{left - offset} bytes of binary data after the inputs' "
                                     "binary_data_size; the sizes and the body disagree")
        return InferRequest(self.id, tensors, self.outputs, self.binary_output)


# Checked binary request headers by (header, max_elements): at most _LAYOUTS_KEPT, the oldest dropped first,
# each at most _LAYOUT_BYTES long (tritonclient's are 150-400 bytes), so the cache holds at most 2 MiB of headers.
_LAYOUTS: dict[tuple[bytes, int], _Layout] = {}
_LAYOUTS_KEPT = 512
_LAYOUT_BYTES = 4096
# The most dimensions a tensor may have (numpy's limit is 64; no model here takes more than a few).
MAX_DIMENSIONS = 32


def _layout(header: bytes, max_elements: int) -> _Layout:

    try:
        document = orjson.loads(header)
    except orjson.JSONDecodeError as error:
        raise ProtocolError(400, f"the request is not valid JSON ({error}); send an object like "
                                 '{"inputs": [{"name": ..., "shape": [...], "datatype": ..., "data": [...]}]}') from None
    if not isinstance(document, dict):
        raise ProtocolError(400, f"the request is a JSON {type(document).__name__}, not an object with \"inputs\"")
    request_id = document.get("id")
    if request_id is not None and not isinstance(request_id, str):
        raise ProtocolError(400, "\"id\" must be a string")
    parameters = _object(document.get("parameters"), "parameters")
    inputs = document.get("inputs")
    if not isinstance(inputs, list) or not inputs:
        raise ProtocolError(400, "\"inputs\" must be a non-empty list of tensors")
    specs = tuple([_input(entry, f"inputs[{index}]", max_elements) for index, entry in enumerate(inputs)])
    outputs: dict[str, bool | None] | None = None
    if document.get("outputs") is not None:
        if not isinstance(document["outputs"], list):
            raise ProtocolError(400, "\"outputs\" must be a list of {\"name\": ...}")
        outputs = {}
        for index, entry in enumerate(document["outputs"]):
            if not isinstance(entry, dict) or not isinstance(entry.get("name"), str):
                raise ProtocolError(400, f"outputs[{index}] must be an object with a \"name\"")
            wanted = _object(entry.get("parameters"), f"outputs[{index}].parameters")
            flag = wanted.get("binary_data")
            outputs[entry["name"]] = None if flag is None else _flag(flag, f"outputs[{index}].binary_data")
    return _Layout(request_id, specs, None if outputs is None else MappingProxyType(outputs),
                   _flag(parameters.get("binary_data_output", False), "parameters.binary_data_output"))


def _object(value: Any, where: str) -> dict[str, Any]:
    if value is None:
        return {}
    if not isinstance(value, dict):
        raise ProtocolError(400, f"\"{where}\" must be an object")
    return value


def _flag(value: Any, where: str) -> bool:
    if not isinstance(value, bool):
        raise ProtocolError(400, f"{where} must be true or false")
    return value


def _input(entry: Any, where: str, max_elements: int) -> _InputSpec:

    if not isinstance(entry, dict):
        raise ProtocolError(400, f"{where} must be an object with name, shape, datatype and data")
    name, datatype, shape = entry.get("name"), entry.get("datatype"), entry.get("shape")
    if not isinstance(name, str):
        raise ProtocolError(400, f"{where}.name must be a string")
    if datatype != "BYTES" and datatype not in NUMERIC:
        raise ProtocolError(400, f"{where}.datatype={datatype!r} is not one of the protocol's: "
                                 f"{', '.join([*NUMERIC, 'BYTES'])}")
    count = _element_count(shape, where, max_elements)
    size = _object(entry.get("parameters"), f"{where}.parameters").get("binary_data_size")
    if size is None:
        if "data" not in entry:
            raise ProtocolError(400, f"{where} has no \"data\" and no binary_data_size")
        array = _json_data(entry["data"], datatype, count, where)
        return _InputSpec(where, name, datatype, tuple(shape), count, None,
                          array if datatype == "BYTES" else array.reshape(shape))
    if type(size) is not int or size < 0:
        raise ProtocolError(400, f"{where}.binary_data_size={size!r} must be a number of bytes (an integer >= 0)")
    if "data" in entry:
        raise ProtocolError(400, f"{where} has both \"data\" and binary_data_size; send one")
    if datatype == "BYTES":
        if size < _LENGTH.size * count:  # checked before a list of `count` elements is made for them
            raise ProtocolError(400, f"{where}: binary_data_size={size} cannot hold {count} BYTES elements "
                                     f"(each takes at least {_LENGTH.size} bytes, its length)")
    elif size != (takes := count * np.dtype(NUMERIC[datatype]).itemsize):
        raise ProtocolError(400, f"{where}: {size} bytes of binary data for shape {shape} of {datatype} "
                                 f"(which takes {takes})")
    return _InputSpec(where, name, datatype, tuple(shape), count, size)


def _element_count(shape: Any, where: str, max_elements: int) -> int:
    """The number of elements of ``shape``, checked before anything is allocated for them: at most
    :data:`MAX_DIMENSIONS` dimensions, each and their product at most ``max_elements`` (a dimension beyond
    that is refused even beside a 0, which numpy could not reshape to).

    Example:
        >>> _element_count([2, 3], "inputs[0]", 100)
        6
        >>> try:
        ...     _element_count([0, 2**62], "inputs[0]", 100)
        ... except ProtocolError as problem:
        ...     print(problem.status, problem)
        400 inputs[0].shape [0, 4611686018427387904]: dimension 1 is 4611686018427387904, more than the 100 elements this server takes in a tensor
    """
    if not isinstance(shape, list) or any([type(d) is not int or d < 0 for d in shape]):
        text = repr(shape) if len(repr(shape)) <= 200 else f"{repr(shape)[:200]}..."
        raise ProtocolError(400, f"{where}.shape must be a list of non-negative integers, got {text}")
    if len(shape) > MAX_DIMENSIONS:
        raise ProtocolError(400, f"{where}.shape has {len(shape)} dimensions; send at most {MAX_DIMENSIONS}")
    for index, dimension in enumerate(shape):
        if dimension > max_elements:
            raise ProtocolError(400, f"{where}.shape {shape}: dimension {index} is {dimension}, more than the "
                                     f"{max_elements} elements this server takes in a tensor")
    count = math.prod(shape)  # at most MAX_DIMENSIONS factors, each bounded: Python's integers do not overflow
    if count > max_elements:
        raise ProtocolError(400, f"{where}.shape {shape} holds {count} elements, more than the {max_elements} "
                                 "this server takes in a tensor")
    return count


def _json_data(data: Any, datatype: str, count: int, where: str) -> Any:

    flat = _flatten(data, where)
    if len(flat) != count:
        raise ProtocolError(400, f"{where}: {len(flat)} elements in \"data\" for a shape of {count}")
    if datatype == "BYTES":
        if not all(isinstance(value, str) for value in flat):
            raise ProtocolError(400, f"{where}: BYTES data in JSON must be strings")
        return [value.encode() for value in flat]
    numbers = (bool,) if datatype == "BOOL" else (int,) if "INT" in datatype else (int, float)
    for index, value in enumerate(flat):
        if not isinstance(value, numbers) or datatype != "BOOL" and isinstance(value, bool):
            raise ProtocolError(400, f"{where}.data[{index}]={value!r} is not a {datatype} number")
    try:
        with np.errstate(over="ignore"):
            return np.array(flat, dtype=NUMERIC[datatype])
    except OverflowError:
        raise ProtocolError(422, f"{where}: a number is outside the range of {datatype}") from None


def _flatten(data: Any, where: str) -> list[Any]:
    if not isinstance(data, list):
        raise ProtocolError(400, f"{where}.data must be a list")
    if not data or not isinstance(data[0], list):
        return data
    flat: list[Any] = []
    stack = [data]
    while stack:  # row-major order, nested to any depth
        value = stack.pop()
        for child in reversed(value) if isinstance(value, list) else ():
            stack.append(child)
        if not isinstance(value, list):
            flat.append(value)
    return flat


def _split_bytes(raw: memoryview, count: int, where: str) -> list[bytes]:
    """A BYTES tensor's elements: each a 4-byte little-endian length, then that many bytes."""
    if _LENGTH.size * count > len(raw):  # before a list of `count` elements is made
        raise ProtocolError(400, f"{where}: {len(raw)} bytes of binary data cannot hold {count} BYTES elements "
                                 f"(each takes at least {_LENGTH.size} bytes, its length)")
    array: list[bytes] = [b""] * count
    offset = 0
    for index in range(count):
        if offset + 4 > len(raw):
            raise ProtocolError(400, f"{where}: the binary data ends before BYTES element {index} of {count}")
        (length,) = _LENGTH.unpack_from(raw, offset)
        offset += 4
        if offset + length > len(raw):
            raise ProtocolError(400, f"{where}: BYTES element {index} says {length} bytes; fewer are left")
        array[index] = bytes(raw[offset:offset + length])
        offset += length
    if offset != len(raw):
        raise ProtocolError(400, f"{where}: {len(raw) - offset} bytes left after {count} BYTES elements")
    return array


def join_bytes(values: Sequence[bytes]) -> bytes:
    """BYTES elements as the binary extension sends them (each behind its 4-byte little-endian length).

    Example:
        >>> join_bytes([b"ab", b""])
        b'\\x02\\x00\\x00\\x00ab\\x00\\x00\\x00\\x00'
    """
    return b"".join([_LENGTH.pack(len(value)) + value for value in values])


def datatype_of(dtype: Any) -> str:
    """The protocol's datatype of a numpy dtype.

    Example:
        >>> import numpy as np
        >>> datatype_of(np.dtype("float32")), datatype_of(np.dtype("int64"))
        ('FP32', 'INT64')
    """
    name = str(dtype)
    if name not in DATATYPE_OF or name == "bfloat16":
        raise ProtocolError(500, f"the model's output is {name}, which the protocol has no datatype for")
    return DATATYPE_OF[name]


_PACKERS: dict[tuple[int, str], Any] = {}  # struct packers by (count, datatype): answers repeat a few counts
_PACKERS_KEPT = 256


def pack_numbers(values: Sequence[Any], datatype: str) -> bytes:
    """Numbers as the binary extension sends them (little-endian); numpy's conversion where struct refuses
    one (a float beyond FP16's or FP32's range becomes infinity, as numpy casts it)."""
    key = (len(values), datatype)
    pack = _PACKERS.get(key)
    if pack is None:
        pack = struct.Struct(f"<{key[0]}{_STRUCT_CODE[datatype]}").pack
        if len(_PACKERS) < _PACKERS_KEPT:
            _PACKERS[key] = pack
    try:
        return pack(*values)  # type: ignore[no-any-return]
    except (struct.error, OverflowError):
        with np.errstate(over="ignore"):
            return np.asarray(values, dtype=NUMERIC[datatype]).tobytes()


def encode_response(model_name: str, version: str, request_id: str | None,
                    outputs: Sequence[tuple[str, str, list[int], Any]], binary: Mapping[str, bool]
                    ) -> tuple[bytes, int | None]:
    """An answer's body and its JSON length (``None`` when nothing is binary). ``outputs`` are (name,
    datatype, shape, elements) in order, the elements flat in row-major order (a list: numbers, or strings
    for ``BYTES``; for an output sent binary, they may be its bytes already encoded); ``binary[name]`` says
    whether that output goes as raw bytes after the JSON."""

    entries, tails = [], []
    for name, datatype, shape, values in outputs:
        entry: dict[str, Any] = {"name": name, "datatype": datatype, "shape": shape}
        if binary.get(name, False):
            raw = values if isinstance(values, bytes) else \
                join_bytes([value.encode() for value in values]) if datatype == "BYTES" else \
                pack_numbers(values, datatype)
            entry["parameters"] = {"binary_data_size": len(raw)}
            tails.append(raw)
        else:
            entry["data"] = values
        entries.append(entry)
    document: dict[str, Any] = {"model_name": model_name, "model_version": version}
    if request_id is not None:
        document["id"] = request_id
    document["outputs"] = entries
    header = orjson.dumps(document)
    if not tails:
        return header, None
    return header + b"".join(tails), len(header)


def binary_answer_template(model_name: str, version: str, outputs: Sequence[tuple[str, str, Sequence[int]]]) -> bytes:
    """The JSON header of an answer with no request id whose every output is binary, as ``%`` format bytes:
    ``template % (count_0, size_0, count_1, size_1, ...)`` is what :func:`encode_response` writes for those
    outputs (name, datatype, row shape after the first dimension) with ``count_i`` rows and ``size_i`` bytes.
    Built once per model and outputs asked, so an answer only formats numbers into it.

    Example:
        >>> template = binary_answer_template("m", "1", [("y", "FP32", [2])])
        >>> header = template % (1, 8)
        >>> header == encode_response("m", "1", None, [("y", "FP32", [1, 2], [0.5, 1.0])], {"y": True})[0][:-8]
        True
    """
    entries = []
    for name, datatype, row in outputs:
        shape = b"".join(b",%d" % size for size in row)
        entries.append(b'{"name":' + orjson.dumps(name).replace(b"%", b"%%") + b',"datatype":'
                       + orjson.dumps(datatype) + b',"shape":[%d' + shape + b'],"parameters":{"binary_data_size":%d}}')
    head = orjson.dumps({"model_name": model_name, "model_version": version}).replace(b"%", b"%%")
    return head[:-1] + b',"outputs":[' + b",".join(entries) + b"]}"
