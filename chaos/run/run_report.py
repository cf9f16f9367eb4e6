"""The run's report, from pytest's point of view: each test's outcome (a rig error in the
body is an error, never a failed verdict), the per-test results the ``history`` fixture
writes, and at the end the run summary, the terminal table and ``reports/latest``.

Everything lands in ``reports/<run-id>/`` (shared by xdist workers through
``PDCHAOS_RUN_ID``), JUnit XML included.
"""

from __future__ import annotations

import json
import os
import sysconfig
import time
from pathlib import Path
from typing import Any, Generator

import pytest

from chaos.errors import RigError
from chaos.reports.summary import figures, write_run_summary
from chaos.run.session import SEED, xdist_worker
from chaos.run.skips import PROPERTY, kind_of
from chaos.verdicts import KnownIssueSeen, VerdictFailed

__all__ = ["RIG_ERROR", "add_result", "outcome_of", "rig_error", "run_dir"]

_RUN_DIR = pytest.StashKey[Path]()
_RESULTS = pytest.StashKey[list[dict[str, Any]]]()
_PHASES = pytest.StashKey[dict[str, pytest.TestReport]]()


@pytest.hookimpl(tryfirst=True)
def pytest_configure(config: pytest.Config) -> None:
    config.stash[_RESULTS] = []
    if xdist_worker(config) is None and getattr(config.option, "xmlpath", None) is None:
        config.option.xmlpath = str(run_dir(config) / "junit.xml")


def add_result(config: pytest.Config, result: dict[str, Any]) -> None:
    """One test's result (``chaos.reports.summary.result_of``), for the run's summary."""
    config.stash[_RESULTS].append(result)


def run_dir(config: pytest.Config) -> Path:
    """reports/<run-id>/ (shared by xdist workers through PDCHAOS_RUN_ID)."""
    if _RUN_DIR not in config.stash:
        root = Path(config.getoption("--reports-dir")).resolve()
        run_id = os.environ.setdefault("PDCHAOS_RUN_ID", time.strftime("%Y%m%d-%H%M%S") + f"-{os.getpid()}")
        path = root / run_id
        path.mkdir(parents=True, exist_ok=True)
        config.stash[_RUN_DIR] = path
    return config.stash[_RUN_DIR]


RIG_ERROR = "pdchaos_rig_error"  # a call-phase report's user property: the rig failed, no verdict did


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Generator[None, Any, None]:
    """A rig error in the test body (a trigger that never fired, a fault not applied, a
    premise not met, or in a scenario any exception that is not a verdict's: ``_rig_errs``)
    is marked, so that it is reported as an error naming where it was raised, never as a
    failed verdict; a skip is marked with its kind (``chaos.run.skips``); with ``--stop-at-verdict`` the first failed verdict (a FAIL, not verdicts that
    were only unknown) ends the session."""
    outcome = yield
    rep = outcome.get_result()
    error = call.excinfo.value if call.excinfo is not None else None
    if rep.skipped and not hasattr(rep, "wasxfail"):  # why, as data: the kill matrix's clean run reads it
        skipped = (PROPERTY, kind_of(item, error).value)
        rep.user_properties.append(skipped)
        item.user_properties.append(skipped)  # for the teardown report, whose properties JUnit XML writes
    if call.when == "call" and rep.failed and error is not None and _rig_errs(item, error):
        said = str(error).splitlines()[0][:200] if str(error) else ""
        where = "" if isinstance(error, RigError) else f" ({_where(call.excinfo)})"
        mark = (RIG_ERROR, f"{type(error).__name__}: {said}{where}")
        rep.user_properties.append(mark)  # for this report's status
        item.user_properties.append(mark)  # for the teardown report, whose properties JUnit XML writes
    if (
        call.when == "call"
        and rep.failed
        and isinstance(error, VerdictFailed)
        and error.failed
        and item.config.getoption("--stop-at-verdict")
    ):
        item.session.shouldstop = f"a verdict failed in {item.nodeid}"
    item.stash.setdefault(_PHASES, {})[call.when] = rep


def _rig_errs(item: pytest.Item, error: BaseException) -> bool:
    """Whether a body's exception is the rig's error, not a verdict's failure: a
    ``RigError``, or in a scenario (a test with a history) any exception but a verdict's
    (``VerdictFailed``), a known issue shown, or ``pytest.fail``: a ``TimeoutError`` from a
    join, a ``KeyError`` in the rig, judge nothing about the system."""
    if isinstance(error, RigError):
        return True
    verdicts = (VerdictFailed, KnownIssueSeen, pytest.fail.Exception, pytest.xfail.Exception)
    return "history" in getattr(item, "fixturenames", ()) and not isinstance(error, verdicts)


