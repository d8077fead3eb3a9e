"""deploy/plan.py: export()'s settings have one typed home, and the flat keywords stay its fields."""

from __future__ import annotations

import dataclasses
import inspect
import json
import typing
from pathlib import Path

import pytest
import torch
from type_check import type_errors

from torchwork.deploy import export
from torchwork.deploy.plan import ExportKeywords, ExportPlan
from torchwork.errors import ConfigError


def test_the_typed_flat_keywords_are_exactly_the_plans_fields() -> None:
    assert list(typing.get_type_hints(ExportKeywords)) == [f.name for f in dataclasses.fields(ExportPlan)]


@pytest.mark.slow
def test_a_type_checker_flags_a_misspelt_or_mistyped_flat_keyword(tmp_path: Path) -> None:
    errors, output = type_errors(tmp_path, """
        import torch
        from torchwork.deploy import ExportPlan, export
        model, x = torch.nn.Linear(2, 2), torch.randn(2, 2)
        export(model, x, "a", formats=("onnx",), quantize="int8", batch_sizes=(1, 8))
        export(model, x, "b", ExportPlan(formats="onnx", quantize="int8"), overwrite=True)
        export(model, x, "c", quantise="int8")
        export(model, x, "d", verify_rounds="5")
    """)
    assert len(errors) == 2, output
    assert 'Unexpected keyword argument "quantise" for "export"; did you mean "quantize"?' in errors[0]
    assert 'Argument "verify_rounds" to "export" has incompatible type "str"; expected "int"' in errors[1]


def test_every_plan_field_keeps_the_default_export_had() -> None:
    # the flat form builds ExportPlan(**keywords): a field's default is what export() used when not given
    defaults = {f.name: f.default for f in dataclasses.fields(ExportPlan)}
    assert defaults["formats"] == ("pt2", "onnx") and defaults["batch_sizes"] == (1, 3, 64)
    assert defaults["strict"] is True and defaults["tolerance"] == 0.01 and defaults["verify_rounds"] == 20
    assert list(inspect.signature(export).parameters) == ["model", "example_inputs", "out_dir", "plan", "overwrite",
                                                          "keywords"]


def test_a_plan_and_the_flat_keywords_write_the_same_artifact(tmp_path: Path) -> None:
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.ReLU(), torch.nn.Linear(8, 3))
    x = torch.randn(2, 4)
    flat = export(model, x, tmp_path / "flat", formats=("pt2",), batch_sizes=(1, 5), labels=["a", "b", "c"])
    planned = export(model, x, tmp_path / "plan", ExportPlan(formats=("pt2",), batch_sizes=(1, 5),
                                                            labels=["a", "b", "c"]))
    assert flat["ok"] and planned["ok"] and flat["variants"] == planned["variants"] == ["pt2"]
    assert (json.loads((tmp_path / "flat" / "manifest.json").read_text())["postprocess"]
            == json.loads((tmp_path / "plan" / "manifest.json").read_text())["postprocess"])
    positional = export(model, x, tmp_path / "positional", "pt2")  # where earlier versions took the formats
    assert positional["variants"] == ["pt2"]


def test_a_plan_and_flat_keywords_together_or_a_misspelt_one_are_refused(tmp_path: Path) -> None:
    model, x = torch.nn.Linear(4, 2), torch.randn(2, 4)
    with pytest.raises(ConfigError, match=r"quantize= and an ExportPlan both given: put them into the plan"):
        export(model, x, tmp_path / "a", ExportPlan(formats=("onnx",)), quantize="int8")
    with pytest.raises(TypeError, match="export\\(\\) got an unexpected keyword argument 'quantise'"):
        export(model, x, tmp_path / "b", quantise="int8")  # type: ignore[call-arg]
    with pytest.raises(ConfigError, match="batch_sizes=\\(0,\\): each must be a whole number from 1 to 65,536"):
        ExportPlan(batch_sizes=(0,))
    assert not (tmp_path / "a").exists() and not (tmp_path / "b").exists()


