"""`torchwork env`: the report, the OpenMP / BLAS inventory (with a real second OpenMP runtime) and findings."""

from __future__ import annotations

import json
import os

import pytest
import torch
from env_helpers import intel_openmp_library, run_cli, run_python

from torchwork.env.libraries import owners, runtime_of
from torchwork.env.rules import cuda_findings, environment_findings, threads_findings


def _snapshot_of(completed) -> dict:
    assert completed.stdout.strip().startswith("{"), completed.stderr
    return json.loads(completed.stdout)


def test_env_json_describes_this_machine_and_torch():
    done = run_cli("env", "--json")
    assert done.returncode == 0, done.stderr
    snap = _snapshot_of(done)
    assert snap["torch"] == torch.__version__ and snap["build"] == ("cpu" if not torch.version.cuda
                                                                    else f"cuda {torch.version.cuda}")
    details = snap["details"]
    assert details["python"]["executable"] and details["machine"]["usable_cpus"] >= 1
    # The command's own fresh process, not this one: a module fixture of the suite may have set this
    # process's count (a recipe run in-process with threads=1), which CI's random order once put first.
    fresh = run_python("import torch; print(torch.get_num_threads())")
    assert details["torch"]["threads"]["intra_op"] == int(fresh.stdout.split()[-1])
    assert snap["packages"]["torch"] == torch.__version__ and len(snap["packages"]) > 20
    openmp = [lib for lib in details["libraries"] if lib["kind"] == "openmp"]
    # torch's wheel brings its own libgomp, and the file list of the torch distribution says so
    assert any(lib["runtime"].startswith("GNU") and lib["distribution"] == f"torch {torch.__version__}"
               for lib in openmp), openmp
    assert details["numpy"]["version"] and snap["findings"] == []


def test_env_screen_names_libraries_and_says_no_findings():
    done = run_cli("env")
    assert done.returncode == 0, done.stderr
    assert "libgomp" in done.stdout and f"from torch {torch.__version__}" in done.stdout
    assert "no findings" in done.stdout and "threads    intra-op" in done.stdout


def test_two_openmp_runtimes_in_one_process_are_reported_with_both_files_and_packages():
    library = intel_openmp_library()
    if library is None:
        pytest.skip("PyPI intel-openmp is not installed (make installs it: pip install --no-deps intel-openmp)")
    # A real process: torch loads its libgomp, then Intel's libiomp5 is loaded beside it, as a second
    # package (conda's MKL, a vendor SDK) does behind torch's back.
    done = run_cli("env", "--json", prelude=f"import ctypes, torch\nctypes.CDLL({str(library)!r})")
    assert done.returncode == 1, done.stderr  # an error finding
    snap = _snapshot_of(done)
    openmp = {lib["path"]: lib for lib in snap["details"]["libraries"] if lib["kind"] == "openmp"}
    assert str(library) in openmp and openmp[str(library)]["distribution"].startswith("intel-openmp ")
    gomp = [lib for lib in openmp.values() if lib["runtime"].startswith("GNU")]
    assert gomp and gomp[0]["distribution"] == f"torch {torch.__version__}"
    finding = next(f for f in snap["findings"] if f["id"] == "two-openmp")
    assert finding["severity"] == "error"
    assert str(library) in finding["message"] and gomp[0]["path"] in finding["message"]
    assert "intel-openmp" in finding["message"] and "torch" in finding["message"]
    assert "KMP_DUPLICATE_LIB_OK" in finding["message"] and "hides" in finding["message"]
    assert sorted(snap["openmp"]) == sorted(os.path.basename(p) for p in openmp)


def test_taking_a_snapshot_leaves_kmp_duplicate_lib_ok_unset():
    # threadpoolctl sets KMP_DUPLICATE_LIB_OK=True on import; env must not leave that behind.
    done = run_python("import os\nfrom torchwork.env.report import snapshot\nsnapshot()\n"
                      "print(os.environ.get('KMP_DUPLICATE_LIB_OK'))")
    assert done.stdout.strip() == "None", done.stderr


def test_kmp_duplicate_lib_ok_set_by_the_user_is_a_warning():
    done = run_cli("env", "--json", KMP_DUPLICATE_LIB_OK="TRUE")
    ids = [f["id"] for f in _snapshot_of(done)["findings"]]
    assert "kmp-duplicate-lib-ok" in ids


