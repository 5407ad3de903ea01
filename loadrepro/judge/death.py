"""When the engine is dead, judged while the run goes on from /health, the requests and the engine's progress:
the runner stops on it and notes it (source "death"), and the engine_death rule reports that note. Pure: no I/O,
no clock; every event comes with its time and the last moment the engine made progress (a token on any stream,
a canary's token, or its metrics moving).

A slow /health is an answer (a busy engine answers late: vllm#24207, ray#54070), and an engine that keeps making
progress is not dead whatever its /health says (SGLang's /health runs a generation and answers 503 when it waits
too long behind the load).
"""

from __future__ import annotations

from dataclasses import dataclass

# Consecutive non-200 /health polls, with requests failing meanwhile and no progress in between, that mean the
# engine left service. One poll is not enough: a busy engine can miss one.
DEATH_POLLS = 2
# Consecutive failures with one gateway's word that its upstream is unreachable, with no request succeeding and no
# progress since the first: behind a gateway whose health paths stay 200, that is how the engine's death looks.
UPSTREAM_FAILURES = 4


@dataclass(frozen=True, slots=True)
class Death:
    t_ns: int  # when the engine left service: the first poll of the unhealthy streak, or the first upstream failure
    words: str  # how it was judged, for the report


@dataclass(slots=True)
class DeathJudge:
    """Fed every request's end and every /health poll, in order; says when the engine died, once."""

    usable: bool  # /health answered 200 before the run: else it says nothing about death
    unhealthy_streak: int = 0
    streak_start_ns: int = 0
    last_poll_ns: int = 0
    failures: int = 0  # requests failed since /health last answered 200
    upstream: str | None = None  # the gateway signature every failure since `upstream_start_ns` carried
    upstream_count: int = 0
    upstream_start_ns: int = 0
    last_status: int | str | None = None  # of the latest /health poll
    dead: bool = False

    def request_ok(self) -> None:
        self._forget_upstream()

    def _forget_upstream(self) -> None:
        self.upstream, self.upstream_count = None, 0

    def request_failed(self, t_ns: int, upstream: str | None, progress_ns: int) -> Death | None:
        """A failed request, ending at `t_ns`; `upstream` names the gateway signature its text matched, if any."""
        self.failures += 1
        if upstream is None:  # a failure of another kind: not every failure since then is the gateway's word
            self._forget_upstream()
            return None
        if upstream != self.upstream or progress_ns > self.upstream_start_ns:
            self.upstream, self.upstream_count, self.upstream_start_ns = upstream, 0, t_ns
        self.upstream_count += 1
        if self.dead or self.upstream_count < UPSTREAM_FAILURES:
            return None
        self.dead = True
        health = ("; /health still answers 200, so it belongs to the gateway, not to the engine behind it"
                  if self.last_status == 200 else "")
        return Death(self.upstream_start_ns, f"every request since then failed with the gateway's `{upstream}` "
                                             f"({self.upstream_count} in a row) and none succeeded{health}")

    def poll(self, t_ns: int, status: int | str, progress_ns: int, running: bool = False) -> Death | None:
        """Take one /health poll started at `t_ns`; a Death exactly once, at the poll that shows the engine dead.
        `running`: the poll got no answer and the engine's process is known to run (a managed engine): its
        frontend is unresponsive, not dead (llama.cpp's HTTP threads all held by requests waiting for a slot); the
        health rule frontend_unresponsive says so, and the stalls say what did not progress. An answer that is
        not 200 is the engine's own word, whatever its process does."""
        previous, self.last_poll_ns, self.last_status = self.last_poll_ns, t_ns, status
        if not self.usable or self.dead:
            return None
        if status == 200 or progress_ns > previous or running:  # answering, working, or its process runs
            self.unhealthy_streak = 0
            if status == 200:
                self.failures = 0
            return None
        if self.unhealthy_streak == 0:
            self.streak_start_ns = t_ns
        self.unhealthy_streak += 1
        if self.unhealthy_streak < DEATH_POLLS or self.failures == 0:
            return None
        self.dead = True
        return Death(self.streak_start_ns, f"/health answered {status} {self.unhealthy_streak} times in a row while "
                                           "requests failed and the engine made no progress")
