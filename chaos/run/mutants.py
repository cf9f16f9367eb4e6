"""The kill matrix: run the suites on the clean stack and once per pdsim defect.

Every defect must make its scenario's verdict fail ("killed"); the clean run must pass. The
matrix reads each run's ``result.json`` files (``chaos.run.results``): a kill is a verdict of the
killer's kind (and parameters) with status fail in a test that failed. A test the rig broke
(a trigger that never fired, a fault not applied, a premise not met: a ``RigError``, an
"error" outcome) or whose verdicts were only unknown kills nothing: the defect is then "not
killed (rig error: ...)". Each run is its own pytest process with its own stacks (own port
range) and report folder; defect runs stop at their first
failed verdict (``--stop-at-verdict``, not ``-x``, which would also stop at a rig error) and
run ``jobs`` at a time. The defect names come
from ``python -m pdsim.defects``: the rig never imports pdsim.
"""

from __future__ import annotations

import json
import os
import queue
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor, as_completed
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any

from chaos.errors import ConfigError
from chaos.judge.model import Role, Status
from chaos.run.pytest_run import TIMED_OUT, run_pytest
from chaos.run.results import JudgedVerdict, TestResult, load_results
from chaos.run.skips import unexpected_skips
from chaos.system.ports import RUN_STRIDE

__all__ = [
    "KILLERS",
    "Killer",
    "MutantResult",
    "defect_names",
    "matrix_ok",
    "read_run",
    "run_matrix",
    "to_json",
    "to_markdown",
]


@dataclass(frozen=True)
class Killer:
    """The scenario written for a defect's bug class, and the verdict of it that must fail."""

    suite: str  # a suite file under suites/ (or one test's node id)
    verdict: str  # the verdict's kind
    args: tuple[str, ...] = ()  # what the scenario needs on the command line (the soak's duration)
    params: dict[str, Any] = field(default_factory=dict)  # where a test judges several of that kind

    def kills(self, v: JudgedVerdict) -> bool:
        return v.kind == self.verdict and all(v.params.get(k) == p for k, p in self.params.items())


# The soak is opt-in; the matrix runs it short, in the clean run and for the defect it kills.
SOAK_ARGS = ("--soak", "40s")
# The clean run takes the suites in an order drawn from a fixed seed (``--shuffle``): a test
# that passes only after another, or fails only after one, fails the matrix, reproducibly
SHUFFLE_SEED = 5
CLEAN_ARGS = (*SOAK_ARGS, "--shuffle", "--seed", str(SHUFFLE_SEED))

