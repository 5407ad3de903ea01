"""Replicas of the target ([target] replicas), measured: each one's requests, first-token times and /health, and
the death of one while others served (judge/deployment.py's rule replica_death reads it). Replica 0 is the target
(its death is also engine_death's); the others are watched as [[watch.endpoints]] are (judge/endpoints.py says when
one died). Pure."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass

from loadrepro.judge.endpoints import endpoint_health
from loadrepro.judge.findings import quote
from loadrepro.judge.polls import left_service, slow_polls
from loadrepro.judge.signatures import SignatureClass
from loadrepro.records import HealthSample, Outcome, RequestRecord, RunResult, Watched, replica_name
from loadrepro.records.tally import ReplicaTally


@dataclass(frozen=True, slots=True)
class ReplicaFigures:
    index: int
    name: str
    url: str
    tally: ReplicaTally
    pre: int | str | None  # its /health before the load (the first poll): a status or "unreachable"
    post: int | str | None  # after it (the last poll)
    slow: int  # polls slower than [watch] health_timeout_s
    died_s: float | None  # when it left service, to the end of the run (None: it did not)
    why: str  # what said so
    # What said so, as names: `exit` (its process), `health` (not 200 to the end), `unreachable` (requests that
    # could not reach it just before the end), `engine_death` (the target's own); `log`: its log's fatal line.
    seen_by: tuple[str, ...] = ()
    exit_code: int | None = None  # its process's, when it exited (negative: the signal)


def sent_to(result: RunResult, records: list[RequestRecord]) -> str:
    """Which replicas `records` went to, most first ("replica-1: 16, replica-0: 3"); nothing when the run had no
    replicas."""
    if not result.replicas:
        return ""
    return ", ".join(f"{replica_name(i)}: {n}" for i, n in Counter(r.replica for r in records).most_common())


def replica_health(w: Watched) -> list[HealthSample]:
    """A replica's polls in order, if it answered 200 first (else they say nothing of its death)."""
    polls = sorted(w.health, key=lambda s: s.t_ns)
    return polls if polls and polls[0].healthy else []


def _target_died(result: RunResult) -> tuple[float | None, str]:
    left = left_service(result)
    if left is None:
        return None, ""
    t_ns, said = left
    return result.seconds(t_ns), f"engine_death: {said.text}" if said else "engine_death: /health not 200 after the run"


@dataclass(frozen=True, slots=True)
class _Died:
    t_s: float | None
    why: str = ""
    seen_by: tuple[str, ...] = ()
    exit_code: int | None = None


def replica_figures(result: RunResult, window_s: float) -> list[ReplicaFigures]:
    """Every replica's figures, the target first; none when the run had no replicas."""
    if not result.replicas:
        return []
    replicas = result.totals(window_s).replicas
    died_s, why = _target_died(result)
    post = result.post_health.status if result.post_health else None
    found = [ReplicaFigures(0, replica_name(0), result.base_url, replicas.get(0, ReplicaTally()),
                            result.health[0].status if result.health else None, post,
                            len(slow_polls(result.health, result.watch)), died_s, why,
                            ("engine_death",) if died_s is not None else ())]
    for i, w in enumerate(result.replicas, 1):
        polls, tally = sorted(w.health, key=lambda s: s.t_ns), replicas.get(i) or ReplicaTally()
        died = _replica_died(result, i, w, tally)
        found.append(ReplicaFigures(i, w.name, w.url, tally,
                                    polls[0].status if polls else None, polls[-1].status if polls else None,
                                    len(slow_polls(polls, result.watch)), died.t_s, died.why, died.seen_by,
                                    died.exit_code))
    return found


def _replica_died(result: RunResult, index: int, w: Watched, tally: ReplicaTally) -> _Died:
    """When a replica beside the target left service and what said so: its process exited (one loadrepro
    started), or its /health went not 200 to the end of the run while it completed no request after it (a
    starved /health near the end of the load is busy, not dead); with its log's first fatal line when it had one."""
    e = endpoint_health(result, w)
    served_later = e.died_s is not None and tally.last_ok_ns is not None and \
        result.seconds(tally.last_ok_ns) > e.died_s
    said, times, seen = [], [], []
    if w.exit is not None:
        times.append(result.seconds(w.exit.t_ns))
        said.append(f"its process {w.exit.how} (seen at {times[-1]:.1f} s)")
        seen.append("exit")
    if e.died_s is not None and not served_later:
        times.append(e.died_s)
        said.append(f"its /health got {e.first_bad} and no 200 after it to the end of the run, and it completed no "
                    "request after it")
        seen.append("health")
    elif (cut := _cut_off(result, index, w, tally)) is not None:
        times.append(cut[0])
        said.append(cut[1])
        seen.append("unreachable")
    if not times:
        return _Died(None)
    fatal = next((m for m in result.log_matches if m.replica == index and m.klass == SignatureClass.FATAL.value),
                 None)
    if fatal is not None:
        said.append(f"its log, line {fatal.line_number}: {quote(fatal.line)}")
        seen.append("log")
    return _Died(min(times), "; ".join(said), tuple(seen), w.exit.code if w.exit is not None else None)


def _cut_off(result: RunResult, index: int, w: Watched, tally: ReplicaTally) -> tuple[float, str] | None:
    """A replica that died just before the run ended, too late for MIN_DOWN_POLLS polls to say so: after its last
    completed request, requests sent to it could not connect at all (unreachable: nothing listened), and its
    /health never answered 200 again (polled once at least since; or, not polled again before the run ended, two
    such requests or more). When the first of those came, and what said so."""
    after = tally.last_ok_ns or result.start_ns
    refused = [r for r in result.records
               if r.replica == index and r.end_ns > after and r.outcome is Outcome.UNREACHABLE]
    polls = [s for s in sorted(w.health, key=lambda s: s.t_ns) if s.t_ns > after]
    if not refused or any(s.healthy for s in polls) or not replica_health(w) or (not polls and len(refused) < 2):
        return None
    first = min([refused[0].end_ns, *(s.t_ns for s in polls[:1])])
    health = (f"its /health got {polls[0].status} and no 200 after it to the end of the run" if polls else
              "its /health was not polled again before the run ended")
    return result.seconds(first), (f"{len(refused)} requests sent to it after its last answer could not reach it, "
                                   f"and {health}")
