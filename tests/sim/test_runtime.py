"""The step loop keeps the simulated engine's speed when the machine wakes it late: a step due every `step_s`
is made up by the next ones, so the tokens of a long answer come `step_s` apart on average, not `step_s` plus
the machine's lateness (which made two runs of one engine differ when another process loaded the machine)."""

from __future__ import annotations

import asyncio
import logging

from loadrepro.sim.config import sim_config
from loadrepro.sim.runtime import CATCH_UP_STEPS, SimRuntime, Token


class LateMachine:
    """A clock and a sleep on it that wakes `late` x the asked time late, as a busy CPU does, and its `stall_at`-th
    sleep `stall_s` late (a moment the machine ran something else)."""

    def __init__(self, late: float, stall_at: int = 0, stall_s: float = 0.0) -> None:
        self.now, self.late, self.stall_at, self.stall_s, self.sleeps = 0.0, late, stall_at, stall_s, 0

    def clock(self) -> float:
        return self.now

    async def sleep(self, seconds: float) -> None:
        self.sleeps += 1
        self.now += seconds * (1 + self.late) + (self.stall_s if self.sleeps == self.stall_at else 0.0)
        await asyncio.sleep(0)


def token_times(machine: LateMachine, tokens: int = 200) -> list[float]:
    """When each of a `tokens`-token answer's tokens came, on the machine's clock."""
    runtime = SimRuntime(sim_config("healthy", "patched", step_s=0.01), logging.getLogger("test"),
                         clock=machine.clock, sleep=machine.sleep)

    async def answer() -> list[float]:
        loop = asyncio.create_task(runtime.run())
        handle = runtime.submit(["a"] * 100, tokens, ignore_eos=True)
        times = []
        async for event in handle.events():  # type: ignore[union-attr]
            if isinstance(event, Token):
                times.append(machine.now)
        loop.cancel()
        return times

    return asyncio.run(answer())


def mean_gap(times: list[float]) -> float:
    return (times[-1] - times[0]) / (len(times) - 1)


def test_steps_woken_late_are_made_up_and_the_answer_keeps_its_pace():
    assert abs(mean_gap(token_times(LateMachine(late=0.0))) - 0.01) < 1e-6
    # every sleep 40% late: the loop asks for less next time, and the pace stays that of step_s
    assert abs(mean_gap(token_times(LateMachine(late=0.4))) - 0.01) < 0.0002


def test_a_short_stall_is_made_up_and_a_long_one_sets_the_pace_again():
    """One sleep 15 ms late (1.5 steps): the step it missed is made up at once and the answer keeps its pace. One
    1 s late (100 steps): the schedule starts again from there, with no steps back to back: a hundred tokens
    bunched together would read as a burst the engine never made."""
    short = token_times(LateMachine(late=0.0, stall_at=50, stall_s=0.015))
    assert bunched(short) == 1 and abs(short[-1] - short[0] - 199 * 0.01) < 1e-6
    long = token_times(LateMachine(late=0.0, stall_at=50, stall_s=1.0))
    assert bunched(long) == 0 and abs(long[-1] - long[0] - (1.0 + 199 * 0.01)) < 1e-6
    assert CATCH_UP_STEPS < 100


def bunched(times: list[float]) -> int:
    """Tokens that came with no step between them."""
    return sum(b - a < 0.005 for a, b in zip(times, times[1:], strict=False))
