"""Per-test and per-run reports: result.json, timeline.png and stuck.md for each test;
summary.md and summary.json for the run. Everything is drawn from the saved histories, so
``pdchaos report RUN`` can draw it all again."""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path
from typing import Any

from chaos.observe.history import History
from chaos.observe.records import FaultEvent, VerdictRecord
from chaos.reports.stuck import where_stuck
from chaos.reports.timeline import render_timeline

__all__ = ["render_run", "result_of", "write_run_summary", "write_test_report"]


def _faults(history: History) -> list[dict[str, Any]]:
    by_id: dict[str, dict[str, Any]] = {}
    for f in history.of(FaultEvent):
        entry = by_id.setdefault(f.fault, {"fault": f.fault, "description": f.description})
        entry[f.stage.value] = round(f.t, 3)
        if f.evidence:
            entry[f"{f.stage.value}_evidence"] = f.evidence
    return list(by_id.values())


def result_of(
    history: History,
    *,
    nodeid: str,
    outcome: str,
    duration_s: float,
    known_issue: str = "",
    known: list[dict[str, Any]] | None = None,
    message: str = "",
    stack: str = "",
) -> dict[str, Any]:
    """One test's result.json: the single record every report, the known-issue marks and
    the kill matrix read (``chaos.run.results``). ``verdicts`` holds each judged verdict and
    premise as data (kind, role, status, params, evidence); ``known`` each known issue the
    test showed, with the verdicts that show it."""
    counts = Counter(o.outcome.value if o.outcome else "open" for o in history.ops())
    return {
        "test": nodeid,
        "outcome": outcome,
        "duration_s": round(duration_s, 2),
        "verdicts": [_verdict(v) for v in history.of(VerdictRecord)],
        "requests": dict(counts),
        "faults": _faults(history),
        "known_issue": known_issue,
        "known": known or [],
        "message": message,
        "seed": history.seed,
        "stack": stack,
    }


def _verdict(v: VerdictRecord) -> dict[str, Any]:
    return {
        "kind": v.check,
        "role": v.role,
        "by": v.by,
        "name": v.name,
        "status": v.status,
        "message": v.message,
        "params": v.params,
        "evidence": v.evidence,
    }


def _stuck_md(history: History) -> str:
    rows = where_stuck(history)
    if not rows:
        return "Every request ended ok.\n"
    out = ["| op | who | outcome | stuck at | evidence |", "|---|---|---|---|---|"]
    out += [f"| {r.op} | {r.who} | {r.outcome} | **{r.hop}** | {r.evidence} |" for r in rows]
    return "\n".join(out) + "\n"


def write_test_report(folder: Path, history: History, result: dict[str, Any]) -> None:
    folder.mkdir(parents=True, exist_ok=True)
    (folder / "result.json").write_text(json.dumps(result, indent=2))
    (folder / "stuck.md").write_text(f"# Where is it stuck: {result['test']}\n\n{_stuck_md(history)}")
    if history.ops() or history.series("decode", "num_running_reqs"):
        render_timeline(history, folder / "timeline.png", title=f"{result['test']} ({result['outcome']})")


FIGURES = frozenset({"does_not_grow", "amplification_at_most"})  # verdicts whose evidence is a figure a user asks for


