"""Whether replies are right: each equals the fault-free baseline's reply to its context,
and each says truthfully why it ended."""

from __future__ import annotations

from chaos.judge.declare import verdict
from chaos.judge.model import Finding, failed, passed, unknown
from chaos.judge.ops import completed, label, naming, phase_tag
from chaos.observe.history import History
from chaos.observe.records import Done, Outcome, Phase

__all__ = ["baseline_replies", "finish_reasons_tell_the_truth", "never_served_wrong", "replies_match_baseline"]


def _divergence(got: str, want: str) -> tuple[int, str]:
    """Where a reply leaves its baseline: the first differing character, with a little of
    each side from there (a reply can be right for pages and wrong after)."""
    at = next((i for i, (a, b) in enumerate(zip(got, want, strict=False)) if a != b), min(len(got), len(want)))
    return at, f"differs from char {at} of {len(want)}: got {got[at : at + 40]!r}, baseline {want[at : at + 40]!r}"


def baseline_replies(h: History, baseline_phase: Phase) -> dict[str, str]:
    """Each context's reply in the fault-free baseline (its successful requests)."""
    return {
        o.invoke.context: o.complete.reply
        for o in completed(h, baseline_phase)
        if o.outcome is Outcome.OK and o.invoke.context
    }


@verdict(lambda **_: "replies_match_baseline")
def replies_match_baseline(h: History, *, baseline_phase: Phase = Phase.BASELINE) -> Finding:
    """Every successful reply equals the fault-free baseline's reply to the same context."""
    ops = [o for o in completed(h, None) if o.outcome is Outcome.OK and o.invoke.context]
    base = baseline_replies(h, baseline_phase)
    pairs = [(o, base[o.invoke.context]) for o in ops if o.invoke.phase != baseline_phase and o.invoke.context in base]
    if not pairs:
        return unknown("no reply shares a context with the baseline")
    wrong = [(o, b, _divergence(o.complete.reply, b)) for o, b in pairs if o.complete.reply != b]
    if wrong:
        ev = "; ".join(f"{label(o)} {said}" for o, _, (_, said) in wrong[:3])
        return failed(
            f"{len(wrong)} of {len(pairs)} replies differ from the baseline: {ev}",
            ops=[o.invoke.op for o, _, _ in wrong],
            wrong=len(wrong),
            of=len(pairs),
            first_difference_at=[at for _, _, (at, _) in wrong[:8]],
        )
    return passed(f"{len(pairs)} replies equal the baseline", stake=len(pairs), of=len(pairs))


@verdict(lambda phase, **_: f"never_served_wrong{phase_tag(phase)}")
def never_served_wrong(h: History, *, phase: Phase, baseline_phase: Phase = Phase.BASELINE) -> Finding:
    """No request of ``phase`` succeeded with a reply other than the fault-free baseline's
    to its context: each either failed or replied right. Where a fault may leave a request
    no right answer (its KV corrupted), failing it is the engine's right; serving a wrong
    reply with a success never is. At stake: every request of ``phase`` whose context the
    baseline answered (each could have been served wrong), whether it failed or not."""
    base = baseline_replies(h, baseline_phase)
    judged = [o for o in completed(h, phase) if o.invoke.context in base]
    if not judged:
        return unknown(f"no request of phase {Phase(phase).value!r} shares a context with the baseline")
    served = [o for o in judged if o.outcome is Outcome.OK]
    wrong = [
        (o, _divergence(o.complete.reply, base[o.invoke.context]))
        for o in served
        if o.complete.reply != base[o.invoke.context]
    ]
    if wrong:
        return failed(
            f"{len(wrong)} of {len(judged)} requests were served a reply other than the baseline's: "
            + "; ".join(f"{label(o)} {said}" for o, (_, said) in wrong[:3]),
            ops=[o.invoke.op for o, _ in wrong],
            wrong=len(wrong),
            of=len(judged),
        )
    return passed(
        f"none of {len(judged)} requests was served wrong ({len(served)} replied as the baseline, "
        f"{len(judged) - len(served)} failed)",
        stake=len(judged),
        of=len(judged),
        served=len(served),
    )


def _finish_lie(o: Done) -> str:
    """What a successful reply's finish reason claims that its token count belies ("" if
    nothing): ``length`` short of ``max_tokens``; ``stop`` short of it where nothing could
    stop it (``ignore_eos`` and no stop condition: SGLang then checks no stop token); more
    tokens than asked for."""
    n, m, fin = o.complete.completion_tokens, o.invoke.max_tokens, o.complete.finish
    if n is None or m is None:
        return ""
    if n > m:
        return f"{n} tokens, {m} asked for"
    if fin == "length" and n < m:
        return f"finish 'length' at {n} of {m} tokens"
    if fin == "stop" and n < m and o.invoke.ignore_eos and not o.invoke.stops:
        return f"finish 'stop' at {n} of {m} tokens, with ignore_eos and no stop condition"
    return ""


@verdict(lambda phase=None, **_: "finish_reasons_tell_the_truth" + phase_tag(phase))
def finish_reasons_tell_the_truth(h: History, *, phase: Phase | None = None) -> Finding:
    """Every successful reply's finish reason agrees with its token count: a reply cut short
    and called finished (``length`` before its ``max_tokens``, ``stop`` where nothing could
    stop it) is a failure the client cannot see, not a success. Replies that gave no token
    count are not judged, and are counted."""
    ops = [o for o in completed(h, phase) if o.outcome is Outcome.OK]
    if not ops:
        return unknown("no request succeeded")
    checked = [o for o in ops if o.complete.completion_tokens is not None and o.invoke.max_tokens is not None]
    if not checked:
        return unknown(f"none of {len(ops)} successful replies gave its token count and its max_tokens")
    lies = [o for o in checked if _finish_lie(o)]
    if lies:
        return naming(
            lies,
            len(checked),
            "finish reasons do not agree with their token counts",
            lambda o: f"{label(o)}: {_finish_lie(o)}",
            finishes=sorted({o.complete.finish for o in lies}),
        )
    return passed(
        f"{len(checked)} finish reasons agree with their token counts"
        + (f" ({len(ops) - len(checked)} replies gave no count)" if len(ops) > len(checked) else ""),
        stake=len(checked),
        of=len(checked),
        unchecked=len(ops) - len(checked),
    )