@pytest.mark.parametrize(("field", "value", "message"), [
    ("atol", float("nan"), r"atol=nan: a parity tolerance is a finite number >= 0"),
    ("rtol", -1e-3, r"rtol=-0\.001: a parity tolerance is a finite number >= 0"),
    ("atol", float("inf"), r"atol=inf"),
    ("tolerance", float("nan"), r"tolerance=nan: the accuracy a quantized variant may lose"),
    ("tolerance", 2.0, r"tolerance=2\.0"),
    ("atol", 10**400, r"atol=<an integer of 401 digits or so>: a parity tolerance"),  # was OverflowError
    pytest.param("verify_rounds", 10**5000, r"verify_rounds=<an integer of 5001 digits or so>",
                 id="verify_rounds-5001-digits"),  # was ValueError: repr refuses 4,300 digits
    # probe sizes: a fraction was truncated (2.5 probed 2), True probed 1, 10**9 rows went to the model,
    # and lengths were not checked at all (0, -3, 'x' reached the probes)
    ("batch_sizes", (2.5,), r"batch_sizes=\(2\.5,\): each must be a whole number from 1 to 65,536 \(2\.5 is not\)"),
    ("batch_sizes", (1, True), r"\(True is not\)"),
    ("batch_sizes", (10**9,), r"\(1000000000 is not\)"),
    ("batch_sizes", 4, r"batch_sizes=4: pass a list of whole numbers"),
    ("batch_sizes", (), r"\(none was given\)"),
    ("lengths", (0,), r"lengths=\(0,\): each must be a whole number from 1 to 16,777,216 \(0 is not\)"),
    ("lengths", (8, "x"), r"\('x' is not\)"),
    ("tolerance", 10**400, r"tolerance=<an integer of 401 digits or so>: the accuracy"),
    ("verify_rounds", 0, r"verify_rounds=0: the timing rounds are a count from 1"),
    ("verify_rounds", 10**9, r"verify_rounds=1000000000"),
    ("max_length", 2**40, r"max_length=1099511627776: .* at least 2 .* at most 16,777,216"),
])
def test_a_tolerance_rounds_or_length_out_of_range_is_refused_before_any_work(tmp_path: Path, field: str,
                                                                              value: object, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        ExportPlan(**{field: value})
    with pytest.raises(ConfigError, match=message):
        export(torch.nn.Linear(2, 2), torch.randn(2, 2), tmp_path / "out", formats=("onnx",), **{field: value})
    assert not (tmp_path / "out").exists()


@pytest.mark.parametrize(("keyword", "value", "message"), [
    ("atol", float("nan"), r"atol=nan"), ("rtol", float("inf"), r"rtol=inf"), ("rounds", 0, r"rounds=0"),
    ("tolerance", float("inf"), r"tolerance=inf"), ("threads", 10**7, r"threads=10000000 is more than"),
])
def test_verify_refuses_the_same_settings_before_reading_the_artifact(tmp_path: Path, keyword: str, value: object,
                                                                      message: str) -> None:
    from torchwork.deploy import verify

    with pytest.raises(ConfigError, match=message):  # the folder does not exist: the settings come first
        verify(tmp_path / "no-artifact-here", **{keyword: value})


@pytest.mark.parametrize(("threads", "message"), [
    (10**7, r"threads=10000000 is more than"), (-2, r"threads=-2: use 'auto'"), (2.5, r"threads=2\.5: use 'auto'"),
], ids=["ten-million", "negative", "fraction"])
def test_load_artifact_refuses_a_thread_count_before_reading_the_artifact(tmp_path: Path, threads: object,
                                                                          message: str) -> None:
    from torchwork.deploy import load_artifact

    with pytest.raises(ConfigError, match=message):  # reached ONNX Runtime's session options before
        load_artifact(tmp_path / "no-artifact-here", threads=threads)


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"overwrite": "no"}, r"^overwrite='no': pass True or False", id="overwrite-str"),  # it replaced
    pytest.param({"strict": "no"}, r"^strict='no': pass True or False", id="strict-str"),
    pytest.param({"cpp": "no"}, r"^cpp='no': pass True or False", id="cpp-str"),  # asked for the C++ runner
    pytest.param({"dynamic_batch": 0}, r"^dynamic_batch=0: pass True or False", id="dynamic-batch-int"),
    pytest.param({"dynamic_length": "yes"}, r"^dynamic_length='yes'", id="dynamic-length-str"),
    pytest.param({"labels": "pos"}, r"^labels='pos': give the class names as a list", id="labels-str"),
    pytest.param({"labels": ["a", 1]}, r"^labels: 1 is no name", id="labels-int"),
    pytest.param({"quantize_ops": 5, "quantize": "int8"}, r"^quantize_ops=5: give a name", id="ops-int"),
])
def test_a_flag_or_a_list_of_names_of_the_wrong_shape_is_refused_before_any_work(tmp_path: Path, settings,
                                                                                 message) -> None:
    out = tmp_path / "artifact"
    with pytest.raises(ConfigError, match=message):
        export(torch.nn.Linear(2, 2), torch.randn(2, 2), out, formats=("onnx",), **settings)
    assert not out.exists() and list(tmp_path.iterdir()) == []


def test_one_name_may_be_a_string_where_a_list_of_names_goes() -> None:
    """quantize_ops="MatMul" was the ops 'M', 'a', 't', ..., refused only after every format was exported."""
    plan = ExportPlan(formats="onnx", quantize="int8", quantize_ops="MatMul", input_names="x", output_names="y")
    assert (plan.formats, plan.quantize_ops, plan.input_names, plan.output_names) == (
        ["onnx"], ("MatMul",), ("x",), ("y",))
