"""The order the suite runs in: random (pytest-randomly, seeded, the seed printed), with two exceptions.

- Tests that share state on purpose run in their file's order: the Python blocks of one documentation page
  (Sybil: one namespace per page), and a module marked ``pytest.mark.in_file_order(reason=...)`` (a story
  told to one server: keys rotated, versions reloaded), whose reason says what its tests share.
- Modules with a test marked slow go first, so that under xdist the longest modules start while the short
  ones fill the gaps, instead of one of them starting last and running alone (longest-first scheduling).
"""

from __future__ import annotations

import pytest


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line(
        "markers",
        "in_file_order(reason): this module's tests share state; run them in "
        "the file's order (say what they share)",
    )


def _keeps_file_order(item: pytest.Item) -> bool:
    if type(item).__module__.startswith("sybil"):
        return True
    marker = item.get_closest_marker("in_file_order")
    if marker is not None and not marker.kwargs.get("reason"):
        raise pytest.UsageError(f'{item.nodeid}: in_file_order needs reason="what the tests share"')
    return marker is not None


def _module_of(item: pytest.Item) -> str:
    return item.nodeid.split("::")[0]


def _place_in_file(item: pytest.Item) -> tuple[int, tuple[int, ...]]:
    callspec = getattr(item, "callspec", None)
    return item.reportinfo()[1] or 0, tuple(callspec.indices.values()) if callspec else ()


@pytest.hookimpl(trylast=True)  # after pytest-randomly has shuffled
def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    keeps = {id(item) for item in items if _keeps_file_order(item)}
    ordered: dict[str, list[pytest.Item]] = {}
    for item in items:
        if id(item) in keeps:
            ordered.setdefault(_module_of(item), []).append(item)
    for module in ordered.values():
        module.sort(key=_place_in_file)
    in_order = {module: iter(found) for module, found in ordered.items()}
    items[:] = [next(in_order[_module_of(item)]) if id(item) in keeps else item for item in items]
    slow_modules = {_module_of(item) for item in items if item.get_closest_marker("slow")}
    items.sort(key=lambda item: _module_of(item) not in slow_modules)  # stable: random order kept within
