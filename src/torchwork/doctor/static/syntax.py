"""What the static rules read from a parsed file: dotted names, the statements of one scope, the
enclosing loop, function, class and ``if``, and what a name was bound to (``criterion = nn.CrossEntropyLoss()``).

Nothing here runs the code: the bindings are the calls written on the right of an assignment, so a rule
judges ``criterion(...)`` by the constructor two lines above, never by the name ``criterion``.

Example:
    >>> import ast
    >>> index = FileIndex.parse("import torch\\ncriterion = torch.nn.CrossEntropyLoss()\\n")
    >>> index.constructors("criterion")
    {'CrossEntropyLoss'}
    >>> dotted(ast.parse("torch.nn.functional.softmax").body[0].value)
    'torch.nn.functional.softmax'
"""

from __future__ import annotations

import ast
from collections.abc import Iterator

SCOPES = (ast.FunctionDef, ast.AsyncFunctionDef, ast.Lambda, ast.ClassDef)
LOOPS = (ast.For, ast.AsyncFor, ast.While)
FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def dotted(node: ast.AST) -> str:
    """``a.b.c`` for a chain of names and attributes (a call in the chain reads as ``a()``), else ``""``."""
    parts: list[str] = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            return ".".join(reversed(parts))
        elif isinstance(node, ast.Call):
            inner = dotted(node.func)
            if not inner:
                return ""
            parts.append(inner + "()")
            return ".".join(reversed(parts))
        else:
            return ""


def last(name: str) -> str:
    return name.rsplit(".", 1)[-1]


def receiver(call: ast.Call) -> str:
    """The object a method is called on (``self.optimizer`` for ``self.optimizer.step()``), else ``""``."""
    return dotted(call.func.value) if isinstance(call.func, ast.Attribute) else ""


def method(call: ast.Call) -> str:
    """The called name's last part: ``step`` for ``opt.step()``, ``softmax`` for ``F.softmax(x)``."""
    if isinstance(call.func, ast.Attribute):
        return call.func.attr
    return call.func.id if isinstance(call.func, ast.Name) else ""


def keyword(call: ast.Call, name: str) -> ast.expr | None:
    return next((k.value for k in call.keywords if k.arg == name), None)


def has_star_kwargs(call: ast.Call) -> bool:
    return any(k.arg is None for k in call.keywords) or any(isinstance(a, ast.Starred) for a in call.args)


def argument(call: ast.Call, position: int, name: str) -> ast.expr | None:
    """The argument given by keyword ``name`` or at ``position`` (before any ``*args``)."""
    found = keyword(call, name)
    if found is not None:
        return found
    positional = [a for a in call.args if not isinstance(a, ast.Starred)]
    return positional[position] if len(positional) > position and len(positional) == len(call.args) else None


def number(node: ast.AST | None) -> float | None:
    """The value of a numeric literal (``0.1``, ``-1``), else None (``True`` is not a number here)."""
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        inner = number(node.operand)
        return -inner if inner is not None else None
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return float(node.value)
    return None


def local_nodes(node: ast.AST) -> Iterator[ast.AST]:
    """Every node under ``node`` that runs in its own scope: nested functions, lambdas and classes are skipped
    (a closure handed to ``optimizer.step(closure)`` runs elsewhere)."""
    for child in ast.iter_child_nodes(node):
        if isinstance(child, SCOPES):
            continue
        yield child
        yield from local_nodes(child)


def local_calls(node: ast.AST) -> list[ast.Call]:
    return [n for n in local_nodes(node) if isinstance(n, ast.Call)]


def mentions(node: ast.AST, word: str) -> bool:
    """Whether a name or attribute called ``word`` (e.g. ``training``) appears in ``node``."""
    return any((isinstance(n, ast.Name) and n.id == word) or (isinstance(n, ast.Attribute) and n.attr == word)
               for n in ast.walk(node))


