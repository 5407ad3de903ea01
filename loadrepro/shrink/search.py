"""The search for the smallest workload that still fails the same way, in the manner of Hypothesis's shrinker:
passes over the workload's knobs, each a binary search for the knob's smallest value that still fails (trying the
floor first, since it often does), repeated until a round makes no progress or the budget is spent.

Pure of I/O: a trial is a function given (a fresh engine per trial is the caller's job), so the search is tested
with arithmetic predicates and runs real trials in `loadrepro shrink`.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from pathlib import Path

from pydantic import ValidationError

from loadrepro.config.profile import Profile

# (section, key, floor): the order of the passes. Fewer conversations and turns first: they cut trial time most.
KNOBS: tuple[tuple[str, str, int], ...] = (
    ("workload", "conversations", 1), ("workload", "turns", 1), ("workload", "groups", 0),
    ("workload", "prefix_tokens", 64), ("workload", "turn_tokens", 1), ("workload", "max_tokens", 1),
    ("load", "concurrency", 1),
)
# A trace's requests (and agents', made as a trace's rows) are its own: fewer sessions (the last to begin go
# first), then fewer requests (the latest), shorter lengths (blocks shrink with them, so the sharing stays), then
# less concurrency. 0 means all.
TRACE_KNOBS: tuple[tuple[str, str, int], ...] = (
    ("workload", "trace_max_sessions", 1), ("workload", "trace_max_requests", 1),
    ("workload", "trace_length_percent", 1), ("load", "concurrency", 1))


def knobs_for(profile: Profile) -> tuple[tuple[str, str, int], ...]:
    """The knobs a workload of this kind is shrunk by: a trace's (and agents') or conversations'."""
    return KNOBS if profile.workload.kind == "conversations" else TRACE_KNOBS


@dataclass(frozen=True, slots=True)
class Trial:
    """One run of a candidate workload on a fresh engine."""

    failed: bool  # failed the same way as the original
    requests: int
    prompt_tokens: int
    seconds: float
    how: str  # what happened, in a few words
    run_dir: Path | None = None
    lengths: tuple[tuple[int, int, int, int], ...] = ()  # per request: conversation, turn, prompt tokens, max_tokens
    runs: int = 1  # runs of the candidate (--confirm K/N: up to N)
    failures: int = 0  # of those, the ones that failed the same way
    stops: str = ""  # why the search cannot go on after it (its engine did not start, the time ran out); "": it can.
    # Its first line is the reason; the lines after it (an engine log's tail) are said and written below it.

    @property
    def result(self) -> str:
        """Its outcome in a word or a few, as the console and shrink.md both say it."""
        return "fails" if self.failed else self.how


@dataclass(frozen=True, slots=True)
class Step:
    change: str  # "start", or "workload.turns 2 -> 1"
    trial: Trial


@dataclass
class PassStats:
    trials: int = 0
    failures: int = 0
    seconds: float = 0.0


@dataclass
class Shrunk:
    profile: Profile
    best: Trial
    steps: list[Step] = field(default_factory=list)  # every trial, in order
    passes: dict[str, PassStats] = field(default_factory=dict)  # per knob
    searched: set[tuple[str, str]] = field(default_factory=set)
    trials: int = 0
    failures: int = 0
    seconds: float = 0.0
    stopped: str = "no pass made progress"
    interrupted: bool = False  # Ctrl-C or SIGTERM: the best is the smallest failing workload found before it
    cut: bool = False  # a trial ended the search (`stopped` says why)


RunTrial = Callable[[Profile], Awaitable[Trial]]


def with_value(profile: Profile, section: str, key: str, value: int) -> Profile | None:
    """The profile with one knob changed, or None when that makes it invalid (groups beyond conversations...)."""
    data = profile.model_dump(mode="json", by_alias=True)
    data[section][key] = value
    if section == "workload" and key == "conversations":
        data["workload"]["groups"] = min(data["workload"]["groups"], value)
    try:
        return Profile.model_validate(data)
    except ValidationError:
        return None