# Each defect is run against its own scenario only: a kill is that scenario's verdict, never
# a rig error and never another suite's verdict failing by chance; and the matrix stays fast.
KILLERS: dict[str, Killer] = {
    "no_bootstrap_timeout": Killer("suites/test_bootstrap_stall.py", "watchdog_fired"),
    "no_inflight_watchdog": Killer("suites/test_idle_watchdog.py", "watchdog_fired"),
    "idle_watchdog": Killer("suites/test_idle_watchdog.py", "watchdog_fired"),
    "leak_on_abort": Killer("suites/test_client_abort.py", "no_leak"),
    "no_abort_to_decode": Killer("suites/test_kv_link.py", "failed_requests_are_clean"),
    "stale_bootstrap_cache": Killer("suites/test_prefill_crash.py", "recovers"),
    "stale_decode_registration": Killer(
        "suites/test_decode_restart.py::test_decode_killed_while_idle_then_restarted_under_load", "recovers"
    ),
    "stuck_transferring": Killer("suites/test_kv_link.py", "watchdog_fired"),
    "room_mixup": Killer("suites/test_concurrency_integrity.py", "replies_match_baseline"),
    "context_truncation": Killer("suites/test_multiround_keepalive.py", "context_grows"),
    "silent_stream_end": Killer("suites/test_kv_link.py", "failed_requests_are_clean"),
    "no_heartbeat": Killer("suites/test_prefill_crash.py", "no_leak"),
    "client_error_as_server_error": Killer("suites/test_circuit_breaker.py", "charged_only_where_struck"),
    "bootstrap_call_blocks_decoding": Killer("suites/test_neighbour_stall.py", "stream_gaps_at_most"),
    "error_event_not_json": Killer("suites/test_client_contract.py", "failed_requests_are_clean"),
    "abort_frees_kv_mid_transfer": Killer("suites/test_abort_reuse.py", "replies_match_baseline"),
    "lost_prefill_never_retried": Killer("suites/test_control_link_heal.py", "recovers"),
    "sigterm_cuts_streams": Killer(
        "suites/test_graceful_shutdown.py::test_sigterm_drains_the_open_streams[decode]", "outcomes_in"
    ),
    "kv_socket_leak": Killer("suites/test_soak.py", "does_not_grow", SOAK_ARGS),
    "failed_room_pinned": Killer("suites/test_retry_amplification.py", "no_leak"),
    "failed_transfer_answered_ok": Killer("suites/test_kv_link.py", "failures_reach_the_client"),
    "heartbeat_gives_up_at_first_miss": Killer("suites/test_control_link_heal.py", "decode_gives_prefill_up"),
    "decode_prefix_kv_misplaced": Killer("suites/test_decode_radix_cache.py", "replies_match_baseline"),
    "load_report_omits_transfers": Killer("suites/test_kv_link.py", "sources_agree"),
    "first_token_finish_unchecked": Killer("suites/test_reply_endings.py", "replies_end_where_asked"),
    "kv_checksum_ignored": Killer("suites/test_kv_corruption.py", "never_served_wrong"),
    "idle_transfer_stall": Killer("suites/test_idle_burst.py", "first_bytes_as_fast_after_idle"),
    "page_size_unchecked": Killer("suites/test_mismatched_engines.py", "refused_naming_the_mismatch"),
    "lost_prefill_fails_every_room": Killer(
        "suites/test_topology.py::test_one_worker_killed_while_its_twin_serves[2p1d-prefill2]",
        "healthy_workers_unaffected",
    ),
    "sampling_unchecked": Killer(
        "suites/test_hostile_input.py::test_hostile_requests_are_refused_clearly", "client_errors_refused"
    ),
    "waiting_clock_from_arrival": Killer(
        "suites/test_overload.py::test_queued_requests_are_served_not_timed_out",
        "counter_never_rises",
        params={"counter": ["decode", "num_transfer_failed_reqs_total"]},
    ),
}


@dataclass
class MutantResult:
    defect: str
    killed: bool
    tests_failed: list[str]
    seconds: float
    verdict: str = ""
    returncode: int = 0
    log: str = ""
    passed: int = 0
    rig_error: str = ""  # why nothing killed it: a rig error, a verdict only unknown, another verdict

    @property
    def as_expected(self) -> bool:
        """The clean run passes; a defect run is killed."""
        return not self.killed if self.defect == "clean" else self.killed

    @property
    def state(self) -> str:
        if self.defect == "clean":
            return "FAILED" if self.killed else "passed"
        if self.killed:
            return "killed"
        return f"not killed ({self.rig_error})" if self.rig_error else "SURVIVED"


def defect_names() -> list[str]:
    out = subprocess.run(
        [sys.executable, "-m", "pdsim.defects"], capture_output=True, text=True, timeout=30, check=True
    )
    return [line.strip() for line in out.stdout.splitlines() if line.strip()]


@dataclass(frozen=True)
class RunRead:
    """What one pytest run's results say, split the way the matrix counts it."""

    verdict_failures: list[str]  # tests a verdict failed: only these kill
    rig_errors: list[str]  # tests that errored, or whose verdicts were only unknown
    failed_verdicts: list[JudgedVerdict]  # every failed verdict of the failed tests, in order
    why_not: str  # why nothing killed: "rig error: <the first>", or "only <an unknown verdict>"
    passed: int


