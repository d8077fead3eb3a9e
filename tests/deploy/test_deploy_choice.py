"""The variant to deploy: the decision on given timing samples (no timing assertions), and real verify runs."""

from __future__ import annotations

import json

import pytest
from deploy_helpers import digits, digits_cnn, images

from torchwork.cli import main as cli_main
from torchwork.deploy import export, format_report, verify
from torchwork.deploy.choice import MIN_PARITY_ROWS, choose_variant, most_exact, spread


def rows(**extra) -> dict:
    table = {"pt2": {"kind": "exact", "ok": True, "max_abs": 0.0, "max_rel": 0.0},
             "onnx": {"kind": "exact", "ok": True, "max_abs": 1.4e-6, "max_rel": 2e-7},
             "onnx-int8": {"kind": "quantized", "ok": True, "within_tolerance": True, "max_abs": 0.03,
                           "max_rel": 0.33}}
    for name, changes in extra.items():
        table[name.replace("_", "-")] = {**table[name.replace("_", "-")], **changes}
    return table


def samples(median: float, width: float, n: int = 20) -> list[float]:
    """n timings spread evenly over median +- width/2."""
    return [median - width / 2 + width * i / (n - 1) for i in range(n)]


def test_batch_one_latency_counts_beside_the_batch_of_64():
    level = {"pt2": samples(1.0, 0.1), "onnx": samples(1.0, 0.1), "onnx-int8": samples(1.0, 0.1)}
    # ONNX level with pt2 at batch 64 but 3.7x faster at batch 1: chosen, and the reason says where it wins
    latencies = {"pt2": samples(0.37, 0.02), "onnx": samples(0.1, 0.02), "onnx-int8": samples(0.1, 0.02)}
    chosen, why = choose_variant(rows(), level, inputs=360, latencies=latencies)
    assert chosen == "onnx" and "3.70x the speed of pt2 at batch 1, beyond the timing spread" in why["onnx"]
    assert why["onnx-int8"].startswith("not chosen")  # level with onnx at both sizes
    # INT8 2x faster at batch 64 but 3x slower at batch 1: not chosen, and the reason says so
    faster = {**level, "onnx-int8": samples(0.5, 0.05)}
    slow_single = {"pt2": samples(0.1, 0.02), "onnx": samples(0.1, 0.02), "onnx-int8": samples(0.3, 0.02)}
    chosen, why = choose_variant(rows(), faster, inputs=360, latencies=slow_single)
    assert chosen == "pt2" and "0.33x the speed of pt2 at batch 1, beyond the timing spread" in why["onnx-int8"]
    assert choose_variant(rows(), faster, inputs=360)[0] == "onnx-int8"  # batch 64 alone: as before


def test_four_example_inputs_never_recommend_int8_however_fast():
    timings = {"pt2": samples(1.0, 0.02), "onnx": samples(0.5, 0.02), "onnx-int8": samples(0.1, 0.02)}
    chosen, why = choose_variant(rows(), timings, inputs=4)
    assert chosen == "pt2"
    assert "checked on 4 inputs" in why["onnx-int8"] and f">= {MIN_PARITY_ROWS}" in why["onnx-int8"]
    assert why["pt2"].startswith("chosen: the most exact")


def test_a_variant_faster_beyond_the_spread_on_enough_inputs_is_recommended():
    timings = {"pt2": samples(1.0, 0.04), "onnx": samples(0.8, 0.04), "onnx-int8": samples(0.5, 0.04)}
    chosen, why = choose_variant(rows(), timings, inputs=360)
    assert chosen == "onnx-int8" and why["onnx-int8"].startswith("chosen: 1.60x the speed of onnx")
    assert why["onnx"].startswith("not chosen: onnx-int8 is measurably faster; 1.25x the speed of pt2")
    assert why["pt2"].startswith("not chosen: the most exact variant, but onnx-int8")


def test_each_candidate_is_compared_with_the_best_so_far_not_only_with_the_most_exact():
    # onnx is clearly faster than pt2; INT8 is 2% faster than onnx, inside their spread: onnx stays
    timings = {"pt2": samples(1.0, 0.04), "onnx": samples(0.5, 0.2), "onnx-int8": samples(0.49, 0.2)}
    chosen, why = choose_variant(rows(), timings, inputs=360)
    assert chosen == "onnx" and why["onnx"].startswith("chosen: 2.00x the speed of pt2")
    assert why["onnx-int8"].startswith("not chosen: 1.02x the speed of onnx, within the timing spread")


