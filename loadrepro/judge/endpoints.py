"""The other processes of the deployment ([[watch.endpoints]]): when one died (its /health 200, then not, and never
again to the end of the run), or was down a while and came back. A pool dead behind a router that still answers is
the deployment's death, whatever the router says: rule endpoint_death. Pure."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.config.profile import VerdictSpec
from loadrepro.judge.findings import Finding, Severity
from loadrepro.records import KV_USAGE, WAITING, HealthSample, RunResult, Watched

MIN_DOWN_POLLS = 2  # polls in a row not 200 to the end of the run before an endpoint is called dead


@dataclass(frozen=True, slots=True)
class EndpointHealth:
    name: str
    polls: int
    not_ok: int  # polls not answered 200
    died_s: float | None  # the first poll not 200 after its last 200, when none came after it (dead to the end)
    first_bad: str | None  # what that poll got
    down: tuple[tuple[float, float], ...]  # stretches not 200 that ended with a 200 again (from, to)
    never_ok: bool  # never answered 200: not judged
    kv_usage_peak: float | None
    waiting_peak: float | None


def _status(sample: HealthSample) -> str:
    return "no answer" if sample.status == "unreachable" else f"HTTP {sample.status}"


def endpoint_health(result: RunResult, w: Watched) -> EndpointHealth:
    polls = sorted(w.health, key=lambda s: s.t_ns)
    ok = [i for i, s in enumerate(polls) if s.healthy]
    last_ok = ok[-1] if ok else None
    tail = polls[last_ok + 1:] if last_ok is not None else []
    dead = last_ok is not None and len(tail) >= MIN_DOWN_POLLS
    down, start = [], None
    for s in polls[:(last_ok + 1) if last_ok is not None else 0]:
        if not s.healthy and start is None:
            start = s.t_ns
        elif s.healthy and start is not None:
            down.append((result.seconds(start), result.seconds(s.t_ns)))
            start = None
    kv = [v for m in w.metrics if (v := m.values.get(KV_USAGE)) is not None]
    waiting = [v for m in w.metrics if (v := m.values.get(WAITING)) is not None]
    return EndpointHealth(w.name, len(polls), sum(not s.healthy for s in polls),
                          result.seconds(tail[0].t_ns) if dead else None, _status(tail[0]) if dead else None,
                          tuple(down), bool(polls) and not ok, max(kv, default=None), max(waiting, default=None))


def _target_answered(result: RunResult, after_s: float) -> bool:
    return any(s.healthy and result.seconds(s.t_ns) >= after_s for s in result.health)


def endpoint_death(result: RunResult, spec: VerdictSpec) -> Finding | None:
    """A watched endpoint whose /health answered 200 and then, to the end of the run, did not (at least
    MIN_DOWN_POLLS polls): FAIL, named, with whether the target's own /health still answered 200 meanwhile (a dead
    pool behind a router that answers). Down a while and back, or never 200 at all (not judged): information."""
    found = [endpoint_health(result, w) for w in result.watched]
    dead = [e for e in found if e.died_s is not None]
    if dead:
        return Finding("endpoint_death", Severity.FAIL, "; ".join(
            f"{e.name} died at {e.died_s:.1f} s: its /health got {e.first_bad} and no 200 after it to the end of the "
            "run" + (", while the target's /health still answered 200 (a part of the deployment dead behind a "
                     "front that answers)" if _target_answered(result, e.died_s or 0.0) else "") for e in dead))
    said = [f"{e.name}'s /health was not 200 from " + ", ".join(f"{a:.1f} to {b:.1f} s" for a, b in e.down)
            + ", then 200 again" for e in found if e.down]
    said += [f"{e.name}'s /health never answered 200 ({e.polls} polls): not judged" for e in found if e.never_ok]
    return Finding("endpoint_death", Severity.INFO, "; ".join(said)) if said else None


ENDPOINT_RULES = (endpoint_death,)
