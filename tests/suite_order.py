"""The order the suite runs in: random (pytest-randomly, seeded, the seed printed), with two exceptions.

- Tests that share state on purpose run in their file's order: the Python blocks of one documentation page
  (Sybil: one namespace per page), and a module marked ``pytest.mark.in_file_order(reason=...)`` (a story
  told to one server: keys rotated, versions reloaded), whose reason says what its tests share.
- The longest modules go first, so that under xdist they start while the short ones fill the gaps, instead
  of one of them starting last and running alone (longest-first scheduling, within a few percent of the best
  order for this many workers). How long a module takes comes from ``module_seconds.json``, written from a
  whole run's ``--suite-timeline`` (``python tests/suite_order.py TIMELINE > tests/module_seconds.json``);
  a module it does not name yet counts as a minute when it has a test marked slow, else as nothing. A stale
  file costs time, never a result: modules of equal cost keep their random order.
"""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest

RECORDED = Path(__file__).with_name("module_seconds.json")
UNRECORDED_SLOW_S = 60.0


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
    cost = _module_costs(items)
    items.sort(key=lambda item: -cost[_module_of(item)])  # stable: the random order kept among equal costs


def _module_costs(items: list[pytest.Item]) -> dict[str, float]:
    recorded: dict[str, float] = json.loads(RECORDED.read_text()) if RECORDED.is_file() else {}
    slow = {_module_of(item) for item in items if item.get_closest_marker("slow")}
    return module_costs({_module_of(item) for item in items}, slow, recorded)


def module_costs(modules: set[str], slow: set[str], recorded: dict[str, float]) -> dict[str, float]:
    """Each module's expected seconds: as recorded, else a minute for one with a slow test, else nothing."""
    return {module: recorded.get(module, UNRECORDED_SLOW_S if module in slow else 0.0) for module in modules}


def module_seconds(timeline: Path) -> dict[str, float]:
    """Each module's seconds (setup, call and teardown of its tests) in a ``--suite-timeline`` file."""
    seconds: Counter[str] = Counter()
    for line in timeline.read_text().splitlines():
        phase = json.loads(line)
        seconds[phase["test"].split("::")[0]] += phase["stop"] - phase["start"]
    return {module: round(total, 1) for module, total in sorted(seconds.items()) if total >= 1.0}


if __name__ == "__main__":
    print(json.dumps(module_seconds(Path(sys.argv[1])), indent=1))
