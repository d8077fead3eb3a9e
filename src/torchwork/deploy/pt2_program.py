"""What a ``.pt2`` program may hold: a model's operators over named values, and nothing that runs as Python.

``torch.export.load`` reads the program (``models/*.json`` in the archive) and turns parts of it into code.
With torch 2.13, on archives forged by editing that JSON (tests/deploy/test_deploy_code_trust.py):

- a symbolic size (``expr_str``) is parsed by ``sympy.sympify``, which evaluates Python: an ``os.system``
  call there ran during ``torch.export.load``;
- the forward's argument names (``forward_arg_names``) and the graph's input names are written into the
  Python source of the module's ``forward``: a default argument there ran during ``.module()``;
- each string of ``guards_code``, and a constant string input of the graph, is written into a guard
  function run by ``exec``: a guard ran at the first call;
- each node calls the operator its ``target`` names: ``aten::from_file(victim, shared=True)`` followed by
  ``aten::fill_`` overwrote a file the user could write at the first call;
- an AOTInductor library in the archive (``data/aotinductor/``) is loaded as native code: a ``pt2-aoti``
  package copied over ``model.pt2`` was mapped into the process by ``load_artifact(dir)``.

(And when the current format fails to load, torch falls back to an older one read from the archive's root
with full pickle: :func:`torchwork.deploy.trust.check_pt2_pickle_free` refuses any file outside the
archive's folder.)

The SHA-256s of an artifact's file table prove that the archive is the one exported, not who exported it. So
before torch sees an archive, :func:`check_pt2_program` reads its JSON as data and refuses a program unless
every name is a plain identifier (dotted, for parameter paths), every symbolic expression is arithmetic over
symbols and sympy's number and relation constructors, every guard is arithmetic and comparisons over the
inputs' sizes, every pytree spec holds only built-in containers keyed by plain words, and every node calls an
operator of the ``aten``, ``prims`` or ``quantized`` namespaces (or a symbolic-size operator, or a
control-flow operator whose subgraphs are checked the same way) that takes no file name; and it refuses an
archive holding an AOTInductor library. A field this module
does not know holding a string is refused too: a newer torch's field is checked before it is trusted. The
guards themselves still run (they are what keeps a program from answering inputs its trace did not cover),
now that they can only compare sizes.

Example:
    >>> op_problem("torch.ops.aten.linear.default") is None
    True
    >>> op_problem("torch.ops.aten.from_file.default")
    'calls aten::from_file, which opens a file (a model reads only its inputs and weights)'
    >>> sympy_problem("Symbol('s77', positive=True, integer=True)") is None
    True
    >>> sympy_problem("__import__('os').system('id')")
    'calls an attribute or an expression, not a sympy constructor'
    >>> guard_problem("L['x'].size()[0] <= 1024") is None
    True
"""

from __future__ import annotations

import ast
import json
import re
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

from torchwork.errors import ExportError

_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_DOTTED = re.compile(r"^([A-Za-z0-9_]+(\.[A-Za-z0-9_]+)*)?$")  # a parameter's path: "layers.0.weight"
_SYMBOL = re.compile(r"^[a-z]+[0-9]+$")  # torch's size symbols: s0, u3, s77
_WORD = re.compile(r"^[A-Za-z][A-Za-z0-9_]*$|^[-+]?[0-9.]+([eE][-+]?[0-9]+)?$")  # a symbol's name, a number
_SPEC_KEY = re.compile(r"^[A-Za-z0-9_. -]*$")  # a dict key of an input or output spec
_NOT_IN_SOURCE = re.compile(r"[#;\\\n\r\"]")  # a comment, a statement break, an escape, a line break, a "

# ------------------------------------------------------------------------------------------------ operators
OP_NAMESPACES = ("aten", "prims", "quantized")
# Control flow whose subgraphs are part of the same JSON, so checked by the same walk.
HIGHER_ORDER_OPS = frozenset({"cond", "while_loop", "map_impl", "scan", "invoke_subgraph",
                              "wrap_with_set_grad_enabled", "wrap_with_autocast"})
# Operators on symbolic sizes, as torch serializes them (module.name of operator, math and torch functions).
SYMBOLIC_OPS = frozenset(
    [f"_operator.{name}" for name in ("eq", "ne", "le", "ge", "lt", "gt", "neg", "pos", "mul", "add", "sub",
                                      "floordiv", "mod", "pow", "truediv", "and_", "or_", "lshift", "rshift")]
    + ["math.trunc"]
    + [f"torch.sym_{name}" for name in ("not", "int", "float", "ite", "max", "min", "sqrt")])