class FileIndex:
    """One pass over a module: each node's parent, the functions by name, and each name's constructors."""

    def __init__(self, tree: ast.Module) -> None:
        self.tree = tree
        self.parents: dict[ast.AST, ast.AST] = {}
        self.functions: dict[str, list[ast.FunctionDef | ast.AsyncFunctionDef]] = {}
        self._bound: dict[str, list[ast.Call | None]] = {}
        self.nodes: list[ast.AST] = [tree]  # walked once, parents noted on the way: every rule reads these
        for parent in self.nodes:  # grows while it is read: a breadth-first walk
            for child in ast.iter_child_nodes(parent):
                self.parents[child] = parent
                self.nodes.append(child)
        self.calls: list[ast.Call] = [n for n in self.nodes if isinstance(n, ast.Call)]
        for parent in self.nodes:
            if isinstance(parent, FUNCTIONS):
                self.functions.setdefault(parent.name, []).append(parent)
            if isinstance(parent, (ast.Assign, ast.AnnAssign)) and parent.value is not None:
                targets = parent.targets if isinstance(parent, ast.Assign) else [parent.target]
                value = parent.value if isinstance(parent.value, ast.Call) else None
                for target in targets:
                    name = dotted(target)
                    if name:
                        self._bound.setdefault(last(name), []).append(value)

    @classmethod
    def parse(cls, source: str | bytes, filename: str = "<source>") -> FileIndex:
        """The index of a module's source text (a ``SyntaxError`` where it is not Python)."""
        return cls(ast.parse(source, filename=filename))

    def constructors(self, name: str) -> set[str]:
        """The last names of every call assigned to ``name`` (any object's attribute of that name too); a
        binding that is not a call reads as ``"?"``: the rules then cannot tell what the name holds."""
        return {last(dotted(call.func)) or "?" if call is not None else "?" for call in self._bound.get(last(name), [])}

    def bindings(self, name: str) -> list[ast.Call]:
        return [call for call in self._bound.get(last(name), []) if call is not None]

    def ancestors(self, node: ast.AST) -> Iterator[ast.AST]:
        while node in self.parents:
            node = self.parents[node]
            yield node

    def scope_of(self, node: ast.AST) -> ast.AST:
        """The innermost function (or lambda, class, module) the node runs in."""
        return next((a for a in self.ancestors(node) if isinstance(a, SCOPES)), self.tree)

    def enclosing_loops(self, node: ast.AST) -> list[ast.For | ast.AsyncFor | ast.While]:
        """The loops around ``node`` in its own scope, innermost first."""
        loops = []
        for ancestor in self.ancestors(node):
            if isinstance(ancestor, SCOPES):
                break
            if isinstance(ancestor, LOOPS) and node not in _header(ancestor):
                loops.append(ancestor)
            node = ancestor
        return loops

    def conditions(self, node: ast.AST, stop: ast.AST | None = None) -> list[ast.expr]:
        """The tests of the ``if`` statements and conditional expressions around ``node`` (up to ``stop`` or
        its scope), the ``__name__ == "__main__"`` guard left out."""
        tests = []
        for ancestor in self.ancestors(node):
            if ancestor is stop or isinstance(ancestor, SCOPES):
                break
            if isinstance(ancestor, (ast.If, ast.IfExp)) and not _main_guard(ancestor.test):
                tests.append(ancestor.test)
        return tests

    def assigned_before(self, node: ast.AST, name: str) -> ast.expr | None:
        """The value last assigned to the plain name ``name`` above ``node``'s line in its scope (None if none)."""
        line = getattr(node, "lineno", 0)
        found: tuple[int, ast.expr] | None = None
        for statement in local_nodes(self.scope_of(node)):
            if isinstance(statement, ast.Assign) and statement.lineno < line:
                if any(isinstance(t, ast.Name) and t.id == name for t in statement.targets):
                    if found is None or statement.lineno >= found[0]:
                        found = (statement.lineno, statement.value)
        return found[1] if found else None

    def enclosing_class(self, node: ast.AST) -> ast.ClassDef | None:
        return next((a for a in self.ancestors(node) if isinstance(a, ast.ClassDef)), None)

    def is_method(self, node: ast.AST) -> bool:
        """Whether ``node`` runs in a function defined directly in a class."""
        scope = self.scope_of(node)
        return isinstance(scope, FUNCTIONS) and isinstance(self.parents.get(scope), ast.ClassDef)


def _header(loop: ast.For | ast.AsyncFor | ast.While) -> list[ast.AST]:
    return [loop.test] if isinstance(loop, ast.While) else [loop.target, loop.iter]


def _main_guard(test: ast.expr) -> bool:
    return isinstance(test, ast.Compare) and dotted(test.left) == "__name__"


def parameters(function: ast.AST) -> set[str]:
    if not isinstance(function, (*FUNCTIONS, ast.Lambda)):
        return set()
    args = function.args
    every = [*args.posonlyargs, *args.args, *args.kwonlyargs, *(a for a in (args.vararg, args.kwarg) if a)]
    return {a.arg for a in every}


def is_test_file(path: str) -> bool:
    """A test of the code rather than the code (``tests/``, ``test_*.py``): where deliberate misuse lives."""
    parts = path.replace("\\", "/").split("/")
    return any(p in ("tests", "test") for p in parts[:-1]) or parts[-1].startswith("test_")