def test_more_threads_than_cpus_is_a_finding():
    done = run_cli("env", "--json", prelude="import torch, os\ntorch.set_num_threads(len(os.sched_getaffinity(0)) + 3)")
    snap = _snapshot_of(done)
    assert [f["id"] for f in snap["findings"]] == ["threads-oversubscribed"]


def _torch_details(**overrides):
    details = {"build": "cuda 12.4", "version": "2.5.1", "cuda_runtime": "12.4", "cuda_available": True,
               "cuda_driver": "12.4", "threads": {"intra_op": 1, "inter_op": 1}}
    details.update(overrides)
    return {"details": {"torch": details, "variables": {}, "machine": {"usable_cpus": 4}, "libraries": []}}


def test_cuda_findings_on_recorded_snapshots():
    # Machines this box is not: the rules are pure functions of a snapshot's data.
    assert cuda_findings(_torch_details()) == []
    newer_minor = cuda_findings(_torch_details(cuda_driver="12.2"))
    assert [(f.id, f.severity) for f in newer_minor] == [("cuda-newer-than-driver", "warning")]
    newer_major = cuda_findings(_torch_details(cuda_runtime="12.1", build="cuda 12.1", cuda_driver="11.8"))
    assert [(f.id, f.severity) for f in newer_major] == [("cuda-newer-than-driver", "error")]
    assert "whl/cu118" in newer_major[0].fix
    no_gpu = _torch_details(cuda_available=False, cuda_driver=None)
    no_gpu["details"]["variables"] = {"CUDA_VISIBLE_DEVICES": ""}
    [finding] = cuda_findings(no_gpu)
    assert finding.id == "cuda-build-no-gpu" and "CUDA_VISIBLE_DEVICES" in finding.message
    assert "whl/cpu" in finding.fix
    assert [f.id for f in environment_findings(no_gpu)] == ["cuda-build-no-gpu"]
    assert threads_findings(_torch_details(threads={"intra_op": 4, "inter_op": 1})) == []


def test_runtime_names_and_owners_of_real_files():
    assert runtime_of("libgomp-a34b3233.so.1")[1].startswith("GNU")
    assert runtime_of("libiomp5.so")[1].startswith("Intel") and runtime_of("libomp.so.5")[1].startswith("LLVM")
    assert runtime_of("libomptarget.so") is None and runtime_of("libgomp_plugin.so") is None
    import numpy

    numpy_file = os.path.realpath(numpy.__file__)
    assert owners([numpy_file]) == {numpy_file: f"numpy {numpy.__version__}"}
    assert owners(["/etc/hostname"]) == {}


def test_env_help_does_not_import_torch():
    done = run_python("import sys\nfrom torchwork.cli import build_parser\n"
                      "for argv in (['env'], ['env', 'check', '--artifact', 'x'], ['env', 'diff', 'a', 'b'], "
                      "['env', 'lock']):\n    build_parser().parse_args(argv)\n"
                      "print(sorted(m for m in ('torch', 'numpy', 'threadpoolctl') if m in sys.modules))")
    assert done.stdout.strip() == "[]", done.stderr


def test_the_package_list_is_read_at_each_call_not_from_a_first_one(tmp_path, monkeypatch) -> None:
    """A long process (a notebook, a test session) records the packages it runs with now: a manifest once
    kept the list of the first run of its process, and listed a distribution gone from sys.path since."""
    from torchwork.env.machine import installed_distributions

    before = installed_distributions()
    (tmp_path / "made_up_package-1.2.3.dist-info").mkdir()
    monkeypatch.syspath_prepend(str(tmp_path))
    assert installed_distributions() == {**before, "made-up-package": "1.2.3"}
    monkeypatch.undo()
    assert installed_distributions() == before


def test_importing_setuptools_adds_no_package_to_the_list() -> None:
    """setuptools puts its ``_vendor`` folder on sys.path when imported (torch's C++ builds import it): a
    worker's run manifest then listed wheel, zipp, jaraco-* and the rest of its private copies, and `env diff`
    against a fresh snapshot said "packages only in B" (the suite, four workers, two runs of six)."""
    code = ("import json, sys\nfrom torchwork.env.machine import installed_distributions\n"
            "before = installed_distributions()\nimport setuptools\n"
            "vendored = [p for p in sys.path if p.endswith('_vendor')]\n"
            "print(json.dumps([bool(vendored), installed_distributions() == before]))")
    done = run_python(code)
    assert done.returncode == 0, done.stderr
    assert json.loads(done.stdout) == [True, True]