# Operators that touch files or the process; any other operator taking a str argument named like a file is
# refused too (see op_problem).
FILE_OPS = {"from_file": "opens a file", "_nested_from_file": "opens a file", "save": "writes a file",
            "_print": "writes to the process's output"}
_FILE_ARGUMENT = re.compile(r"file|path|dir", re.IGNORECASE)


def op_problem(target: str) -> str | None:
    """What is wrong with a node calling ``target`` (torch's serialized name); None for a model's operator."""
    if target in SYMBOLIC_OPS:
        return None
    parts = target.split(".")
    if len(parts) == 4 and parts[:3] == ["torch", "ops", "higher_order"] and parts[3] in HIGHER_ORDER_OPS:
        return None
    if len(parts) != 5 or parts[:2] != ["torch", "ops"] or parts[2] not in OP_NAMESPACES:
        return (f"calls {target!r}, outside the operators a model needs (the {', '.join(OP_NAMESPACES)} "
                "namespaces, symbolic sizes, control flow)")
    namespace, op, overload = parts[2:]
    if op in FILE_OPS:
        return f"calls {namespace}::{op}, which {FILE_OPS[op]} (a model reads only its inputs and weights)"
    schema = _operator_schema(namespace, op, overload)
    if schema is None:
        return f"calls {target!r}, which is not an operator of this torch"
    if any("str" in str(argument.type) and _FILE_ARGUMENT.search(argument.name) for argument in schema.arguments):
        return (f"calls {namespace}::{op}.{overload}, which takes a file name (a model reads only its inputs "
                "and weights)")
    return None


def _operator_schema(namespace: str, op: str, overload: str) -> Any:
    """The schema of ``torch.ops.<namespace>.<op>.<overload>``; None unless that names an operator overload
    (``aten::__and__.Tensor`` does; ``__class__`` does not)."""
    import torch

    if not (_IDENT.match(op) and _IDENT.match(overload)):
        return None
    try:
        resolved = getattr(getattr(getattr(torch.ops, namespace), op), overload)
    except (AttributeError, RuntimeError):
        return None
    return resolved._schema if isinstance(resolved, torch._ops.OpOverload) else None


# ------------------------------------------------------------------------------------------------ expressions
# The constructors torch's printer writes (sympy's srepr) and the functions its deserializer names.
SYMPY_FUNCTIONS = frozenset({
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Mod", "Max", "Min", "Abs", "floor",
    "ceiling", "sqrt", "Eq", "Ne", "Lt", "Le", "Gt", "Ge", "Equality", "Unequality", "StrictLessThan",
    "StrictGreaterThan", "LessThan", "GreaterThan", "And", "Or", "Not", "Piecewise", "ExprCondPair",
    "FloorDiv", "ModularIndexing", "Where", "PythonMod", "CleanDiv", "CeilToInt", "FloorToInt", "CeilDiv",
    "LShift", "RShift", "PowByNatural", "FloatPow", "FloatTrueDiv", "IntTrueDiv",
    "IsNonOverlappingAndDenseIndicator", "TruncToFloat", "TruncToInt", "RoundToInt", "RoundDecimal", "ToFloat",
    "Identity"})
SYMPY_CONSTANTS = frozenset({"oo", "zoo", "nan", "true", "false", "pi", "E"})
_ARITHMETIC = (ast.Expression, ast.BinOp, ast.UnaryOp, ast.BoolOp, ast.Compare, ast.operator, ast.unaryop,
               ast.boolop, ast.cmpop, ast.expr_context)


def _parsed(text: str) -> ast.Expression | str:
    """The expression's syntax tree, or what is wrong with it. Text written into Python source by torch holds
    no comment, statement break, escape, line break or double quote: what is checked is what runs."""
    if _NOT_IN_SOURCE.search(text):
        return "holds a comment, a ';', a backslash, a line break or a double quote"
    try:
        return ast.parse(text, mode="eval")
    except (SyntaxError, ValueError):
        return "is not an expression"


def _constant_problem(node: ast.Constant) -> str | None:
    if isinstance(node.value, str):
        return None if _WORD.match(node.value) else f"holds the string {node.value[:40]!r}"
    if node.value is None or isinstance(node.value, (bool, int, float)):
        return None
    return "holds a constant of another type"


def _sympy_function(name: str) -> bool:
    opaque = name.startswith(("OpaqueUnaryFn_", "BitwiseFn_")) and bool(_IDENT.match(name))
    return name in SYMPY_FUNCTIONS or opaque


