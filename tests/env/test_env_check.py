"""`torchwork env check`: known-answer tests against float64 references, and what makes them fail."""

from __future__ import annotations

import json

import numpy as np
import pytest
from env_helpers import run_cli

from torchwork.env.known_answers import CASES, Case, case_results, check_names, run_checks
from torchwork.errors import ConfigError


def test_every_check_passes_on_this_machine():
    results = run_checks(devices=["cpu"])
    assert {r.name.split(" [")[0] for r in results} == set(check_names())
    failed = [(r.name, r.detail) for r in results if not r.ok]
    assert failed == []
    ran = [r for r in results if not r.skipped]
    assert all(r.max_error is not None and r.max_error <= max(r.atol, 1e-12) * 10 for r in ran)


def test_the_references_are_independent_of_torch_and_catch_a_small_error():
    # Each case's tolerance is tight enough that an error of 1e-3 in one element fails it.
    for case in CASES[:5]:
        inputs = case.make_inputs(np.random.default_rng(0))
        expected = case.reference(inputs)
        wrong = expected.copy()
        wrong.flat[3] += 1e-3 + case.rtol * abs(wrong.flat[3]) * 2
        bad = Case(case.name, case.make_inputs, lambda x, d, w=wrong: w, case.reference, case.atol, case.rtol)
        [result] = case_results([bad], ["cpu"])
        assert not result.ok and "at index" in result.detail, case.name


def test_env_check_exits_0_and_lists_each_check():
    done = run_cli("env", "check")
    assert done.returncode == 0, done.stdout + done.stderr
    for name in check_names():
        assert name in done.stdout
    assert "checks passed" in done.stdout and "FAIL" not in done.stdout


def test_a_monkeypatched_op_fails_env_check_with_exit_1():
    # A broken kernel, as a bad build or an LD_PRELOADed library would give: softmax that forgets to normalise.
    done = run_cli("env", "check", "--json", prelude="import torch\ntorch.softmax = lambda x, dim: torch.exp(x)")
    assert done.returncode == 1, done.stderr
    report = json.loads(done.stdout)
    failed = [c["name"] for c in report["checks"] if not c["ok"]]
    assert report["ok"] is False and failed == ["softmax [cpu]"]


def test_a_crashing_op_is_a_failed_check_not_a_crash():
    done = run_cli("env", "check", prelude="import torch\ndef boom(*a, **k):\n    raise RuntimeError('MKL says no')\n"
                                           "torch.nn.functional.conv2d = boom")
    assert done.returncode == 1
    assert "FAIL conv2d [cpu]" in done.stdout and "RuntimeError: MKL says no" in done.stdout


def test_cpu_against_a_second_device_compares_outputs_with_each_other():
    # No GPU here: the CPU stands in for the second device, so the cross-device path runs for real ...
    results = case_results([c for c in CASES if c.name == "matmul"], ["cpu", "cpu"])
    assert [r.name for r in results] == ["matmul [cpu]", "matmul [cpu]", "matmul [cpu vs cpu]"]
    assert all(r.ok for r in results)
    # ... and a device whose results drift from the CPU's by more than the tolerance while each stays within
    # it of the float64 reference fails the comparison: a stand-in op answering +-4e-4 off on alternate calls.
    calls = []

    def drifting(x, device):
        calls.append(device)
        return CASES[0].reference(x) + (4e-4 if len(calls) % 2 else -4e-4)

    loose = Case("drift", CASES[0].make_inputs, drifting, CASES[0].reference, atol=1e-3, rtol=0)
    assert [r.ok for r in case_results([loose], ["cpu", "cpu"])] == [True, True, True]
    tight = Case("drift", CASES[0].make_inputs, drifting, CASES[0].reference, atol=5e-4, rtol=0)
    results = case_results([tight], ["cpu", "cpu"])
    assert [r.ok for r in results] == [True, True, False] and results[-1].name == "drift [cpu vs cpu]"


def test_unknown_check_names_are_refused():
    with pytest.raises(ConfigError, match="unknown checks"):
        run_checks(names=["matmull"])


def test_devices_and_names_are_checked_and_one_string_is_one_name():
    """devices=['tpu'] was torch's RuntimeError; 'cuda' on a machine without it failed every check with
    "Torch not compiled with CUDA"; names='softmax' was the checks 's', 'o', 'f', ... (unknown)."""
    import torch

    [result] = run_checks(devices="cpu", names="softmax")
    assert result.name == "softmax [cpu]" and result.ok
    with pytest.raises(ConfigError, match=r"^devices: 'tpu' is not a device name torch knows"):
        run_checks(devices=["tpu"], names=["softmax"])
    if torch.cuda.device_count() == 0:
        with pytest.raises(ConfigError, match=r"^devices: 'cuda', but torch sees 0 CUDA device"):
            run_checks(devices=["cpu", "cuda"], names=["softmax"])
    with pytest.raises(ConfigError, match=r"^names=5: give a name or a list of names"):
        run_checks(names=5)
