"""The other processes of the deployment ([[watch.endpoints]]), measured: when one died (its /health 200, then not,
and never again to the end of the run), or was down a while and came back (judge/deployment.py's rule
endpoint_death reads it). Pure."""

from __future__ import annotations

from dataclasses import dataclass

from loadrepro.records import KV_USAGE, WAITING, HealthSample, RunResult, Watched

MIN_DOWN_POLLS = 2  # polls in a row not 200 to the end of the run before an endpoint is called dead


@dataclass(frozen=True, slots=True)
class EndpointFigures:
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


def endpoint_health(result: RunResult, w: Watched) -> EndpointFigures:
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
    return EndpointFigures(w.name, len(polls), sum(not s.healthy for s in polls),
                          result.seconds(tail[0].t_ns) if dead else None, _status(tail[0]) if dead else None,
                          tuple(down), bool(polls) and not ok, max(kv, default=None), max(waiting, default=None))