class Shrinker:
    """The search. The time budget is decided between trials on `clock`, and every trial (its engine's start
    included) is cut at the budget's end on the event loop's clock (the same monotonic clock, unless a test gives
    its own): a trial cut short ends the search."""

    def __init__(self, run_trial: RunTrial, max_trials: int, time_budget_s: float,
                 say: Callable[[str], None] = lambda _: None, clock: Callable[[], float] = time.monotonic) -> None:
        self._run, self._max_trials, self._budget_s, self._say, self._clock = run_trial, max_trials, time_budget_s, \
            say, clock
        self._started = 0.0
        self._loop_started = 0.0

    @property
    def deadline(self) -> float:
        """When the budget ends, on the event loop's clock (what runs after the search, --confirm, ends by it too)."""
        return self._loop_started + self._budget_s

    async def shrink(self, profile: Profile) -> Shrunk:
        """Shrink `profile`, whose workload must fail (the first trial checks that it does)."""
        self._started = self._clock()
        self._loop_started = asyncio.get_running_loop().time()
        first = await self._bounded(profile, 1, "the original workload")
        state = Shrunk(profile, first, [Step("start", first)], trials=1, failures=int(first.failed))
        self._said(1, "the original workload", first, state)
        if not first.failed:
            state.stopped = f"{first.stops.splitlines()[0]} (trial 1: the original workload)" if first.stops else \
                "the original workload did not fail the same way"
            state.cut = bool(first.stops)
            return self._done(state)
        try:
            await self._rounds(state, knobs_for(profile))
        except KeyboardInterrupt:  # a signal ends the search, not the result: the best so far still fails
            state.stopped, state.interrupted = "interrupted", True
        return self._done(state)

    async def _rounds(self, state: Shrunk, knobs: tuple[tuple[str, str, int], ...]) -> None:
        progress = True
        while progress and not self._spent(state):
            progress = False if knobs is TRACE_KNOBS else await self._fold_turns(state)
            for section, key, floor in knobs:
                progress |= await self._knob(state, section, key, floor)
                if self._spent(state):
                    break

    async def _fold_turns(self, state: Shrunk) -> bool:
        """One turn whose prompt is as long as the longest request's: a multi-turn failure is often a length
        failure, and one long request is a smaller reproducer than a conversation that grows to that length.
        The prefix is then shrunk by its own pass."""
        workload = state.profile.workload
        if state.cut:
            return False
        longest = max((prompt for _, _, prompt, _ in state.best.lengths), default=0)
        if workload.turns == 1 or longest <= workload.prefix_tokens:
            return False
        folded = with_value(state.profile, "workload", "turns", 1)
        candidate = folded and with_value(folded, "workload", "prefix_tokens", longest)
        return candidate is not None and await self._trial(state, candidate,
                                                           f"turns {workload.turns} -> 1, prefix_tokens "
                                                           f"{workload.prefix_tokens} -> {longest}", "fold turns")

    async def _knob(self, state: Shrunk, section: str, key: str, floor: int) -> bool:
        """Binary search for the knob's smallest failing value; True if it shrank. A knob searched in an earlier
        round is first tried one below its value: if that passes, it is still minimal, for one trial."""
        low, high = floor, getattr(getattr(state.profile, section), key)  # high fails; below low passes
        if key in ("trace_max_requests", "trace_max_sessions") and high == 0:  # all: as many as the run sent
            high = state.best.requests if key == "trace_max_requests" else len({c for c, *_ in state.best.lengths})
        shrank = False
        if state.cut:
            return False
        if (section, key) in state.searched and low < high:
            if not await self._try(state, section, key, high - 1):
                return False
            high, shrank = high - 1, True
        state.searched.add((section, key))
        first = True
        while low < high and not self._spent(state):
            value, first = (low if first else (low + high) // 2), False
            if await self._try(state, section, key, value):
                high, shrank = value, True
            else:
                low = value + 1
        return shrank

    async def _try(self, state: Shrunk, section: str, key: str, value: int) -> bool:
        before = getattr(getattr(state.profile, section), key)
        candidate = with_value(state.profile, section, key, value)
        if candidate is None:
            return False
        return await self._trial(state, candidate, f"{section}.{key} {before} -> {value}", f"{section}.{key}")

    async def _trial(self, state: Shrunk, candidate: Profile, change: str, name: str) -> bool:
        trial = await self._bounded(candidate, state.trials + 1, change)
        if trial.stops:  # cut short, or its engine did not start: it says nothing of its candidate
            state.stopped, state.cut = f"{trial.stops.splitlines()[0]} (trial {state.trials + 1}: {change})", True
        state.trials += 1
        state.failures += int(trial.failed)
        stats = state.passes.setdefault(name, PassStats())
        stats.trials, stats.failures, stats.seconds = stats.trials + 1, stats.failures + trial.failed, \
            stats.seconds + trial.seconds
        state.steps.append(Step(change, trial))
        if trial.failed:
            state.profile, state.best = candidate, trial
        self._said(state.trials, change, trial, state)
        return trial.failed

    async def _bounded(self, candidate: Profile, number: int, change: str) -> Trial:
        """The trial, cut at the budget's end wherever it is (its engine starting, its load): the run stops the
        engines it started as it unwinds."""
        loop = asyncio.get_running_loop()
        began = loop.time()
        self._say(f"trial {number}: {change} ({self._elapsed()} s of {self._budget_s:g} s spent)")
        budget = asyncio.timeout_at(self.deadline)
        try:
            async with budget:
                return await self._run(candidate)
        except TimeoutError:
            if not budget.expired():
                raise
        return Trial(False, 0, 0, loop.time() - began, "cut short by the time budget",
                     stops=f"the time budget ({self._budget_s:g} s) ran out during a trial")

    def _said(self, number: int, change: str, trial: Trial, state: Shrunk) -> None:
        self._say(f"trial {number}: {change}: {trial.result} ({trial.requests} requests, "
                  f"{trial.prompt_tokens:,} prompt tokens, {trial.seconds:.1f} s); best so far "
                  f"{state.best.requests} requests, {state.best.prompt_tokens:,} prompt tokens "
                  f"({self._elapsed()} s of {self._budget_s:g} s spent)")

    def _elapsed(self) -> str:
        return f"{asyncio.get_running_loop().time() - self._loop_started:,.0f}"

    def _spent(self, state: Shrunk) -> bool:
        if state.cut:
            return True
        if state.trials >= self._max_trials:
            state.stopped = f"the trial budget ({self._max_trials}) was spent"
            return True
        if self._clock() - self._started >= self._budget_s:
            state.stopped = f"the time budget ({self._budget_s:g} s) was spent"
            return True
        return False

    def _done(self, state: Shrunk) -> Shrunk:
        state.seconds = self._clock() - self._started
        return state
