"""The C++ runner: built against the torch wheel's libtorch, it runs pt2-aoti and TorchScript artifacts
without Python, matches eager within 1e-5 on the digits MLP and the Fashion-MNIST CNN, and refuses an
artifact whose checksums fail.

The runner is built once per test session (about a minute on two cores; the time is printed) in a session
temporary cache, or in ``$TORCHWORK_CPP_CACHE`` when set, which is reused across sessions. The hostile-file
tests (cpp_hostile.py) feed many files to one ``torchwork-run --check`` process: each process pays libtorch's
start-up (about 0.4 s here), so only the runs a user makes are separate processes.
"""

from __future__ import annotations

import copy
import hashlib
import json
import os
import random
import re
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import torch
from cpp_hostile import HOSTILE_INPUTS, declared_slices, mutated_input, mutated_manifest, one_input
from deploy_helpers import digits, digits_mlp, one_thread
from torch import nn

from torchwork import Trainer
from torchwork.deploy import export, load_weights, verify
from torchwork.deploy.cpp_runner import SOURCES, TEMPLATE, build_runner, run_cpp
from torchwork.deploy.manifest import read_manifest
from torchwork.deploy.tensors import load_tensors
from torchwork.deploy.trust import check_file_table
from torchwork.errors import ConfigError, ExportError

TOOLS = ("cmake", "ninja", "c++")
needs_tools = pytest.mark.skipif(any(shutil.which(t) is None for t in TOOLS),
                                 reason="cmake, ninja and g++ are not installed (sudo apt-get install cmake "
                                        "ninja-build g++; `make system-deps` does it)")


def _fashion_installed() -> bool:
    return shutil.which("dpkg") is not None and subprocess.run(
        ["dpkg", "-s", "dataset-fashion-mnist"], capture_output=True).returncode == 0


@pytest.fixture(scope="session")
def cpp_cache(tmp_path_factory):
    return os.environ.get("TORCHWORK_CPP_CACHE") or str(tmp_path_factory.mktemp("cpp-cache"))


@pytest.fixture(scope="session")
def runner(cpp_cache):
    started = time.perf_counter()
    build = build_runner(cpp_cache, quiet=True)
    print(f"\nC++ runner: {'reused' if build.cached else 'built'} in {time.perf_counter() - started:.1f} s "
          f"({build.binary})", file=sys.stderr)
    return build


@pytest.fixture(scope="module")
def digits_artifact(tmp_path_factory):
    data = digits()
    out = tmp_path_factory.mktemp("cpp") / "digits"
    with one_thread():
        export(digits_mlp(), data["x_test"][:8], out, formats=("pt2-aoti", "torchscript"), samples=data["x_test"],
               targets=data["y_test"], cpp=True, verify_rounds=3)
    return out


@pytest.mark.slow(reason="builds the C++ runner with CMake (once a run) and exports an AOTI package")
@needs_tools
def test_cpp_runner_matches_eager_on_the_digits_mlp(digits_artifact, runner, cpp_cache):
    data = digits()
    with one_thread():
        report = verify(digits_artifact, model=digits_mlp(), cpp=True, cpp_cache=cpp_cache, rounds=3,
                        trust=("native",))
    row = report["variants"]["cpp"]
    assert report["ok"] and row["ok"] and row["runs"] == "pt2-aoti"
    assert row["max_abs"] <= 1e-5, row
    assert row["latency_b1_ms"] > 0 and row["throughput_b64_per_s"] > 0 and row["latency_ratio"] > 0
    assert report["variants"]["pt2-aoti"]["max_abs"] <= 1e-5
    eager = copy.deepcopy(digits_mlp()).eval()(data["x_test"]).argmax(dim=1)
    assert row["accuracy"] == pytest.approx(float((eager == data["y_test"]).double().mean()))
    # the TorchScript variant through torch::jit::load, on the bundled examples (the runner's default inputs)
    outputs, info = run_cpp(runner.binary, digits_artifact, "torchscript", (data["x_test"][:8],))
    with torch.no_grad():
        expected = copy.deepcopy(digits_mlp()).eval()(data["x_test"][:8])
    assert info["outputs"][0]["shape"] == [8, 10]
    assert (outputs[0] - expected).abs().max() <= 1e-5


