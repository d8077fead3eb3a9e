"""The test suite's budget, which it holds itself to (``make test`` passes ``--suite-budget``).

At the end of a run: the slowest tests (setup, call and teardown added up) and the run's wall time are
printed; the run fails when its wall time exceeds the budget, naming the slowest tests, or when a test's
call is slow without ``@pytest.mark.slow(reason="...")`` saying why. PyTorch marks a test slow when it
averages over 60 s; Lightning and transformers cap each test and print the slowest. Under xdist the
workers' reports reach the controller, which judges the whole run.

Slow means the call used over ``SLOW_S`` of CPU (its process and the child processes it waited for), or
waited over ``WAIT_FACTOR`` times that on the wall clock. CPU time, not wall time, because the machine is
shared: a test that starts a server in 13 s on a quiet machine took 62 s beside the other worker's DDP and
tuning runs (CI on c589bee), while the work it did was the same.
"""

from __future__ import annotations

import json
import resource
import time
from collections import defaultdict
from collections.abc import Iterator

import pytest

SLOW_S = 60.0
WAIT_FACTOR = 2.0
SHOWN = 25
_CPU_AT = pytest.StashKey[float]()


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("torchwork suite budget")
    group.addoption(
        "--suite-budget",
        type=float,
        default=None,
        metavar="SECONDS",
        help="fail the run when its wall time exceeds SECONDS, naming the slowest tests",
    )
    group.addoption(
        "--suite-timeline",
        default=None,
        metavar="PATH",
        help="write each test phase's worker, start and stop as JSON lines to PATH (where the wall time goes)",
    )


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "slow(reason): a test whose call takes more than a minute; say why")
    if not hasattr(config, "workerinput"):  # the controller (or the only process) judges the run
        config.pluginmanager.register(
            SuiteBudget(config.getoption("--suite-budget"), config.getoption("--suite-timeline")),
            "torchwork-suite-budget",
        )


class SuiteBudget:
    def __init__(self, budget_s: float | None, timeline_path: str | None = None) -> None:
        if budget_s is not None and not budget_s > 0:
            raise pytest.UsageError(f"--suite-budget must be a positive number of seconds, got {budget_s}")
        self.budget_s = budget_s
        self.started = time.monotonic()
        self.durations: dict[str, float] = defaultdict(float)
        self.unexplained: dict[str, tuple[float, float]] = {}  # nodeid -> (wall seconds, CPU seconds)
        self.timeline = open(timeline_path, "w", encoding="utf-8") if timeline_path else None  # noqa: SIM115

    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        self.durations[report.nodeid] += report.duration
        if self.timeline is not None:
            worker = getattr(getattr(report, "node", None), "gateway", None)
            row = {
                "test": report.nodeid,
                "when": report.when,
                "worker": getattr(worker, "id", "main"),
                "start": report.start,
                "stop": report.stop,
                "cpu": dict(report.user_properties).get("cpu_s"),
            }
            self.timeline.write(json.dumps(row) + "\n")
        if report.when == "call" and _is_slow(report) and not _has_slow_reason(report):
            self.unexplained[report.nodeid] = (report.duration, dict(report.user_properties).get("cpu_s") or 0.0)

    @pytest.hookimpl(trylast=True)
    def pytest_terminal_summary(self, terminalreporter: pytest.TerminalReporter) -> None:
        wall = time.monotonic() - self.started
        slowest = sorted(self.durations.items(), key=lambda item: -item[1])[:SHOWN]
        write = terminalreporter.write_line
        terminalreporter.section(f"the {len(slowest)} slowest tests (setup + call + teardown)")
        for nodeid, seconds in slowest:
            write(f"{seconds:8.1f} s  {nodeid}")
        budget = f" of a {self.budget_s:.0f}-s budget" if self.budget_s else ""
        write(
            f"suite: {len(self.durations)} tests, {sum(self.durations.values()):.0f} s of test time, "
            f"{wall:.0f} s wall{budget}"
        )
        seed = getattr(terminalreporter.config.option, "randomly_seed", None)
        if seed is not None and terminalreporter.config.pluginmanager.has_plugin("randomly"):
            # pytest -q hides pytest-randomly's header line: the order is replayed from this one
            write(f"random order: --randomly-seed={seed} (replay: -p randomly --randomly-seed={seed})")
        for nodeid, (seconds, cpu_s) in self.unexplained.items():
            terminalreporter.write_line(
                f"SLOW WITHOUT A REASON: {nodeid} took {seconds:.0f} s ({cpu_s:.0f} s of CPU;"
                f" the limit is {SLOW_S:.0f} s of CPU or {WAIT_FACTOR * SLOW_S:.0f} s of waiting):"
                ' mark it @pytest.mark.slow(reason="...") or make it faster',
                red=True,
            )
        if self.budget_s and wall > self.budget_s:
            names = ", ".join(f"{nodeid} ({seconds:.0f} s)" for nodeid, seconds in slowest[:5])
            terminalreporter.write_line(
                f"OVER BUDGET: the suite took {wall:.0f} s, its budget is "
                f"{self.budget_s:.0f} s; the slowest: {names}",
                red=True,
            )

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.timeline is not None:
            self.timeline.close()
        over = self.budget_s is not None and time.monotonic() - self.started > self.budget_s
        if (over or self.unexplained) and session.exitstatus == pytest.ExitCode.OK:
            session.exitstatus = pytest.ExitCode.TESTS_FAILED


def _is_slow(report: pytest.TestReport) -> bool:
    cpu_s = dict(report.user_properties).get("cpu_s")
    if cpu_s is None:  # no CPU figure (a plugin's own item): the wall clock alone
        return report.duration > SLOW_S
    return cpu_s > SLOW_S or report.duration > WAIT_FACTOR * SLOW_S


def _has_slow_reason(report: pytest.TestReport) -> bool:
    properties = dict(report.user_properties)
    return bool(properties.get("slow_reason")) or bool(properties.get("cannot_be_marked"))


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_setup(item: pytest.Item) -> None:
    """Carry the slow marker's reason in the report, where the controller under xdist can read it. A block of
    the documentation (Sybil) or a doctest cannot carry a marker: it runs what the page shows a user."""
    item.stash[_CPU_AT] = _cpu_seconds()
    if not isinstance(item, pytest.Function):
        item.user_properties.append(("cannot_be_marked", True))
        return
    marker = item.get_closest_marker("slow")
    reason = marker.kwargs.get("reason") if marker else None
    if reason:
        item.user_properties.append(("slow_reason", reason))


def _cpu_seconds() -> float:
    """CPU time of this test process and of the child processes it has waited for (servers, training runs)."""
    own, children = resource.getrusage(resource.RUSAGE_SELF), resource.getrusage(resource.RUSAGE_CHILDREN)
    return own.ru_utime + own.ru_stime + children.ru_utime + children.ru_stime


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo) -> Iterator[None]:
    """The CPU seconds of each phase beside its wall time, for ``--suite-timeline``: a test whose wall time is
    mostly not CPU time waits (a sleep, a timeout, a process starting)."""
    outcome = yield
    started = item.stash.get(_CPU_AT, None)
    if started is not None:
        outcome.get_result().user_properties.append(("cpu_s", round(_cpu_seconds() - started, 3)))
    item.stash[_CPU_AT] = _cpu_seconds()  # the next phase starts where this one ended
