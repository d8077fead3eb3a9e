"""Forged artifacts whose model file runs as code: nothing in an artifact runs unless the caller asks.

The SHA-256s of an artifact's file table prove that its files are the ones exported, not who exported them:
anyone can replace a model file and rewrite manifest.json. Each forgery here writes into a victim file (or
creates a marker file) when it runs, with a manifest whose checksums match and, for TorchScript, whose
``deploy`` field names the forged variant.

- A TorchScript variant is a program (``torch.from_file(victim, shared=True).fill_(65)`` overwrote the
  victim): it loads only when named or trusted (``trust=("torchscript",)``), like a pt2-aoti native library
  (the tests beside this one in test_deploy_cpp.py).
- A pt2 program is data, but torch.export.load turns parts of its JSON into code: a node calling
  ``aten::from_file``, a symbolic size (run by ``sympy.sympify``), a guard (run by ``exec``), the forward's
  argument names (written into its source). Each is refused before torch reads the archive.
"""

from __future__ import annotations

import json
import re
import shutil
import zipfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from torchwork.deploy import export, load_artifact, verify
from torchwork.deploy.replay import replay_artifact
from torchwork.deploy.runtime import open_runner
from torchwork.deploy.trust import sha256_of
from torchwork.errors import ExportError

ORIGINAL = b"the victim's own contents\n"


@pytest.fixture(scope="module")
def exported(tmp_path_factory) -> Path:
    """A Linear(4, 3) in pt2, ONNX and TorchScript: exported in about a second."""
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("code-trust") / "linear"
    export(nn.Linear(4, 3), torch.randn(2, 4), out, formats=("pt2", "onnx", "torchscript"))
    return out


@pytest.fixture
def victim(tmp_path) -> Path:
    path = tmp_path / "victim.txt"
    path.write_bytes(ORIGINAL)
    return path


def _reseal(artifact: Path, name: str, **fields: Any) -> None:
    """Recompute one file's size and SHA-256 in the manifest, as a forger would, and set top-level fields."""
    manifest = json.loads((artifact / "manifest.json").read_text())
    manifest["files"][name].update(bytes=(artifact / name).stat().st_size, sha256=sha256_of(artifact / name))
    manifest.update(fields)
    (artifact / "manifest.json").write_text(json.dumps(manifest))


class Overwrite(nn.Module):
    """A forged forward: maps the victim file shared and overwrites its first 8 bytes with 'A'."""

    def __init__(self, victim: str) -> None:
        super().__init__()
        self.victim = victim

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        written = torch.from_file(self.victim, shared=True, size=8, dtype=torch.uint8)
        written.fill_(65)
        return torch.zeros(x.shape[0], 3) + written[:1].float() * 0


@pytest.fixture
def forged_torchscript(exported, victim, tmp_path) -> Path:
    artifact = tmp_path / "forged"
    shutil.copytree(exported, artifact)
    torch.jit.script(Overwrite(str(victim))).save(str(artifact / "model.torchscript.pt"))
    _reseal(artifact, "model.torchscript.pt", deploy="torchscript")
    return artifact


# ------------------------------------------------------------------------------------------------ TorchScript
def test_a_forged_torchscript_variant_is_not_the_default_even_when_the_manifest_marks_it(forged_torchscript,
                                                                                         victim):
    with pytest.warns(UserWarning, match="marks 'torchscript' to deploy, which runs as code; loading 'onnx'"):
        loaded = load_artifact(forged_torchscript)
    assert loaded.variant == "onnx"  # deploy says torchscript: the manifest cannot consent for the caller
    assert loaded(torch.randn(5, 4)).shape == (5, 3)
    assert victim.read_bytes() == ORIGINAL


def test_torchscript_runs_only_when_named_or_trusted(forged_torchscript, victim):
    with pytest.raises(ExportError, match=r"TorchScript program, which runs as code when called.*"
                                          r"trust=\('torchscript',\).*or choose another variant"):
        open_runner(forged_torchscript / "model.torchscript.pt", "torchscript")
    assert victim.read_bytes() == ORIGINAL
    assert load_artifact(forged_torchscript, "torchscript").variant == "torchscript"  # named: the consent
    assert victim.read_bytes().startswith(b"AAAAAAAA")  # the forgery is real: it ran once asked for
    victim.write_bytes(ORIGINAL)
    assert load_artifact(forged_torchscript, trust=("torchscript",)).variant == "torchscript"
    assert victim.read_bytes().startswith(b"AAAAAAAA")