def _where(excinfo: pytest.ExceptionInfo[BaseException] | None) -> str:
    """The innermost frame outside the libraries the exception left (the rig's, a
    suite's, a test file's): the wait or the step that raised it."""
    if excinfo is None:
        return "where unknown"
    paths = sysconfig.get_paths()
    libraries = (paths["stdlib"], paths["purelib"], paths["platlib"])
    ours = [entry for entry in excinfo.traceback if not str(entry.path).startswith(libraries)]
    entry = (ours or list(excinfo.traceback))[-1]
    return f"in {entry.name} at {Path(str(entry.path)).name}:{entry.lineno + 1}"


def rig_error(rep: pytest.TestReport) -> str:
    """The rig error a report carries ("" for none)."""
    return next((str(v) for k, v in rep.user_properties if k == RIG_ERROR), "")


def pytest_report_teststatus(report: pytest.TestReport, config: pytest.Config) -> tuple[str, str, str] | None:
    """The terminal and the session's counts show a call-phase rig error as an error."""
    if report.when == "call" and report.failed and rig_error(report):
        return "error", "E", "ERROR"
    return None


def _crash_message(rep: pytest.TestReport) -> str:
    """What failed, in words: the exception's message (for a verdict, the verdicts that did
    not pass), not the traceback's last line."""
    crash = getattr(rep.longrepr, "reprcrash", None)
    text = crash.message if crash is not None else str(rep.longrepr or "").strip()
    return text[:600]


def outcome_of(item: pytest.Item) -> tuple[str, float, str, str]:
    """(outcome, call duration, xfail reason, first line of the failure) of the call phase."""
    phases = item.stash.get(_PHASES, {})
    setup, call = phases.get("setup"), phases.get("call")
    rep = call or setup
    if rep is None:
        return "unknown", 0.0, "", ""
    reason = getattr(rep, "wasxfail", "") or ""
    if reason:
        outcome = "xfailed" if rep.skipped else "xpassed"
    elif rep.failed:
        outcome = "failed" if call is not None and rep is call and not rig_error(call) else "error"
    else:
        outcome = rep.outcome
    message = _crash_message(rep) if rep.failed else ""
    rig = rig_error(rep)
    if rig and rig not in message:  # where a body's plain exception was raised: the wait or step that broke
        message = f"{rig}\n{message}"
    return outcome, getattr(call, "duration", 0.0) or 0.0, reason, message


def _results(config: pytest.Config) -> list[dict[str, Any]]:
    """This process's test results; under xdist the controller has none of its own, so it
    reads what the workers wrote into the shared run folder."""
    results = config.stash.get(_RESULTS, [])
    if results or not config.pluginmanager.hasplugin("dsession"):  # dsession: the xdist controller
        return results
    results[:] = [
        json.loads(p.read_text()) for p in sorted(run_dir(config).glob("*/result.json"))
    ]  # read once, for summary and table
    return results


def pytest_sessionfinish(session: pytest.Session) -> None:
    config = session.config
    if xdist_worker(config) is not None:
        return
    results = _results(config)
    if not results:
        return
    folder = run_dir(config)
    command = "pytest " + " ".join(config.invocation_params.args)
    write_run_summary(folder, results, seed=config.stash[SEED], command=command)
    latest = folder.parent / "latest"
    if latest.is_symlink() or not latest.exists():
        latest.unlink(missing_ok=True)
        latest.symlink_to(folder.name)


def pytest_terminal_summary(terminalreporter: pytest.TerminalReporter, config: pytest.Config) -> None:
    results = _results(config)
    if not results:
        return
    from rich.console import Console
    from rich.markup import escape
    from rich.table import Table

    table = Table(title=f"pd-chaos: {len(results)} tests with histories (seed {config.stash[SEED]})")
    for col in ("test", "outcome", "s", "requests", "verdicts not passed"):
        table.add_column(col, overflow="fold")
    for r in results:
        bad = "; ".join(v.get("kind", v["name"]) for v in r["verdicts"] if v["status"] != "pass")
        reqs = " ".join(f"{k}={n}" for k, n in sorted(r["requests"].items()))
        table.add_row(
            escape(r["test"].split("::")[-1]), r["outcome"], f"{r['duration_s']:.1f}", escape(reqs), escape(bad)
        )
    console = Console(file=terminalreporter._tw._file, width=160)
    console.print(table)
    for test, v in figures(results):  # whatever the outcome: a soak's slopes, retry amplification
        console.print(f"{escape(test.split('::')[-1])}: {escape(v['kind'])} ({v['status']}): {escape(v['message'])}")
    terminalreporter.write_line(f"reports: {run_dir(config)}")