def figures(results: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    """(test, verdict) for every verdict that reports a figure (a soak's slopes, retry
    amplification), whatever its status."""
    return [(r["test"], v) for r in results for v in r["verdicts"] if v.get("kind") in FIGURES]


def write_run_summary(run_dir: Path, results: list[dict[str, Any]], *, seed: int, command: str) -> None:
    run_dir.mkdir(parents=True, exist_ok=True)
    (run_dir / "summary.json").write_text(json.dumps({"seed": seed, "command": command, "tests": results}, indent=2))
    counts = Counter(r["outcome"] for r in results)
    lines = [
        f"# pd-chaos run {run_dir.name}",
        "",
        f"seed {seed}; " + ", ".join(f"{n} {k}" for k, n in sorted(counts.items())),
        "",
        "| test | outcome | s | requests | faults | verdicts not passed | rerun |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in results:
        bad = "; ".join(
            f"{v['status']}{'' if v.get('by', 'test') == 'test' else ' (' + v['by'] + ')'}: "
            f"{'premise ' if v.get('role') == 'premise' else ''}{v['name']}"
            for v in r["verdicts"]
            if v["status"] != "pass"
        )
        reqs = ", ".join(f"{k} {n}" for k, n in sorted(r["requests"].items()))
        faults = "; ".join(f["description"] for f in r["faults"])
        lines.append(
            f"| {r['test']} | {r['outcome']} | {r['duration_s']:.1f} | {reqs} | {faults} | {bad} | `pytest '{r['test']}' --seed {seed}` |"
        )
    found = figures(results)
    if found:
        lines += ["", "## Figures", ""] + [
            f"- `{test}` {v['kind']} ({v['status']}): {v['message']}" for test, v in found
        ]
    issues = [r for r in results if r["known_issue"] or r.get("known")]
    if issues:
        lines += ["", "## Known issues (strict xfail)", ""] + [line for r in issues for line in _known(r)]
    lines += _start_failures(run_dir / "stacks")
    lines += _stacks(run_dir / "stacks")
    (run_dir / "summary.md").write_text("\n".join(lines) + "\n")


def _known(result: dict[str, Any]) -> list[str]:
    """A test's known issues: component, version and behaviour, then the verdict records
    that showed it this run."""
    if not result.get("known"):
        return [f"- `{result['test']}` ({result['outcome']}): {result['known_issue']}"]
    lines = []
    for issue in result["known"]:
        lines.append(
            f"- `{result['test']}` ({result['outcome']}): **{issue['component']} {issue['version']}**, "
            f"`{issue['verdict']}`: {issue['behaviour']}"
        )
        lines += [f"  - shown by [{v['status'].upper()}] {v['name']}: {v['message']}" for v in issue["evidence"]]
    return lines


def _stacks(folder: Path) -> list[str]:
    """The stacks the run started (``stacks/*.json``, kept by the stack factory): target,
    port base, and on Compose each service's image with the digest that pins it."""
    lines = []
    for path in sorted(folder.glob("*.json")):
        info = json.loads(path.read_text())
        lines.append(f"- {info['kind']} on port base {info['port_base']}, model {info['config'].get('model', '?')}")
        for service, image in sorted(info["config"].get("compose", {}).get("images", {}).items()):
            pinned = ", ".join(image["digests"]) or f"no registry digest (image {image['id'][:19]})"
            lines.append(f"  - {service}: `{image['ref']}` = {pinned}")
    return ["", "## Stacks", "", *lines] if lines else []


_STOPPED = ("exited", "dead", "restarting")


def _start_failures(folder: Path) -> list[str]:
    """Stacks that did not start (``stacks/start-failed-*/failure.json``, kept by the stack
    factory before the containers went): the error, then each service's state, the ones
    that had stopped or were unhealthy first, with their last log lines."""
    lines = []
    for path in sorted(folder.glob("start-failed-*/failure.json")):
        failure = json.loads(path.read_text())
        lines += [f"### {failure['kind']} on port base {failure['port_base']}", "", f"{failure['error']}", ""]
        services = failure["services"]
        failed = [n for n, svc in services.items() if svc["status"] in _STOPPED or svc["health"] == "unhealthy"]
        waiting = [n for n, svc in services.items() if svc["status"] == "created"]  # on a service that failed
        lines.append(f"failed: {', '.join(failed) or 'no service stopped; see the error'}")
        if waiting:
            lines.append(f"never started (waiting on it): {', '.join(waiting)}")
        for name in sorted(services, key=lambda n: n not in failed):
            svc = services[name]
            oom = ", OOM-killed" if svc["oom_killed"] else ""
            lines += [
                "",
                f"- **{name}**: {svc['status']}, exit code {svc['exit_code']}{oom}"
                f"{', health ' + svc['health'] if svc['health'] else ''}"
                f"{', ' + svc['error'] if svc['error'] else ''}; whole log: `{path.parent.name}/{name}.log`",
            ]
            if name in failed:
                lines += ["", "  ```", *(f"  {line}" for line in svc["last_lines"]), "  ```"]
        lines.append("")
    return ["", "## Stacks that failed to start", "", *lines] if lines else []


def render_run(run_dir: Path) -> int:
    """Draw every test's report again from its history.jsonl and result.json; returns count."""
    results = []
    for result_file in sorted(run_dir.rglob("result.json")):
        folder = result_file.parent
        result = json.loads(result_file.read_text())
        history = History.load(folder / "history.jsonl")
        history.seed = result.get("seed", 0)
        write_test_report(folder, history, result)
        results.append(result)
    seed = results[0]["seed"] if results else 0
    write_run_summary(run_dir, results, seed=seed, command="pdchaos report")
    return len(results)