def test_verify_lists_an_untrusted_torchscript_variant_as_not_loaded(forged_torchscript, victim):
    report = verify(forged_torchscript, rounds=1, threads=1)
    assert "torchscript" not in report["variants"] and set(report["variants"]) == {"pt2", "onnx"}
    assert "runs as code when called" in report["not_loaded"]["torchscript"]
    assert "--trust torchscript" in report["not_loaded"]["torchscript"]
    assert victim.read_bytes() == ORIGINAL


def test_serve_chooses_another_variant_than_a_forged_torchscript(forged_torchscript, victim):
    from torchwork.serve.artifact import DeclaredPredictor, predictor_from_artifact

    assert predictor_from_artifact(forged_torchscript, threads=1).variant == "onnx"
    assert DeclaredPredictor(forged_torchscript).variant == "onnx"  # the name a model process's server shows
    assert victim.read_bytes() == ORIGINAL


def test_replay_skips_an_untrusted_torchscript_variant(forged_torchscript, victim):
    results = {r.name: r for r in replay_artifact(forged_torchscript)}
    skipped = results["artifact torchscript on its recorded inputs"]
    assert skipped.skipped and "runs as code when called" in skipped.detail
    assert results["artifact onnx on its recorded inputs"].ok
    assert victim.read_bytes() == ORIGINAL


def test_an_artifact_of_torchscript_alone_says_how_to_load_it(tmp_path):
    out = tmp_path / "only-torchscript"
    export(nn.Linear(4, 3), torch.randn(2, 4), out, formats=("torchscript",))
    with pytest.raises(ExportError, match=r"'torchscript' is a TorchScript program.*name it "
                                          r"\(load_artifact\(dir, 'torchscript'\), --variant torchscript\)"):
        load_artifact(out)
    assert load_artifact(out, "torchscript")(torch.randn(2, 4)).shape == (2, 3)


# ------------------------------------------------------------------------------------------------ pt2
def _rewrite_program(artifact: Path, change: Callable[[dict[str, Any]], None]) -> None:
    """Edit model.pt2's program JSON and reseal the manifest, as a forger would."""
    path = artifact / "model.pt2"
    with zipfile.ZipFile(path) as source:
        entries = [(info, source.read(info)) for info in source.infolist()]
    with zipfile.ZipFile(path, "w") as target:
        for info, data in entries:
            if info.filename.endswith("models/model.json"):
                program = json.loads(data)
                change(program)
                data = json.dumps(program).encode()
            target.writestr(info, data)
    _reseal(artifact, "model.pt2")


def _tensor_meta(dtype: int, size: int) -> dict[str, Any]:
    return {"dtype": dtype, "sizes": [{"as_int": size}], "requires_grad": False,
            "device": {"type": "cpu", "index": None}, "strides": [{"as_int": 1}],
            "storage_offset": {"as_int": 0}, "layout": 7}


def _node(target: str, inputs: dict[str, dict[str, Any]], output: str) -> dict[str, Any]:
    """A node of the program's JSON (``dtype`` passed by keyword, as aten's schemas have it)."""
    return {"target": target, "inputs": [{"name": k, "arg": v, "kind": 2 if k == "dtype" else 1}
                                         for k, v in inputs.items()],
            "outputs": [{"as_tensor": {"name": output}}], "metadata": {}, "name": output}


def _from_file(victim: Path) -> Callable[[dict[str, Any]], None]:
    """Two nodes first: aten::from_file(victim, shared=True, size=8) as uint8, then aten::fill_(it, 65)."""
    def change(program: dict[str, Any]) -> None:
        graph = program["graph_module"]["graph"]
        opened = _node("torch.ops.aten.from_file.default", {
            "filename": {"as_string": str(victim)}, "shared": {"as_bool": True}, "size": {"as_int": 8},
            "dtype": {"as_scalar_type": 1}}, "opened")
        filled = _node("torch.ops.aten.fill_.Scalar", {"self": {"as_tensor": {"name": "opened"}},
                                                       "value": {"as_int": 65}}, "filled")
        graph["tensor_values"].update(opened=_tensor_meta(1, 8), filled=_tensor_meta(1, 8))
        graph["nodes"] = [opened, filled, *graph["nodes"]]
    return change


