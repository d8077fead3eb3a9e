"""Reading a YAML file someone else wrote (a recipe's config, a search space) as data: a bounded regular file,
with aliases refused, and a one-line error for anything wrong in it.

A FIFO or a device is refused from its ``fstat`` before a byte is read, a file over the limit after
``limit + 1`` bytes, a document nested deeper than :data:`MAX_DEPTH` before it can exhaust the stack, and an
alias (``*name``) as soon as the parser meets it: an alias repeats a node without copying it, so a few hundred
bytes of nested aliases (a "billion laughs") expand to billions of values once anything walks them.

Example:
    >>> import pathlib, tempfile
    >>> path = pathlib.Path(tempfile.mkdtemp()) / "config.yaml"
    >>> _ = path.write_text("a: &x [1, 2]\\nb: *x\\n")
    >>> read_yaml_file(path, "config file")  # doctest: +ELLIPSIS
    Traceback (most recent call last):
    ...
    torchwork.errors.ConfigError: config file .../config.yaml, line 2: aliases (*x) are not supported in a config file: ...
"""

from __future__ import annotations

import functools
import os
from typing import Any

from torchwork.errors import ConfigError
from torchwork.paths import FileTooLarge, NotRegularFile, read_regular

MAX_YAML_BYTES = 1 << 20  # a config or a space is one line per setting: tens of lines, not a megabyte
MAX_DEPTH = 64  # collections inside collections: a setting is a value, a list or a mapping of them
_SHOWN = 200  # characters of a parser's problem quoted in a message


class _Refused(Exception):
    """What the loader met that it does not read, at 0-based ``line``: the alias ``*anchor``, or (``anchor``
    None) a collection nested too deep."""

    def __init__(self, line: int, anchor: str | None) -> None:
        super().__init__(line, anchor)
        self.line, self.anchor = line, anchor


@functools.lru_cache(maxsize=1)
def _loader() -> Any:
    """PyYAML's SafeLoader that refuses aliases and nesting past :data:`MAX_DEPTH` while it composes the
    document, before any value is built (made on first use: importing torchwork does not import yaml)."""
    import yaml  # type: ignore[import-untyped]  # no stubs in the lock

    class Loader(yaml.SafeLoader):
        depth = 0

        def compose_node(self, parent: Any, index: Any) -> Any:
            if self.check_event(yaml.AliasEvent):
                event = self.peek_event()
                raise _Refused(event.start_mark.line, str(event.anchor))
            if self.depth >= MAX_DEPTH:
                raise _Refused(self.peek_event().start_mark.line, None)
            self.depth += 1
            try:
                return super().compose_node(parent, index)
            finally:
                self.depth -= 1

    return Loader


def read_yaml_file(path: str | os.PathLike[str], what: str, limit: int = MAX_YAML_BYTES) -> Any:
    """The YAML document in ``path`` (None for an empty one), read as a regular file of at most ``limit`` bytes
    with aliases refused; a :class:`~torchwork.errors.ConfigError` of one line otherwise, naming the file as
    ``what`` (``"config file"``, ``"search space"``) and saying what to do.

    Example:
        >>> import pathlib, tempfile
        >>> path = pathlib.Path(tempfile.mkdtemp()) / "space.yaml"
        >>> _ = path.write_text("lr: {low: 0.001, high: 0.1}\\n")
        >>> read_yaml_file(path, "search space")
        {'lr': {'low': 0.001, 'high': 0.1}}
        >>> read_yaml_file(path, "search space", limit=10)  # doctest: +ELLIPSIS
        Traceback (most recent call last):
        ...
        torchwork.errors.ConfigError: search space .../space.yaml is over 10 bytes, the limit for a search space (one line per setting): ...
    """
    import yaml

    label = f"{what} {os.fspath(path)}"
    text = _read_text(path, label, what, limit)
    try:
        return yaml.load(text, Loader=_loader())  # noqa: S506 - a SafeLoader
    except _Refused as refused:
        raise _refusal(label, what, refused) from None
    except yaml.YAMLError as error:
        raise _syntax_error(label, error) from None
    except ValueError as error:  # an integer of more digits than Python converts, a 13th month
        raise ConfigError(f"{label} holds a value YAML cannot convert ({_short(str(error))}); fix it, or quote "
                          "it to keep it as text.") from None


def _read_text(path: str | os.PathLike[str], label: str, what: str, limit: int) -> str:
    try:
        raw = read_regular(path, limit)
    except FileNotFoundError:
        raise ConfigError(f"{label} does not exist.") from None
    except NotRegularFile as error:
        raise ConfigError(f"{label} is {error}; give a YAML file.") from None
    except FileTooLarge as error:
        raise ConfigError(f"{label} is {error}, the limit for a {what} (one line per setting): check that it is "
                          "the file meant.") from None
    except OSError as error:
        raise ConfigError(f"{label} cannot be read: {error.strerror or error}.") from None
    try:
        return raw.decode("utf-8")
    except UnicodeDecodeError as error:
        raise ConfigError(f"{label} is not UTF-8 text (its byte {error.start + 1:,} is not); save it as UTF-8.") from None


def _refusal(label: str, what: str, refused: _Refused) -> ConfigError:
    where = f"{label}, line {refused.line + 1}"
    if refused.anchor is None:
        return ConfigError(f"{where}: lists and mappings nested more than {MAX_DEPTH} deep; a {what} "
                           "holds settings, each a value, a list or a mapping of a few levels.")
    return ConfigError(f"{where}: aliases (*{refused.anchor}) are not supported in a {what}: an alias "
                       "repeats a node without copying it, so a few hundred bytes of them can expand to billions "
                       "of values; write the values out.")


def _syntax_error(label: str, error: Exception) -> ConfigError:
    """One line of a PyYAML error (its own messages span lines and quote the document): the line, the column
    and what the parser found there."""
    mark, problem = getattr(error, "problem_mark", None), getattr(error, "problem", None)
    if mark is None or problem is None:
        return ConfigError(f"{label} is not valid YAML: {_short(' '.join(str(error).split()))}.")
    context, context_mark = getattr(error, "context", None), getattr(error, "context_mark", None)
    found = _short(" ".join(str(problem).split()))
    if context:
        found += f" ({_short(' '.join(str(context).split()))}"
        found += f" started at line {context_mark.line + 1})" if context_mark is not None else ")"
    return ConfigError(f"{label} is not valid YAML: line {mark.line + 1}, column {mark.column + 1}: {found}. "
                       "Fix that line (e.g. 'key: value', with spaces, not tabs, to indent).")


def _short(text: str) -> str:
    return text if len(text) <= _SHOWN else text[:_SHOWN - 3] + "..."