def read_run(results: list[TestResult]) -> RunRead:
    killed, errors, failed_verdicts, rig, passed = [], [], [], "", 0
    for r in results:
        if r.outcome == "passed":
            passed += 1
            continue
        failing = r.judged(Status.FAIL)
        if r.outcome == "failed" and failing:
            killed.append(r.test)
            failed_verdicts += failing
        elif r.outcome in ("failed", "error"):  # a rig error, or verdicts that were only unknown
            errors.append(r.test)
            unmet = r.judged(Status.UNMET, Role.PREMISE)
            unsure = r.unsure()
            if unmet:
                why = f"rig error: {unmet[0]}"
            elif unsure and r.outcome == "failed":
                why = f"only {unsure[0]}"
            else:
                why = f"rig error: {(r.message.splitlines() or [r.outcome])[0][:200]}"
            rig = rig or why
    return RunRead(killed, errors, failed_verdicts, rig, passed)


def _run_one(
    defect: str,
    *,
    port_base: int,
    out_dir: Path,
    suites: str,
    extra_args: list[str],
    timeout_s: float,
    killer: Killer | None = None,
) -> MutantResult:
    """One pytest run with ``defect`` switched on. Without a ``killer`` any failed verdict
    kills; with one, only a failure of its verdict does."""
    log = out_dir / f"{defect}.log"
    reports = out_dir / "reports" / defect
    # not -x: a rig error must not end the run before a verdict could kill
    args = [] if defect == "clean" else ["--stop-at-verdict"]
    env = {**os.environ, "PDSIM_DEFECTS": "" if defect == "clean" else defect}
    t0 = time.monotonic()
    rc = run_pytest(
        [suites], port_base=port_base, reports=reports, log=log, env=env, args=[*args, *extra_args], timeout_s=timeout_s
    )
    seconds = time.monotonic() - t0
    run = read_run(load_results(reports))
    rig_error = run.why_not
    if not rig_error and rc != 0 and not run.verdict_failures:
        rig_error = (
            f"rig error: run exceeded {timeout_s:g}s"
            if rc == TIMED_OUT
            else f"rig error: pytest exited {rc} and no result names a failed verdict (see the log)"
        )
    # the clean run fails on anything, and on running nothing: it passes only where it ran
    # what it collected (no skip but those the rig declares, some test passed); a defect is
    # killed only by a failed verdict (its own)
    first = str(run.failed_verdicts[0]) if run.failed_verdicts else ""
    if defect == "clean":
        idle = _ran_nothing(run, reports)
        killed, verdict = rc != 0 or bool(idle), first
        rig_error = rig_error or idle
    elif killer is None:
        killed, verdict = bool(run.verdict_failures), first
    else:
        own = [v for v in run.failed_verdicts if killer.kills(v)]
        killed, verdict = bool(own), str(own[0]) if own else first
        if run.verdict_failures and not own:
            rig_error = rig_error or f"another verdict failed, not {killer.verdict}: {first[:150]}"
    return MutantResult(
        defect,
        killed,
        run.verdict_failures + run.rig_errors,
        round(seconds, 1),
        verdict,
        rc,
        str(log),
        run.passed,
        rig_error,
    )


def _ran_nothing(run: RunRead, reports: Path) -> str:
    """Why a clean run tested too little to pass ("" if it did not): no test passed, or a
    test skipped for a reason the rig does not declare (``chaos.run.skips``)."""
    junits = sorted(reports.rglob("junit.xml"))
    if not junits:
        return "the clean run wrote no JUnit report: its skips are unknown"
    unexpected = [test for junit in junits for test in unexpected_skips(junit)]
    if unexpected:
        return f"the clean run skipped {len(unexpected)} test(s) for no declared reason: {', '.join(unexpected[:3])}"
    return "the clean run passed no test" if run.passed == 0 else ""


