"""When the engine is dead, judged from /health and the requests: one definition for the runner, which stops the
load, and for the rules, which report it. Pure: no I/O, no clock."""

from __future__ import annotations

from dataclasses import dataclass

# Consecutive non-200 /health polls, with requests failing meanwhile, that mean the engine left service. One poll
# is not enough: a busy engine can miss one.
DEATH_POLLS = 2


@dataclass(slots=True)
class DeathJudge:
    """Fed every request failure and every /health poll, in order; says when the engine died."""

    usable: bool  # /health answered 200 before the run: else it says nothing about death
    unhealthy_streak: int = 0
    failures: int = 0  # requests failed since /health last answered 200
    dead: bool = False

    def request_failed(self) -> None:
        self.failures += 1

    def poll(self, healthy: bool) -> bool:
        """Take one /health poll; True exactly once, at the poll that shows the engine dead."""
        if not self.usable or self.dead:
            return False
        if healthy:
            self.unhealthy_streak = self.failures = 0
            return False
        self.unhealthy_streak += 1
        self.dead = self.unhealthy_streak >= DEATH_POLLS and self.failures > 0
        return self.dead