def test_a_gain_inside_the_timing_noise_keeps_the_most_exact_variant():
    # onnx is 3% faster at the median, but each variant's rounds spread over +-10%
    chosen, why = choose_variant(rows(), {"pt2": samples(1.0, 0.2), "onnx": samples(0.97, 0.2),
                                          "onnx-int8": samples(0.98, 0.2)}, inputs=360)
    assert chosen == "pt2"
    assert "within the timing spread" in why["onnx"] and "within the timing spread" in why["onnx-int8"]


def test_noise_that_reorders_the_medians_does_not_flip_the_choice():
    # two runs of the same machine: the medians swap order, the spreads overlap: the choice stays
    first = {"pt2": samples(1.00, 0.3), "onnx": samples(0.95, 0.3), "onnx-int8": samples(1.02, 0.3)}
    second = {"pt2": samples(0.97, 0.3), "onnx": samples(1.01, 0.3), "onnx-int8": samples(0.93, 0.3)}
    assert choose_variant(rows(), first, inputs=360)[0] == choose_variant(rows(), second, inputs=360)[0] == "pt2"


def test_too_few_rounds_and_failing_variants_are_said():
    chosen, why = choose_variant(rows(onnx_int8={"ok": False, "within_tolerance": False,
                                                 "problem": "accuracy 0.71 vs 0.95"}),
                                 {"pt2": [1.0, 1.0], "onnx": [0.1, 0.1], "onnx-int8": [0.1, 0.1]}, inputs=360)
    assert chosen == "pt2"
    assert "2 timing rounds; >= 5" in why["onnx"]
    assert why["onnx-int8"] == "not chosen: fails parity (accuracy 0.71 vs 0.95)"
    assert choose_variant({"onnx": {"kind": "exact", "ok": False, "problem": "outputs differ"}}, {}, 360)[0] is None


def test_most_exact_prefers_exact_kinds_then_the_smallest_error_and_spread_is_the_iqr():
    assert most_exact(rows(pt2={"ok": False})) == "onnx"
    assert most_exact({"onnx-int8": rows()["onnx-int8"]}) == "onnx-int8"
    assert most_exact({"onnx": rows()["onnx"], "pt2": {**rows()["pt2"], "kind": "reference"}}) == "pt2"
    assert spread([1.0, 2.0, 3.0, 4.0, 5.0]) == 2.0 and spread([1.0]) == 0.0


@pytest.fixture(scope="module")
def examples_only(tmp_path_factory):
    """A CNN on real digits, exported with INT8 and only its 4 example inputs (no held-out samples)."""
    out = tmp_path_factory.mktemp("examples") / "cnn"
    export(digits_cnn(), images(digits()["x_train"][:4]), out, formats=("pt2", "onnx"), quantize="int8")
    return out


@pytest.mark.slow
def test_verify_with_only_the_example_inputs_keeps_the_most_exact_variant(examples_only, capsys):
    assert cli_main(["verify", str(examples_only), "--json", "--rounds", "5", "--threads", "1"]) == 0
    report = json.loads(capsys.readouterr().out)
    assert report["inputs"]["count"] == 4 and report["inputs"]["source"].startswith("the export's example")
    assert report["deploy"] == "pt2"  # the reference itself: the most exact
    assert report["variants"]["onnx-int8"]["max_rel"] > 0  # INT8 differs; 4 rows cannot say how much it may
    for name in ("onnx", "onnx-int8"):
        assert "checked on 4 inputs" in report["variants"][name]["choice"]
    table = format_report(report)
    assert "pt2 *" in table and "onnx-int8: not chosen: parity was checked on 4 inputs" in table
    assert "±" in table  # the spread of the rounds is shown


@pytest.mark.slow
def test_verify_on_held_out_inputs_explains_every_choice(examples_only):
    data = digits()
    report = verify(examples_only, model=digits_cnn(), inputs=images(data["x_test"]), targets=data["y_test"],
                    rounds=5, threads=1, tolerance=0.02)
    assert report["inputs"]["count"] == 360
    variants = {n: r for n, r in report["variants"].items() if n != "eager"}
    assert all(row.get("choice") for row in variants.values())
    chosen = report["deploy"]
    assert variants[chosen]["choice"].startswith("chosen: ")
    if chosen != most_exact(variants):  # timing decides; whichever way, it is said why
        assert "beyond the timing spread" in variants[chosen]["choice"]