def sympy_problem(text: str) -> str | None:
    """What is wrong with a symbolic size (parsed by ``sympy.sympify``, which evaluates Python); None for
    arithmetic over symbols and sympy's constructors."""
    tree = _parsed(text)
    if isinstance(tree, str):
        return tree
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            if not isinstance(node.func, ast.Name):
                return "calls an attribute or an expression, not a sympy constructor"
            if not _sympy_function(node.func.id):
                return f"calls {node.func.id!r}, which is not a sympy constructor"
        elif isinstance(node, ast.Name):
            if not (node.id in SYMPY_CONSTANTS or _SYMBOL.match(node.id) or _sympy_function(node.id)):
                return f"names {node.id!r}, which is not a symbol or a sympy constructor"
        elif isinstance(node, ast.keyword):
            if node.arg is None or not _IDENT.match(node.arg) or node.arg.startswith("_"):
                return "passes a keyword that is not a plain name"
        elif (problem := _leaf_problem(node)) is not None:
            return problem
    return None


def _leaf_problem(node: ast.AST) -> str | None:
    """What is wrong with a node neither walker checks by kind: a constant, or syntax that is not arithmetic."""
    if isinstance(node, ast.Constant):
        return _constant_problem(node)
    if not isinstance(node, _ARITHMETIC):
        return f"holds Python syntax ({type(node).__name__}) that is not arithmetic"
    return None


GUARD_NAMES = frozenset({"L", "math", "max", "min", "abs", "round", "int", "float"})
GUARD_ATTRIBUTES = frozenset({"size", "stride", "storage_offset", "numel", "dim", "floor", "ceil", "trunc",
                              "sqrt", "isnan", "isinf", "inf", "nan", "pow", "exp", "log", "log2"})


def guard_problem(text: str) -> str | None:
    """What is wrong with a guard (Python source torch runs with ``exec``); None for arithmetic and
    comparisons over the inputs' sizes (``L['x'].size()[0] <= 1024``)."""
    tree = _parsed(text)
    if isinstance(tree, str):
        return tree
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            if node.id not in GUARD_NAMES:
                return f"names {node.id!r}"
        elif isinstance(node, ast.Attribute):
            if node.attr not in GUARD_ATTRIBUTES:
                return f"reads the attribute {node.attr!r}"
        elif isinstance(node, ast.Subscript):
            if not isinstance(node.slice, ast.Constant):
                return "indexes with an expression"
        elif isinstance(node, ast.Call):
            if node.keywords:
                return "passes keywords"
        elif (problem := _leaf_problem(node)) is not None:
            return problem
    return None


SPEC_TYPES = frozenset({None, "builtins.tuple", "builtins.list", "builtins.dict", "collections.OrderedDict",
                        "collections.namedtuple", "torch.fx.immutable_collections.immutable_list",
                        "torch.fx.immutable_collections.immutable_dict"})


def spec_problem(text: str) -> str | None:
    """What is wrong with a serialized pytree spec (``in_spec``, ``out_spec``); None when it holds only
    built-in containers whose keys are plain words (torch writes the input keys into the forward's source)."""
    try:
        protocol, root = json.loads(text)
    except (ValueError, TypeError):
        return "is not a pytree spec"
    stack = [root]
    while stack:
        node = stack.pop()
        if not isinstance(node, dict) or not isinstance(node.get("children_spec", []), list):
            return "is not a pytree spec"
        if node.get("type") not in SPEC_TYPES:
            return f"holds the container type {str(node.get('type'))[:60]!r}, not a built-in one"
        context = node.get("context")
        try:
            context = json.loads(context) if isinstance(context, str) else context
        except ValueError:
            return "holds a context that is not JSON"
        keys = context if isinstance(context, list) else [] if context is None else [context]
        if any(isinstance(k, bool) or not isinstance(k, (str, int)) or (isinstance(k, str) and not _SPEC_KEY.match(k))
               for k in keys):
            return f"holds the key(s) {str(keys)[:80]}, not plain words"
        stack.extend(node.get("children_spec", []))
    return None


# ------------------------------------------------------------------------------------------------ the walk
def _name_problem(text: str) -> str | None:
    return None if not text or _IDENT.match(text) else "is not a plain name"  # a control-flow input's is ""


def _dotted_problem(text: str) -> str | None:
    return None if _DOTTED.match(text) else "is not a plain dotted name"


