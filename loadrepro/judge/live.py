"""The judgements made while the load goes on, with the code the final judgement uses: the engine's death
(judge/death.py) from every request's end, canary and /health poll, and saturation (judge/windows.py) at each
window's end. The runner (load/runner.py) feeds it what it sees and acts on what it says: a death is noted and
stops the load, saturation ends it with [load] stop_when_saturated. Pure: no I/O, no clock."""

from __future__ import annotations

import dataclasses
from collections.abc import Iterable
from dataclasses import dataclass, field

from loadrepro.judge.death import Death, DeathJudge
from loadrepro.judge.windows import saturation, windows
from loadrepro.records import Outcome, RunResult

# What a request that ended so says of the engine: nothing (not sent to it, or cut by loadrepro or a fault of its
# own), or that it served it.
_SAYS_NOTHING = (Outcome.CANCELLED, Outcome.REJECTED, Outcome.FAULTED)


@dataclass(slots=True)
class LiveJudge:
    upstream: frozenset[str]  # the catalog's signatures that name a gateway's unreachable upstream
    death: DeathJudge = field(default_factory=lambda: DeathJudge(usable=False))  # usable once /health was 200

    def health_before(self, healthy: bool) -> None:
        """/health before the load: a target whose /health did not answer 200 then says nothing of its death."""
        self.death.usable = healthy

    @property
    def dead(self) -> bool:
        return self.death.dead

    @staticmethod
    def failed(outcome: Outcome) -> bool:
        """An outcome that counts against the engine while the load goes on (a throttled request too: the engine
        refused it)."""
        return outcome is not Outcome.OK and outcome not in _SAYS_NOTHING

    def request_ended(self, outcome: Outcome, signature: str | None, end_ns: int, progress_ns: int) -> Death | None:
        """A request of the load's (or a canary) that ended at `end_ns`, the engine last seen progressing at
        `progress_ns`: a Death when it is the one that shows the engine dead."""
        if outcome is Outcome.OK:
            self.death.request_ok()
            return None
        if not self.failed(outcome):
            return None
        # A refusal to come back later is not the upstream gone, whatever page the proxy sent with it.
        upstream = signature if outcome is not Outcome.THROTTLED and signature in self.upstream else None
        return self.death.request_failed(end_ns, upstream, progress_ns)

    def health_polled(self, t_ns: int, status: int | str, progress_ns: int, process_runs: bool) -> Death | None:
        """A /health poll started at `t_ns`. No answer at all from an engine whose process runs (`process_runs`) is
        its frontend starved, not its death; an answer that is not 200 is the engine's own word that it is out of
        service (vLLM's API server with EngineCore dead)."""
        return self.death.poll(t_ns, status, progress_ns, status == "unreachable" and process_runs)

    @staticmethod
    def saturated(so_far: RunResult, window_s: float, backlog: Iterable[tuple[int, int]]) -> bool:
        """Whether the run so far is saturated (judge/windows.py), its windows' requests in flight and waiting in
        loadrepro to be sent at their ends taken from `backlog` (a request is counted when it ends, so those are
        read live)."""
        taken = list(backlog)
        live = [dataclasses.replace(w, in_flight_end=taken[i][0], unsent_end=taken[i][1])
                for i, w in enumerate(windows(so_far, window_s)) if i < len(taken)]
        return saturation(live) is not None