def _user_input(program: dict[str, Any]) -> str:
    specs = program["graph_module"]["signature"]["input_specs"]
    return next(s["user_input"]["arg"]["as_tensor"]["name"] for s in specs if "user_input" in s)


def _python(marker: Path) -> str:
    return f"__import__('pathlib').Path({str(marker)!r}).touch()"


def _symbolic_size(marker: Path) -> Callable[[dict[str, Any]], None]:
    """The batch size of the input: an expression sympy.sympify evaluates while torch.export.load reads it."""
    def change(program: dict[str, Any]) -> None:
        sizes = program["graph_module"]["graph"]["tensor_values"][_user_input(program)]["sizes"]
        sizes[0]["as_expr"]["expr_str"] = _python(marker)
    return change


def _guard(marker: Path) -> Callable[[dict[str, Any]], None]:
    """A guard: Python source torch runs with exec in the module's first call."""
    def change(program: dict[str, Any]) -> None:
        program["guards_code"] = [f"{_python(marker)} is None"]
    return change


def _argument_name(marker: Path) -> Callable[[dict[str, Any]], None]:
    """The forward's argument names (written into its source: a default runs when .module() builds it), on
    a graph left without inputs so that no other line of that source names them."""
    def change(program: dict[str, Any]) -> None:
        module = program["graph_module"]
        graph, signature = module["graph"], module["module_call_graph"][0]["signature"]
        name = _user_input(program)
        signature["forward_arg_names"] = [f"{name}={_python(marker)}"]
        signature["in_spec"] = json.dumps([1, {"type": "builtins.tuple", "context": "null", "children_spec": [
            {"type": "builtins.tuple", "context": "null", "children_spec": []},
            {"type": "builtins.dict", "context": "[]", "children_spec": []}]}])
        module["signature"]["input_specs"] = [s for s in module["signature"]["input_specs"] if "user_input" not in s]
        graph["inputs"] = [i for i in graph["inputs"] if i["as_tensor"]["name"] != name]
        bias = next(s["parameter"]["arg"]["name"] for s in module["signature"]["input_specs"]
                    if s["parameter"]["parameter_name"] == "bias")
        graph["nodes"] = [_node("torch.ops.aten.add.Tensor", {"self": {"as_tensor": {"name": bias}},
                                                              "other": {"as_tensor": {"name": bias}}}, "doubled")]
        graph["tensor_values"]["doubled"] = graph["tensor_values"][bias]
        module["signature"]["output_specs"][0]["user_output"]["arg"]["as_tensor"]["name"] = "doubled"
        graph["outputs"] = [{"as_tensor": {"name": "doubled"}}]
    return change


FORGERIES = {
    "a file opened by aten::from_file": (_from_file, r"calls aten::from_file, which opens a file"),
    "Python in a symbolic size": (_symbolic_size, r"expr_str .* calls an attribute or an expression"),
    "Python in a guard": (_guard, r"guards_code .* reads the attribute 'touch'"),
    "Python in the forward's argument names": (_argument_name, r"forward_arg_names .* is not a plain name"),
}


@pytest.mark.parametrize("forgery", list(FORGERIES))
def test_a_forged_pt2_program_that_would_run_code_is_refused_before_torch_reads_it(exported, victim, tmp_path,
                                                                                    forgery):
    make, message = FORGERIES[forgery]
    marker = tmp_path / "ran"
    artifact = tmp_path / "forged"
    shutil.copytree(exported, artifact)
    _rewrite_program(artifact, make(victim) if make is _from_file else make(marker))
    try:
        load_artifact(artifact, "pt2")
        refusal = None
    except ExportError as error:
        refusal = str(error)
    assert victim.read_bytes() == ORIGINAL and not marker.exists(), "the forged program ran"
    assert refusal is not None and re.search(message, refusal), refusal
    with pytest.raises(ExportError, match=message):  # verify's reference is the pt2 program
        verify(artifact, rounds=1, threads=1)
    assert load_artifact(artifact).variant == "onnx"
    assert victim.read_bytes() == ORIGINAL and not marker.exists()


