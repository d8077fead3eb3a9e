"""Renamed keyword arguments and commands: the old name keeps working for a while and says what to write instead.

Example:
    >>> import warnings
    >>> @renamed_keywords(size="max_vocab")
    ... def fit(*, max_vocab: int = 10) -> int:
    ...     return max_vocab
    >>> with warnings.catch_warnings(record=True) as caught:
    ...     warnings.simplefilter("always")
    ...     fit(size=5)
    5
    >>> print(caught[0].message)
    fit(size=...) is deprecated: write max_vocab=... instead (same meaning).
"""

from __future__ import annotations

import dataclasses
import functools
import warnings
from collections.abc import Callable
from typing import Any, TypeVar, cast

from torchwork.errors import ConfigError

F = TypeVar("F", bound=Callable[..., Any])


@dataclasses.dataclass(frozen=True)
class Renamed:
    """A keyword renamed with a change of unit: ``new = convert(old)``; ``meaning`` says how in the warning."""

    new: str
    convert: Callable[[Any], Any]
    meaning: str


def renamed_keywords(**old_to_new: str | Renamed) -> Callable[[F], F]:
    """Accept each old keyword as its new name, with a ``FutureWarning`` (shown to end users) naming the new one.

    The wrapped function keeps its own signature for type checkers, which therefore flag the old names.
    """
    renames = {old: new if isinstance(new, Renamed) else Renamed(new, lambda value: value, "same meaning")
               for old, new in old_to_new.items()}

    def decorate(function: F) -> F:
        @functools.wraps(function)
        def wrapper(*args: Any, **kwargs: Any) -> Any:
            for old, rename in renames.items():
                if old not in kwargs:
                    continue
                new = rename.new
                if new in kwargs:
                    raise ConfigError(f"{function.__qualname__}() got both {old}= and {new}=: pass only {new}= "
                                      f"({old} is its deprecated name).")
                warnings.warn(f"{function.__qualname__}({old}=...) is deprecated: write {new}=... instead "
                              f"({rename.meaning}).", FutureWarning, stacklevel=2)
                kwargs[new] = rename.convert(kwargs.pop(old))
            return function(*args, **kwargs)

        return cast(F, wrapper)

    return decorate


def renamed_command(program: str, old: str, new: str, removed_in: str) -> str:
    """The line a renamed command prints (on stderr) before it runs as its new name.

    >>> print(renamed_command("torchwork", "demo", "digits", "0.3.0"))
    torchwork: 'torchwork demo' is deprecated: write 'torchwork digits' instead (the same command; the old name goes in 0.3.0).
    """
    return (f"{program}: '{program} {old}' is deprecated: write '{program} {new}' instead (the same command; the old "
            f"name goes in {removed_in}).")
