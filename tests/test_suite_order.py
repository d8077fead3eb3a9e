"""The suite's order: the longest modules first, from what a whole run's timeline recorded."""

from __future__ import annotations

import json
from pathlib import Path

from suite_order import UNRECORDED_SLOW_S, module_costs, module_seconds


def test_module_seconds_add_up_each_modules_phases_from_a_timeline(tmp_path: Path) -> None:
    phases = [("tests/a/test_x.py::test_one", "setup", 0.0, 4.0), ("tests/a/test_x.py::test_one", "call", 4.0, 10.5),
              ("tests/a/test_x.py::test_two", "call", 11.0, 12.0), ("tests/b/test_y.py::test_tiny", "call", 0.0, 0.2)]
    timeline = tmp_path / "timeline.jsonl"
    timeline.write_text("".join(json.dumps({"test": test, "when": when, "worker": "gw0", "start": start,
                                            "stop": stop, "cpu": None}) + "\n" for test, when, start, stop in phases))
    assert module_seconds(timeline) == {"tests/a/test_x.py": 11.5}  # under a second: not worth recording


def test_a_module_not_recorded_yet_counts_a_minute_when_it_has_a_slow_test() -> None:
    costs = module_costs({"old.py", "new_slow.py", "new_quick.py"}, {"new_slow.py"}, {"old.py": 120.0})
    assert costs == {"old.py": 120.0, "new_slow.py": UNRECORDED_SLOW_S, "new_quick.py": 0.0}


def test_the_recorded_seconds_name_only_modules_that_exist() -> None:
    recorded = json.loads(Path(__file__).with_name("module_seconds.json").read_text())
    root = Path(__file__).resolve().parents[1]
    assert [module for module in recorded if not (root / module).is_file()] == []