@pytest.mark.slow
@needs_tools
def test_artifact_carries_the_runner_sources_under_its_checksums(digits_artifact):
    manifest = read_manifest(digits_artifact)
    for name in SOURCES:
        assert f"cpp/{name}" in manifest.files
        assert (digits_artifact / "cpp" / name).read_bytes() == (TEMPLATE / name).read_bytes()
    assert manifest.variants["pt2-aoti"].file == "model.aoti.pt2"


@pytest.mark.slow
@needs_tools
def test_cpp_runner_refuses_a_tampered_artifact(digits_artifact, runner, tmp_path):
    copy = tmp_path / "tampered"
    shutil.copytree(digits_artifact, copy)
    model = copy / "model.aoti.pt2"
    data = bytearray(model.read_bytes())
    data[len(data) // 2] ^= 0xFF  # same size, one byte changed
    model.write_bytes(bytes(data))
    done = subprocess.run([str(runner.binary), str(copy)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3, done.stderr
    assert "model.aoti.pt2: SHA-256 differs from the manifest" in done.stderr
    assert done.stdout == ""
    with pytest.raises(ExportError, match="refused the artifact: .*SHA-256 differs"):
        run_cpp(runner.binary, copy, "pt2-aoti", (digits()["x_test"][:2],))
    with pytest.raises(ExportError, match="SHA-256 differs"):  # like the Python loader
        read_manifest(copy)

    # a file table naming a path outside the artifact
    forged = tmp_path / "forged"
    shutil.copytree(digits_artifact, forged)
    manifest = json.loads((forged / "manifest.json").read_text())
    manifest["files"]["../outside"] = {"bytes": 1, "sha256": "0" * 64}
    (forged / "manifest.json").write_text(json.dumps(manifest))
    done = subprocess.run([str(runner.binary), str(forged)], capture_output=True, text=True, timeout=120)
    assert done.returncode == 3 and "not a plain relative path" in done.stderr


@pytest.mark.slow(reason="trains a Fashion CNN, compiles it with AOTInductor and runs it in the C++ runner: "
                         "47 s with two workers, 74 s with three (5 Dec)")
@needs_tools
@pytest.mark.skipif(not _fashion_installed(), reason="Debian's dataset-fashion-mnist is not installed "
                                                      "(sudo apt-get install dataset-fashion-mnist)")
def test_cpp_runner_matches_eager_on_the_fashion_cnn(runner, cpp_cache, tmp_path):
    from torchwork.data import load_dataset
    from torchwork.recipes.models import AdaptiveDepthCNN

    dataset = load_dataset("fashion_mnist")
    train = [dataset.train[i] for i in range(256)]
    images = torch.stack([image for image, _ in train])
    labels = torch.tensor([int(label) for _, label in train])
    test_images = torch.stack([dataset.test[i][0] for i in range(128)])
    test_labels = [int(dataset.test[i][1]) for i in range(128)]
    with one_thread():
        torch.manual_seed(0)
        model = AdaptiveDepthCNN(len(dataset.classes), channels=8)
        batches = [(images[s:s + 64], labels[s:s + 64]) for s in range(0, 256, 64)]
        Trainer(model, torch.optim.AdamW(model.parameters(), lr=3e-3), nn.CrossEntropyLoss(), device="cpu",
                progress=False).fit(batches, epochs=1)
        out = tmp_path / "fashion"
        export(model, test_images[:8], out, formats=("pt2-aoti",), samples=test_images, targets=test_labels,
               verify_rounds=3)
        report = verify(out, model=model, cpp=True, cpp_cache=cpp_cache, rounds=3)
    row = report["variants"]["cpp"]
    assert row["ok"] and row["runs"] == "pt2-aoti" and row["max_abs"] <= 1e-5, row
    assert "pt2-aoti" in report["not_loaded"]  # verify loads the native library only when trusted or named


def test_cpp_needs_a_variant_the_runner_loads(tmp_path):
    model = nn.Linear(4, 2)
    with pytest.raises(ConfigError, match="cpp=True .* 'pt2-aoti' or 'torchscript'"):
        export(model, torch.randn(2, 4), tmp_path / "a", formats=("pt2",), cpp=True)
    assert not (tmp_path / "a").exists()


def test_cpp_row_needs_a_runnable_variant(tmp_path):
    export(nn.Linear(4, 2), torch.randn(2, 4), tmp_path / "a", formats=("pt2",))
    with pytest.raises(ConfigError, match="no variant the C\\+\\+ runner loads"):
        verify(tmp_path / "a", cpp=True, rounds=1)


def test_missing_build_tools_are_named_with_the_install_command(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(ConfigError, match="apt-get install cmake ninja-build g\\+\\+"):
        build_runner(tmp_path / "cache")
    assert not (tmp_path / "cache").exists()


@pytest.mark.slow
@needs_tools
def test_a_native_library_loads_only_when_named_or_trusted(digits_artifact):
    from torchwork.deploy import load_artifact
    from torchwork.deploy.runtime import open_runner

    x = digits()["x_test"][:4]
    with pytest.raises(ExportError, match="runs as code"):  # both variants are code: neither is the default
        load_artifact(digits_artifact)
    assert load_artifact(digits_artifact, trust=("torchscript",)).variant == "torchscript"
    assert load_artifact(digits_artifact, trust=("native",)).variant == "pt2-aoti"
    assert load_artifact(digits_artifact, trust=("native", "torchscript")).variant in ("pt2-aoti", "torchscript")
    named = load_artifact(digits_artifact, "pt2-aoti")
    with torch.no_grad():
        assert (named(x) - copy.deepcopy(digits_mlp()).eval()(x)).abs().max() <= 1e-5
    with pytest.raises(ExportError, match="native shared library, which runs as code when loaded"):
        open_runner(digits_artifact / "model.aoti.pt2", "pt2-aoti")
    with one_thread():
        report = verify(digits_artifact, model=digits_mlp(), rounds=1)
    assert {"pt2-aoti", "torchscript"} <= set(report["not_loaded"]) and "pt2-aoti" not in report["variants"]


def _aoti_libraries_mapped() -> int:
    """How many mappings of this process come from an AOTInductor package's library (-1: unknown)."""
    maps = Path("/proc/self/maps")
    return sum("aotinductor" in line for line in maps.read_text().splitlines()) if maps.exists() else -1


@pytest.mark.slow
@needs_tools
def test_a_native_library_passed_off_as_a_pt2_program_is_never_loaded(digits_artifact, tmp_path):
    """torch.export.load loads the AOTInductor library of any archive it reads (data/aotinductor/): the
    package copied over as a pt2 variant, the manifest resealed, would be native code loaded by default."""
    from torchwork.deploy import load_artifact

    forged = tmp_path / "forged"
    shutil.copytree(digits_artifact, forged)
    shutil.copy(forged / "model.aoti.pt2", forged / "model.pt2")
    manifest = json.loads((forged / "manifest.json").read_text())
    manifest["variants"]["pt2"] = {"file": "model.pt2", "format": "pt2"}
    manifest["files"]["model.pt2"] = dict(manifest["files"]["model.aoti.pt2"])
    manifest["deploy"] = "pt2"
    (forged / "manifest.json").write_text(json.dumps(manifest))
    before = _aoti_libraries_mapped()
    with pytest.raises(ExportError) as refused:
        load_artifact(forged)
    assert _aoti_libraries_mapped() == before, "the native library was loaded"
    assert "an AOTInductor library inside a pt2 program" in str(refused.value)


# ------------------------------------------------------------------------------------------ hostile files


@pytest.fixture(scope="module")
def linear_artifact(tmp_path_factory):
    """A TorchScript nn.Linear(4, 2): exported in a tenth of a second, its files hashed in microseconds."""
    torch.manual_seed(0)
    out = tmp_path_factory.mktemp("cpp-linear") / "linear"
    export(nn.Linear(4, 2), torch.randn(2, 4), out, formats=("torchscript",))
    return out


def _run(runner, *args: object) -> subprocess.CompletedProcess[str]:
    return subprocess.run([str(runner.binary), *map(str, args)], capture_output=True, text=True, timeout=120)


def _check(runner, paths: list[Path]) -> list[dict]:
    """``torchwork-run --check PATHS``: one verdict a path, and never a signal."""
    done = _run(runner, "--check", *paths)
    assert done.returncode in (0, 3), (done.returncode, done.stderr[-2000:])
    lines = [json.loads(line) for line in done.stdout.splitlines()]
    assert [line["path"] for line in lines] == [str(path) for path in paths]
    return lines


def _with_file(artifact: Path, copy: Path, name: str, content: bytes, write: bool = True) -> Path:
    """A copy of ``artifact`` holding ``name`` with ``content`` (``write=False``: planted already, as a link or a
    FIFO), its file table updated to match, as a forger would."""
    if not copy.exists():
        shutil.copytree(artifact, copy)
    if write:
        (copy / name).write_bytes(content)
    manifest = json.loads((copy / "manifest.json").read_text())
    manifest["files"][name] = {"bytes": len(content), "sha256": hashlib.sha256(content).hexdigest()}
    (copy / "manifest.json").write_text(json.dumps(manifest))
    return copy


@pytest.mark.slow
@needs_tools
def test_cpp_runner_refuses_inputs_whose_header_points_outside_the_file(runner, linear_artifact, tmp_path):
    files, artifacts = [], []
    for index, (blob, _) in enumerate(HOSTILE_INPUTS.values()):
        files.append(tmp_path / f"inputs-{index}.safetensors")
        files[-1].write_bytes(blob)
        artifacts.append(_with_file(linear_artifact, tmp_path / f"artifact-{index}", "examples.safetensors", blob))
    # the file, run as a user runs it (exit 0 with heap bytes as inputs, before): --inputs, and an
    # artifact's own examples.safetensors
    out = tmp_path / "outputs.safetensors"
    for args in ((linear_artifact, "--inputs", files[0]), (artifacts[0],)):
        done = _run(runner, *args, "--outputs", out)
        assert done.returncode == 4 and done.stdout == "" and not out.exists(), done
        assert done.stderr.count("\n") == 1 and "data_offsets that are not two whole numbers" in done.stderr

    # a valid file runs, and the outputs are the model's on the file's own bytes
    valid = _with_file(linear_artifact, tmp_path / "valid", "examples.safetensors", one_input())
    done = _run(runner, valid, "--outputs", out)
    assert done.returncode == 0, done.stderr
    weights = load_weights(valid)
    x = torch.frombuffer(bytearray(range(32)), dtype=torch.float32).view(2, 4)
    expected = x @ weights["weight"].T + weights["bias"]
    assert torch.allclose(load_tensors(out)["output_0"], expected, equal_nan=True)

    # every hostile file, through --inputs and as an artifact's own examples, in one process
    lines = _check(runner, files + artifacts)
    for name, by_file, by_artifact in zip(HOSTILE_INPUTS, lines, lines[len(files):]):
        expected = HOSTILE_INPUTS[name][1]
        assert not by_file["ok"] and expected in by_file["error"], (name, by_file)
        assert not by_artifact["ok"] and expected in by_artifact["error"], (name, by_artifact)


@pytest.mark.slow
@needs_tools
def test_cpp_runner_refuses_links_and_special_files_as_the_python_loader_does(runner, linear_artifact, tmp_path):
    cases = {"passwd": "extra leads outside the folder (to /etc/passwd)",
             "zero": "extra leads outside the folder (to /dev/zero)",  # 0 bytes: hashed for ever, before
             "fifo": "extra is not a regular file (a FIFO)",  # read for ever, before
             "examples": "examples.safetensors leads outside the folder",
             "manifest": "manifest.json leads outside the folder"}
    outside = tmp_path / "outside"
    outside.mkdir()
    for kind, expected in cases.items():
        artifact = tmp_path / kind
        shutil.copytree(linear_artifact, artifact)
        if kind == "passwd":
            os.symlink("/etc/passwd", artifact / "extra")
            _with_file(linear_artifact, artifact, "extra", Path("/etc/passwd").read_bytes(), write=False)
        elif kind == "zero":
            os.symlink("/dev/zero", artifact / "extra")
            _with_file(linear_artifact, artifact, "extra", b"", write=False)
        elif kind == "fifo":
            os.mkfifo(artifact / "extra")
            _with_file(linear_artifact, artifact, "extra", b"", write=False)
        else:  # the file moved out, a link left in its place: same bytes, same checksum
            name = "examples.safetensors" if kind == "examples" else "manifest.json"
            shutil.move(artifact / name, outside / name)
            os.symlink(outside / name, artifact / name)
        done = _run(runner, artifact)
        assert done.returncode == 3 and done.stdout == "", (kind, done)
        assert done.stderr.count("\n") == 1 and expected in done.stderr, (kind, done.stderr)
        with pytest.raises(ExportError, match=re.escape(expected)):  # the Python loader, in the same words
            read_manifest(artifact)

    # a link that stays inside the artifact is fine, for both
    inside = tmp_path / "inside"
    shutil.copytree(linear_artifact, inside)
    os.symlink("examples.safetensors", inside / "alias.safetensors")
    _with_file(linear_artifact, inside, "alias.safetensors", (inside / "examples.safetensors").read_bytes(),
               write=False)
    assert _run(runner, inside).returncode == 0
    read_manifest(inside)


@pytest.mark.slow
@needs_tools
def test_cpp_runner_fuzzed_inputs_are_read_from_their_file_or_refused(runner, tmp_path):
    rng = random.Random(49)
    mutations, paths = [], []
    for index in range(200):
        what, blob = mutated_input(rng)
        mutations.append(what)
        paths.append(tmp_path / f"{index}.safetensors")
        paths[-1].write_bytes(blob)
    accepted = 0
    for what, path, line in zip(mutations, paths, _check(runner, paths)):
        if not line["ok"]:
            assert line["error"].startswith(str(path)) or line["error"].startswith("cannot"), (what, line)
            continue
        accepted += 1
        slices = declared_slices(path.read_bytes())  # raises when the runner accepted a header it should not
        for tensor in line["inputs"]:  # the bytes the runner read are the ones the header declares, in the file
            assert tensor["sha256"] == hashlib.sha256(slices[tensor["name"]]).hexdigest(), (what, tensor)
    assert 20 <= accepted <= 180, accepted  # both sides of the check exercised


def _python_loader_accepts(root: Path) -> None:
    """What the runner checks, checked by torchwork's Python loader: raises when it refuses."""
    data = json.loads((root / "manifest.json").read_bytes())
    check_file_table(root, data["files"])  # a link out, a FIFO, a size or SHA-256 that differs
    assert data.get("examples", "examples.safetensors") in data["files"]
    assert data["variants"]["torchscript"]["file"] in data["files"]
    assert "input_0" in load_tensors(root / data.get("examples", "examples.safetensors"))


@pytest.mark.slow
@needs_tools
def test_cpp_runner_fuzzed_manifests_pass_only_what_the_python_loader_accepts(runner, linear_artifact, tmp_path):
    rng = random.Random(49)
    manifest = json.loads((linear_artifact / "manifest.json").read_text())
    mutations, roots = [], []
    for index in range(100):
        roots.append(tmp_path / f"artifact-{index}")
        shutil.copytree(linear_artifact, roots[-1])
        what, text = mutated_manifest(rng, manifest, roots[-1])
        mutations.append(what)
        (roots[-1] / "manifest.json").write_bytes(text)
    accepted = 0
    for what, root, line in zip(mutations, roots, _check(runner, roots)):
        if line["ok"]:
            accepted += 1
            _python_loader_accepts(root)
        else:
            assert line["error"].startswith(("artifact ", str(root))), (what, line)
            assert "\x1b" not in line["error"], (what, line)  # names from the file reach the terminal escaped
    assert 10 <= accepted <= 90, accepted
