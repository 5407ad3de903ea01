"""Rules over the deployment's other parts, from what the judge measured of them: endpoint_death (a process of
[[watch.endpoints]] that died; a pool dead behind a router that still answers is the deployment's death, whatever
the router says) and replica_death (a replica of [target] replicas that left service while others served). Pure."""

from __future__ import annotations

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Fact, Finding, Severity
from loadrepro.judge.measurements import Measurements
from loadrepro.records import Outcome, RunResult


def _target_answered(result: RunResult, after_s: float) -> bool:
    return any(s.healthy and result.seconds(s.t_ns) >= after_s for s in result.health)


def endpoint_death(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """A watched endpoint whose /health answered 200 and then, to the end of the run, did not (at least
    MIN_DOWN_POLLS polls): FAIL, named, with whether the target's own /health still answered 200 meanwhile (a dead
    pool behind a router that answers). Down a while and back, or never 200 at all (not judged): information.

    Facts: `dead`, `down_and_back`, `never_ok` (endpoints), and of the first dead: `endpoint`, `died_at_s`,
    `target_answered` (1: the target's /health still answered 200 after it)."""
    found = measured.endpoints
    dead = [e for e in found if e.died_s is not None]
    facts: dict[str, Fact] = {"dead": len(dead), "down_and_back": sum(1 for e in found if e.down and e.died_s is None),
                              "never_ok": sum(1 for e in found if e.never_ok)}
    if dead:
        answered = [_target_answered(result, e.died_s or 0.0) for e in dead]
        facts |= {"endpoint": dead[0].name, "died_at_s": round(dead[0].died_s or 0.0, 3),
                  "target_answered": int(answered[0])}
        return Finding("endpoint_death", Severity.FAIL, "; ".join(
            f"{e.name} died at {e.died_s:.1f} s: its /health got {e.first_bad} and no 200 after it to the end of the "
            "run" + (", while the target's /health still answered 200 (a part of the deployment dead behind a "
                     "front that answers)" if up else "") for e, up in zip(dead, answered, strict=True)), facts)
    said = [f"{e.name}'s /health was not 200 from " + ", ".join(f"{a:.1f} to {b:.1f} s" for a, b in e.down)
            + ", then 200 again" for e in found if e.down]
    said += [f"{e.name}'s /health never answered 200 ({e.polls} polls): not judged" for e in found if e.never_ok]
    return Finding("endpoint_death", Severity.INFO, "; ".join(said), facts) if said else None


def _served_after(result: RunResult, replica: int, t_s: float) -> int:
    """Requests of that replica completed after t_s, of those kept in memory."""
    t_ns = result.start_ns + round(t_s * 1e9)
    return sum(1 for r in result.records if r.replica == replica and r.outcome is Outcome.OK and r.end_ns > t_ns)


def replica_death(result: RunResult, spec: VerdictSpec, measured: Measurements) -> Finding | None:
    """A replica left service while another served (completed a request after it died): FAIL, naming it, when and
    why, and what the others completed after it. Threshold: one replica. Every replica dead is the deployment's
    death, said the same way (engine_death says the target's).

    Facts: `dead` (replicas), and of the first: `replica`, `died_at_s`, `seen_by` (`exit`, `health`, `unreachable`,
    `engine_death`, `log`, joined by `+`), `exit_code` (when its process exited; negative: the signal),
    `served_after_by_others`."""
    figures = measured.replicas
    dead = [f for f in figures if f.died_s is not None]
    if not dead:
        return None
    kept = "" if not result.totals(spec.window_s).dropped else " (of the requests kept in memory)"
    said, served_by_others = [], []
    for f in dead:
        assert f.died_s is not None
        others = [(o.name, _served_after(result, o.index, f.died_s)) for o in figures if o.index != f.index]
        served = ", ".join(f"{name} {n:,}" for name, n in others)
        words = (f"{f.name} ({f.url}) died at {f.died_s:.1f} s: {f.why}; {f.tally.requests:,} requests went to it "
                 f"({f.tally.by_outcome.get(Outcome.OK.value, 0):,} ok); completed after it by the others{kept}: "
                 f"{served}")
        said.append(words if any(n for _, n in others) else words + " (none: every replica was down)")
        served_by_others.append(sum(n for _, n in others))
    first = dead[0]
    facts: dict[str, Fact] = {"dead": len(dead), "replica": first.name, "died_at_s": round(first.died_s or 0.0, 3),
                              "seen_by": "+".join(first.seen_by), "served_after_by_others": served_by_others[0]}
    if first.exit_code is not None:
        facts["exit_code"] = first.exit_code
    return Finding("replica_death", Severity.FAIL, "; ".join(said), facts)


DEPLOYMENT_RULES = (endpoint_death, replica_death)