STRING_RULES: dict[str, Callable[[str], str | None]] = {
    "name": _name_problem, "as_name": _name_problem, "user_input_name": _name_problem,
    "forward_arg_names": _name_problem, "field_names": _name_problem,
    "parameter_name": _dotted_problem, "buffer_name": _dotted_problem, "tensor_constant_name": _dotted_problem,
    "fqn": _dotted_problem,
    "target": op_problem, "as_operator": op_problem, "expr_str": sympy_problem, "guards_code": guard_problem,
    "in_spec": spec_problem, "out_spec": spec_problem,
    # values torch uses as data (a constant argument, a device's type, a version, a verifier's registry key)
    "as_string": lambda _: None, "as_strings": lambda _: None, "type": lambda _: None,
    "torch_version": lambda _: None, "verifiers": lambda _: None,
}
NON_FINITE = frozenset({"Infinity", "-Infinity", "NaN"})
# fields whose keys are names; "metadata" (stack traces, module paths) is text torch reads without running it
KEYED_BY_NAME = frozenset({"tensor_values", "sym_int_values", "sym_bool_values", "sym_float_values",
                           "range_constraints", "as_string_to_argument", "opset_version"})
REFUSED_FIELDS = {"class_fqn": "a custom (TorchBind) object, which torch builds by running its class",
                  "custom_obj_name": "a custom (TorchBind) object, which torch builds by running its class"}


def program_problem(value: Any, field: str | None = None) -> str | None:
    """The first problem of a program's JSON (or any part of it under ``field``), in words naming the field;
    None when the program holds only what a model needs."""
    if isinstance(value, dict):
        return _dict_problem(value, field)
    if isinstance(value, list):
        return next((p for p in (program_problem(item, field) for item in value) if p is not None), None)
    if isinstance(value, str):
        if field in REFUSED_FIELDS:
            return f"{field} {value[:80]!r} names {REFUSED_FIELDS[field]}"
        rule = STRING_RULES.get(field or "")
        if rule is None and value in NON_FINITE:
            return None  # a float field: torch writes inf and nan as these words
        if rule is None:
            return f"the field {field!r} holds a string ({value[:40]!r}) where torchwork expects none"
        problem = rule(value)
        return None if problem is None else f"{field} {value[:80]!r} {problem}"
    return None


def _dict_problem(value: dict[Any, Any], field: str | None) -> str | None:
    if field == "metadata":
        return None
    constant = value.get("as_string")
    if field == "inputs" and isinstance(constant, str) and not _WORD.match(constant):
        return f"the graph's constant input {constant[:40]!r} is not a plain word (torch writes it into a guard)"
    keyed = field in KEYED_BY_NAME or field == "treespec_namedtuple_fields"
    key_rule = _name_problem if field in KEYED_BY_NAME else _dotted_problem
    for key, item in value.items():
        if keyed and (problem := key_rule(str(key))) is not None:
            return f"{field} has the key {str(key)[:80]!r}, which {problem}"
        problem = program_problem(item, None if keyed else str(key))  # a map's entries are not fields
        if problem is not None:
            return problem
    return None


def check_pt2_program(path: Path) -> None:
    """Refuse a ``.pt2`` archive whose programs (every file under ``models/``, as torch reads them) hold
    anything but what a model needs, or that holds a compiled native library (``data/aotinductor/``, which
    ``torch.export.load`` loads), before torch reads it: :class:`~torchwork.errors.ExportError` naming the
    problem."""
    from torch.export.pt2_archive import constants as pt2

    try:
        archive = zipfile.ZipFile(path)
    except (zipfile.BadZipFile, OSError) as error:
        raise ExportError(f"{path} is not a readable .pt2 archive ({error}). Re-export the model.") from error
    with archive:
        inner = {name: name.split("/", 1)[1] if "/" in name else name for name in archive.namelist()}
        native = next((name for name, rest in inner.items() if rest.startswith(pt2.AOTINDUCTOR_DIR)), None)
        if native is not None:
            raise ExportError(f"{path}: {native} is an AOTInductor library inside a pt2 program, which "
                              "torch.export.load would load as native code; a pt2 variant holds none (a "
                              "pt2-aoti variant is its own file, loaded only when named or trusted). The "
                              "artifact is forged or damaged: export the model again.")
        programs = [name for name, rest in inner.items() if rest.startswith(pt2.MODELS_DIR)]
        if not programs:
            raise ExportError(f"{path} holds no exported program (no {pt2.MODELS_DIR}); re-export the model.")
        for name in programs:
            try:
                document = json.loads(archive.read(name))
            except (ValueError, UnicodeDecodeError) as error:
                raise ExportError(f"{path}: {name} is not JSON ({error}); re-export the model.") from error
            problem = program_problem(document)
            if problem is not None:
                raise ExportError(f"{path}: the exported program {name} is refused: {problem}. Loading it "
                                  "would run code or touch files; an exported model holds only its operators "
                                  "over its inputs and weights. The artifact is forged or damaged: export the "
                                  "model again.")
