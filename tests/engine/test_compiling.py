"""engine/compiling.py's rule on its own: compiled is used only when it wins beyond the noise and pays back
its compile time over the steps that remain (the measured runs: test_engine_compile.py)."""

from __future__ import annotations

from torchwork.engine.compiling import decide


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
