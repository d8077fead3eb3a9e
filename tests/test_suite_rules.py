"""The suite's own rules hold: a test that leaves the process changed fails (tests/isolation.py), and a run
over its budget, or a test over a minute without a reason, fails the run (tests/suite_budget.py). Each case
is a small suite run by pytest in a subprocess with only these two plugins."""

from __future__ import annotations

import textwrap
from pathlib import Path

import pytest

pytest_plugins = ["pytester"]
HERE = Path(__file__).resolve().parent


def _run(pytester: pytest.Pytester, source: str, *args: str) -> pytest.RunResult:
    pytester.makepyfile(test_case=textwrap.dedent(source))
    pytester._monkeypatch.setenv("PYTHONPATH", str(HERE))
    return pytester.runpytest_subprocess(
        "-p",
        "isolation",
        "-p",
        "suite_budget",
        "-p",
        "no:randomly",
        "-p",
        "no:cacheprovider",
        *args,
        timeout=120,
    )


LEAKS = """
    import os, socket, subprocess, sys, threading, time, tempfile
    from pathlib import Path
    import torch
    import isolation
    isolation.GRACE_S = 0.5
    isolation.REPOSITORY = Path.cwd() / "repository"  # its own: the real one is shared with other workers
    isolation.REPOSITORY.mkdir()

    def test_environment():
        os.environ["TORCHWORK_LEAKED"] = "1"

    def test_thread():
        threading.Thread(target=time.sleep, args=(10,), daemon=True, name="leaky").start()

    def test_child():
        subprocess.Popen([sys.executable, "-c", "import time; time.sleep(10)"])

    def test_port():
        server = socket.socket()
        server.bind(("127.0.0.1", 0))
        server.listen()
        test_port.server = server  # kept open after the test

    def test_file():
        (isolation.REPOSITORY / "left-behind-by-a-test.txt").write_text("x")

    def test_torch_default_dtype():
        torch.set_default_dtype(torch.float64)

    def test_clean(tmp_path, monkeypatch):
        monkeypatch.setenv("TORCHWORK_FINE", "1")
        (tmp_path / "kept.txt").write_text("x")
        thread = threading.Thread(target=time.sleep, args=(0.1,))
        thread.start()
        thread.join()
"""


def test_each_kind_of_leak_fails_its_test_and_a_clean_test_passes(pytester: pytest.Pytester) -> None:
    result = _run(pytester, LEAKS)
    result.assert_outcomes(passed=7, errors=6)
    text = result.stdout.str()
    for expected in (
        "environment variable TORCHWORK_LEAKED",
        "thread 'leaky' still running",
        "child process",
        "still listening",
        "file left-behind-by-a-test.txt written into the repository",
        "torch.get_default_dtype(): torch.float32 -> torch.float64",
    ):
        assert expected in text, expected
    assert "ERROR at teardown of test_clean" not in text


def test_what_the_product_sets_by_design_is_put_back_not_failed(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import os, torch

        def test_sets():
            torch.set_num_threads(1 if torch.get_num_threads() > 1 else 2)
            os.environ["PYTHONHASHSEED"] = "424242"

        def test_sees_them_back():
            assert os.environ.get("PYTHONHASHSEED") != "424242"
    """,
    )
    result.assert_outcomes(passed=2)


def test_a_run_over_its_budget_fails_and_names_the_slowest(pytester: pytest.Pytester) -> None:
    result = _run(
        pytester,
        """
        import time

        def test_sleeps():
            time.sleep(1.5)

        def test_quick():
            pass
    """,
        "--suite-budget",
        "1",
    )
    result.assert_outcomes(passed=2)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    result.stdout.fnmatch_lines(
        ["*OVER BUDGET: the suite took * s, its budget is 1 s; the slowest: test_case.py::test_sleeps (2 s)*"]
    )
    result.stdout.fnmatch_lines(["*the 2 slowest tests*", "*s  test_case.py::test_sleeps"])


def test_the_random_order_seed_is_printed_even_under_q(pytester: pytest.Pytester) -> None:
    pytester.makepyfile(test_case="def test_nothing():\n    pass\n")
    pytester._monkeypatch.setenv("PYTHONPATH", str(HERE))
    result = pytester.runpytest_subprocess("-q", "-p", "suite_budget", "-p", "randomly", "--randomly-seed=1234",
                                           "-p", "no:cacheprovider", timeout=120)
    result.stdout.fnmatch_lines(["random order: --randomly-seed=1234 (replay: -p randomly --randomly-seed=1234)"])


def test_a_test_over_the_slow_limit_needs_a_reason(pytester: pytest.Pytester) -> None:
    source = """
        import time, pytest
        import suite_budget
        suite_budget.SLOW_S = 1.0

        def work(seconds):  # CPU time, whatever the neighbours do
            end = time.process_time() + seconds
            while time.process_time() < end:
                pass

        def test_works_unexplained():
            work(1.3)

        def test_waits_unexplained():
            time.sleep(2.5)

        def test_waits_a_little():
            time.sleep(1.3)

        @pytest.mark.slow(reason="works to show the rule")
        def test_explained():
            work(1.3)
    """
    result = _run(pytester, source)
    assert result.ret == pytest.ExitCode.TESTS_FAILED
    text = result.stdout.str()
    result.stdout.fnmatch_lines_random([
        "*SLOW WITHOUT A REASON: test_case.py::test_works_unexplained took * s (1 s of CPU; the limit is 1 s of CPU"
        " or 2 s of waiting)*",
        "*SLOW WITHOUT A REASON: test_case.py::test_waits_unexplained took * s (0 s of CPU;*",
    ])
    assert "test_waits_a_little took" not in text  # over SLOW_S on the wall clock, not in CPU or in waiting
    assert "test_explained took" not in text


def test_a_budget_that_is_not_a_positive_number_is_refused(pytester: pytest.Pytester) -> None:
    result = _run(pytester, "def test_nothing():\n    pass\n", "--suite-budget", "nan")
    assert result.ret == pytest.ExitCode.USAGE_ERROR
    result.stderr.fnmatch_lines(["*--suite-budget must be a positive number of seconds, got nan*"])
