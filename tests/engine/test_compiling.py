"""engine/compiling.py's rule on its own: compiled is used only when it wins beyond the noise and pays back
its compile time over the steps that remain (the measured runs: test_engine_compile.py)."""

from __future__ import annotations

import json
import os

import pytest
from fifo_guard import returns_within

from torchwork.engine.compiling import decide, record_in_manifest
from torchwork.errors import ConfigError


def test_the_rule_keeps_eager_unless_compiled_wins_beyond_noise_and_pays_back():
    noisy_eager, noisy_compiled = [0.010, 0.012, 0.009, 0.011, 0.010], [0.0098, 0.0105, 0.0091, 0.0120, 0.0099]
    use, reason, figures = decide(noisy_eager, noisy_compiled, 5.0, 100_000)
    assert not use and "not faster by more than the spread" in reason
    use, reason, figures = decide([0.010] * 5, [0.005] * 5, 30.0, 1_000)
    assert not use and figures["break_even_step"] == 6_000 and "6,000 steps and 1,000 remain" in reason
    use, reason, _ = decide([0.010] * 5, [0.005] * 5, 30.0, None)
    assert not use and "unknown" in reason
    use, reason, figures = decide([0.010] * 5, [0.005] * 5, 30.0, 10_000)
    assert use and figures["speedup"] == 2.0 and "pays after 6,000 of the 10,000 remaining steps" in reason



def test_the_report_goes_into_the_runs_own_manifest_read_bounded(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    manifest = run / "manifest.json"
    manifest.write_text(json.dumps({"config": {"epochs": 1}}))
    record_in_manifest(run, {"compiled": False})
    assert json.loads(manifest.read_text()) == {"config": {"epochs": 1}, "compile": {"compiled": False}}
    manifest.unlink()
    (tmp_path / "outside.json").write_text(json.dumps({"config": {"secret": 1}}))
    manifest.symlink_to(tmp_path / "outside.json")  # another file's content would be copied into the run
    with pytest.raises(ConfigError, match="leading out of its run folder"):
        record_in_manifest(run, {"compiled": False})
    assert manifest.is_symlink() and json.loads((tmp_path / "outside.json").read_text()) == {"config": {"secret": 1}}
    manifest.unlink()
    with manifest.open("wb") as out:
        out.truncate(17 * 2**20)  # sparse: refused unread, over the 16 MiB a manifest may be
    with pytest.raises(ConfigError, match="is over 16 MiB"):
        record_in_manifest(run, {"compiled": False})
    manifest.unlink()
    os.mkfifo(manifest)  # not a manifest: nothing recorded, nothing waited on
    assert returns_within(10, lambda: record_in_manifest(run, {"compiled": False}), manifest) is None
