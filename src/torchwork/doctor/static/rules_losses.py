"""Static rules about losses and loading: ``loss-on-probabilities``, ``unsafe-torch-load`` and
``state-dict-mismatch`` (a ``load_state_dict(..., strict=False)`` whose report is thrown away).

A loss that applies its own softmax (``CrossEntropyLoss``) or sigmoid (``BCEWithLogitsLoss``) given
probabilities squashes them a second time: the gradients shrink and training stalls. The loss is read from
its binding (``criterion = nn.CrossEntropyLoss()``), the input from the call or the assignment above it;
``log_softmax`` into ``CrossEntropyLoss`` is left alone (it is idempotent there, so the loss is right).

Example:
    >>> from torchwork.doctor.static.syntax import FileIndex
    >>> code = "import torch.nn.functional as F\\nloss = F.cross_entropy(F.softmax(out, dim=1), y)\\n"
    >>> [(h.severity, h.node.lineno) for h in probabilities_into_loss(FileIndex.parse(code), "t.py")]
    [('error', 2)]
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

from torchwork.doctor.static.results import Hit
from torchwork.doctor.static.syntax import FileIndex, argument, dotted, has_star_kwargs, keyword, last, method

# the loss (functional name or module class) -> the squashing it applies itself
_LOSSES = {"cross_entropy": "softmax", "CrossEntropyLoss": "softmax",
           "binary_cross_entropy_with_logits": "sigmoid", "BCEWithLogitsLoss": "sigmoid"}
_SQUASH_MODULES = {"Softmax": "softmax", "Sigmoid": "sigmoid"}
_RESHAPES = ("squeeze", "unsqueeze", "view", "reshape", "flatten", "float", "double", "contiguous", "to")
_TORCH_NAMESPACES = ("torch", "F", "functional", "nn.functional", "torch.nn.functional", "torch.special")


def _loss_kind(index: FileIndex, call: ast.Call) -> str | None:
    name = dotted(call.func)
    if last(name) in ("cross_entropy", "binary_cross_entropy_with_logits"):
        return last(name) if name.rsplit(".", 1)[0] in _TORCH_NAMESPACES else None
    if isinstance(call.func, ast.Call) and last(dotted(call.func.func)) in _LOSSES:
        return last(dotted(call.func.func))  # nn.CrossEntropyLoss()(out, y)
    bound = index.constructors(name) if name else set()
    return next(iter(bound)) if len(bound) == 1 and next(iter(bound)) in _LOSSES else None


def _squashing(index: FileIndex, node: ast.expr) -> str | None:
    """``softmax``/``sigmoid`` when ``node`` is such a call: functional, a tensor method, an ``nn.Softmax``
    module called in place, or ``self.act(x)`` whose attribute is bound only to ``nn.Softmax(...)``."""
    node = _through_reshapes(node)
    if not isinstance(node, ast.Call):
        return None
    name = dotted(node.func)
    if isinstance(node.func, ast.Call):
        return _SQUASH_MODULES.get(last(dotted(node.func.func)))
    ends = {_last_layer(call) for call in index.bindings(name)} if name else set()
    end = next(iter(ends)) if len(ends) == 1 else None
    if end in _SQUASH_MODULES:
        return _SQUASH_MODULES[end]  # model = nn.Sequential(..., nn.Softmax(dim=1)); model(x)
    if method(node) in ("softmax", "sigmoid"):
        owner = name.rsplit(".", 1)[0] if "." in name else ""
        tensor_method = owner and owner.split(".")[0] != "self" and not node.args[1:]
        if owner in _TORCH_NAMESPACES or tensor_method:
            return method(node)
    bound = index.constructors(name) if name.startswith("self.") else set()
    if len(bound) == 1 and next(iter(bound)) in _SQUASH_MODULES:
        return _SQUASH_MODULES[next(iter(bound))]
    return None


def _through_reshapes(node: ast.expr) -> ast.expr:
    """``torch.sigmoid(z).squeeze(1)`` is still a sigmoid: look through shape-only methods and indexing."""
    while True:
        if isinstance(node, ast.Subscript):
            node = node.value
        elif isinstance(node, ast.Call) and isinstance(node.func, ast.Attribute) and node.func.attr in _RESHAPES:
            node = node.func.value
        else:
            return node


def _last_layer(call: ast.Call) -> str | None:
    """The class of the last layer of an ``nn.Sequential(...)`` built from constructor calls."""
    if last(dotted(call.func)) != "Sequential" or not call.args or not isinstance(call.args[-1], ast.Call):
        return None
    return last(dotted(call.args[-1].func))


def probabilities_into_loss(index: FileIndex, path: str) -> Iterator[Hit]:
    for call in index.calls:
        kind = _loss_kind(index, call) if call.args else None
        if kind is None:
            continue
        given = call.args[0]
        if isinstance(given, ast.Name):
            given = index.assigned_before(call, given.id) or given
        squash = _squashing(index, given)
        if squash is None or squash != _LOSSES[kind]:
            continue
        yield Hit(call, "error",
                  f"{kind} applies {squash} itself, and its input here is already a {squash} "
                  f"(`{ast.unparse(given)[:60]}`): the probabilities are squashed twice, so the gradients "
                  "shrink and training stalls.",
                  f"Pass the raw logits (drop the {squash}); apply {squash} only to read probabilities for "
                  "metrics or predictions.")


# ------------------------------------------------------------------------------------------ loading
def unsafe_torch_load(index: FileIndex, path: str) -> Iterator[Hit]:
    for call in index.calls:
        if dotted(call.func) != "torch.load" or has_star_kwargs(call):
            continue
        flag = keyword(call, "weights_only")
        if flag is None:
            message = ("torch.load without weights_only=True unpickles the file on PyTorch < 2.6 (the default "
                       "changed in 2.6): a checkpoint from elsewhere can run code when loaded.")
        elif isinstance(flag, ast.Constant) and flag.value is False:
            message = "torch.load(..., weights_only=False) unpickles the file: a checkpoint from elsewhere can run code."
        else:
            continue
        yield Hit(call, "warning", message,
                  "Pass weights_only=True and save state dicts, not whole objects; for a trusted file that holds "
                  "your own classes, allow them with torch.serialization.add_safe_globals([...]).")


_READERS = ("load", "load_file", "load_state_dict_from_url", "load_url")


def _read_from_file(index: FileIndex, call: ast.Call, given: ast.expr | None) -> bool:
    """Whether the state dict given is a file's contents (``torch.load(...)``, ``ckpt["model"]`` of one):
    the load where a wrapper prefix makes ``strict=False`` load nothing. A dict built in the code (an
    adapter's, a filtered one) is an intended partial load."""
    while isinstance(given, ast.Subscript):
        given = given.value
    if isinstance(given, ast.Name):
        given = index.assigned_before(call, given.id)
        while isinstance(given, ast.Subscript):
            given = given.value
    return isinstance(given, ast.Call) and last(dotted(given.func)) in _READERS


def ignored_strict_false(index: FileIndex, path: str) -> Iterator[Hit]:
    for statement in (n for n in index.nodes if isinstance(n, ast.Expr)):
        call = statement.value
        if not isinstance(call, ast.Call) or method(call) != "load_state_dict":
            continue
        strict = argument(call, 1, "strict")
        if isinstance(strict, ast.Constant) and strict.value is False and _read_from_file(
                index, call, argument(call, 0, "state_dict")):
            yield Hit(call, "warning",
                      "load_state_dict(..., strict=False) and its result thrown away: keys that do not match "
                      "(a 'module.' prefix, a renamed layer) load nothing and nothing says so.",
                      "Keep the result and check it: result = model.load_state_dict(sd, strict=False); "
                      "assert not result.unexpected_keys and set(result.missing_keys) <= expected_missing.")