class _Opens:
    """A pickle that, when loaded, creates the file it names (the smallest proof that pickle ran)."""

    def __init__(self, path: Path) -> None:
        self.path = path

    def __reduce__(self) -> tuple[Any, tuple[str, str]]:
        return open, (str(self.path), "w")


def test_a_pt2_archive_with_an_older_format_beside_it_is_refused_before_pickle_runs(exported, tmp_path):
    """torch.export.load falls back to the older format, read from the archive's root with full pickle, when
    the current one fails: here a program with an argument of an unknown kind."""
    import pickle

    from torch._export.serde.schema import SCHEMA_VERSION

    marker = tmp_path / "ran"
    artifact = tmp_path / "forged"
    shutil.copytree(exported, artifact)
    path = artifact / "model.pt2"
    with zipfile.ZipFile(path) as source:
        program = next(source.read(n) for n in source.namelist() if n.endswith("models/model.json"))
    _rewrite_program(artifact, lambda p: p["graph_module"]["graph"]["nodes"][0]["inputs"][0].update(
        arg={"as_unknown": 1}))
    with zipfile.ZipFile(path, "a") as archive:
        archive.writestr("version", ".".join(map(str, SCHEMA_VERSION)))
        archive.writestr("serialized_exported_program.json", program)
        for name in ("state_dict", "constants", "example_inputs"):
            archive.writestr(f"serialized_{name}.pt", pickle.dumps(_Opens(marker)))
    _reseal(artifact, "model.pt2")
    with pytest.raises(ExportError) as refused:
        load_artifact(artifact, "pt2")
    assert not marker.exists(), "pickle ran"
    assert "'version' lies outside the archive's one folder" in str(refused.value)


def test_the_exported_pt2_program_passes_the_check(exported):
    from torchwork.deploy.pt2_program import check_pt2_program

    check_pt2_program(exported / "model.pt2")
    x = torch.randn(3, 4)
    assert load_artifact(exported, "pt2")(x).shape == (3, 3)


def test_trust_and_variants_given_as_one_string_are_one_word(forged_torchscript, victim):
    """trust="torchscript" was iterated as its letters (nothing trusted, and 't', 'o', ... taken as module
    prefixes for the preprocessor class); variants="onnx" asked for the variants 'o', 'n' and 'x'."""
    assert load_artifact(forged_torchscript, trust="torchscript").variant == "torchscript"
    assert victim.read_bytes().startswith(b"AAAAAAAA")  # trusted as asked, and so it ran
    victim.write_bytes(ORIGINAL)
    report = verify(forged_torchscript, variants="onnx", rounds=1, threads=1)
    assert "onnx" in report["variants"] and "torchscript" not in report["variants"]
    assert victim.read_bytes() == ORIGINAL


@pytest.mark.parametrize(("settings", "message"), [
    pytest.param({"trust": 5}, r"^trust=5: give a name or a list of names", id="trust-int"),
    pytest.param({"trust": ["torchscript", 3]}, r"^trust: 3 is no name", id="trust-item"),
    pytest.param({"variants": [""]}, r"^variants: '' is no name", id="variants-empty"),
    pytest.param({"compile": "no"}, r"^compile='no': pass True or False", id="compile-str"),  # "no" compiled
    pytest.param({"cpp": 1}, r"^cpp=1: pass True or False", id="cpp-int"),
    pytest.param({"torch_ao": None}, r"^torch_ao=None: pass True or False", id="torch-ao-none"),
])
def test_verify_refuses_a_setting_of_the_wrong_shape_before_reading_the_artifact(tmp_path, settings, message):
    from torchwork.errors import ConfigError

    with pytest.raises(ConfigError, match=message):
        verify(tmp_path / "no-artifact-here", **settings)


def test_load_and_replay_refuse_a_trust_that_is_no_list_of_words(exported):
    from torchwork.errors import ConfigError

    for call in (lambda: load_artifact(exported, trust=7), lambda: replay_artifact(exported, trust=[b"native"])):
        with pytest.raises(ConfigError, match=r"^trust"):
            call()