def _progress(r: MutantResult, done: int, total: int) -> None:
    """One line per finished run, so a ten-minute matrix is never silent."""
    print(f"[{done}/{total}] {r.defect}: {r.state} in {r.seconds:.0f} s {r.verdict[:100]}", flush=True)


def run_matrix(
    *,
    only: list[str] | None,
    jobs: int,
    out_dir: Path,
    port_base: int,
    suites: str = "suites",
    extra_args: list[str] | None = None,
    timeout_s: float = 900,
) -> list[MutantResult]:
    names = defect_names()
    unknown = [n for n in (only or []) if n not in names and n != "clean"]
    if unknown:
        raise ConfigError(f"unknown defect(s) {', '.join(unknown)}; known: {', '.join(names)}")
    chosen = [n for n in names if not only or n in only]
    unmapped = [n for n in chosen if n not in KILLERS]
    if unmapped:
        raise ConfigError(
            f"no scenario named to kill defect(s) {', '.join(unmapped)}: add them to chaos.run.mutants.KILLERS"
        )
    out_dir.mkdir(parents=True, exist_ok=True)
    extra = extra_args or []
    results = []
    total = len(chosen) + (1 if not only or "clean" in only else 0)
    if not only or "clean" in only:  # alone, so that its timing is undisturbed
        results.append(
            _run_one(
                "clean",
                port_base=port_base,
                out_dir=out_dir,
                suites=suites,
                extra_args=[*CLEAN_ARGS, *extra],
                timeout_s=timeout_s,
            )
        )
        _progress(results[-1], 1, total)
    slots: queue.SimpleQueue[int] = queue.SimpleQueue()  # one port range per concurrent run, reused
    for k in range(max(1, jobs)):
        slots.put(port_base + (k + 1) * RUN_STRIDE)

    def in_a_slot(defect: str) -> MutantResult:
        base = slots.get()
        try:
            killer = KILLERS[defect]
            return _run_one(
                defect,
                port_base=base,
                out_dir=out_dir,
                suites=killer.suite,
                extra_args=[*killer.args, *extra],
                timeout_s=timeout_s,
                killer=killer,
            )
        finally:
            slots.put(base)

    with ThreadPoolExecutor(max_workers=max(1, jobs)) as pool:
        futs = [pool.submit(in_a_slot, d) for d in chosen]
        for fut in as_completed(futs):
            _progress(fut.result(), len(results) + 1, total)
            results.append(fut.result())
    order = {name: i for i, name in enumerate(["clean", *chosen])}
    return sorted(results, key=lambda r: order[r.defect])


def matrix_ok(results: list[MutantResult]) -> bool:
    """Clean passes (if it ran) and every defect is killed."""
    return all(r.as_expected for r in results)


def _scenario(defect: str) -> str:
    return KILLERS[defect].suite if defect in KILLERS else "suites (all)"


def to_json(results: list[MutantResult]) -> str:
    keep = ("defect", "killed", "tests_failed", "seconds", "verdict", "rig_error")
    return json.dumps(
        [
            {k: v for k, v in asdict(r).items() if k in keep}
            | {"scenario": _scenario(r.defect), "killed_by": r.verdict if r.killed and r.defect != "clean" else ""}
            for r in results
        ],
        indent=2,
    )


def to_markdown(results: list[MutantResult]) -> str:
    """The fault x verdict x defect table: each defect, the scenario written for its class,
    and the verdict that killed it (or why nothing did)."""
    lines = ["| defect | scenario | result | killing verdict | failing test | seconds |", "|---|---|---|---|---|---|"]
    for r in results:
        state = r.state if r.as_expected else f"**{r.state}**"
        if r.defect == "clean" and r.as_expected:
            state += f" ({r.passed} tests)"
        test = r.tests_failed[0] if r.tests_failed else ""
        lines.append(
            f"| {r.defect} | {_scenario(r.defect)} | {state} | {(r.verdict or r.rig_error).replace('|', '/')[:160]} | {test} | {r.seconds:.0f} |"
        )
    return "\n".join(lines) + "\n"
