"""A scripted burst of prefix-shared streaming conversations that tests the simulated engine on its own.

The engine's tests drive it with plain httpx rather than loadrepro's client, so that a fault in one is not
hidden by the other.

Each scenario has a plan sized against its default pools so that the stock policy breaks and the patched one
copes. Conversations run concurrently; turns within one run in order, each extending the same history.
"""

from __future__ import annotations

import asyncio
import json
from dataclasses import dataclass

import httpx

from loadrepro.sim.config import Scenario


@dataclass(frozen=True, slots=True)
class BurstPlan:
    conversations: int
    prefix_words: int
    turns: int
    turn_words: int
    max_tokens: int


PLANS: dict[Scenario, BurstPlan] = {
    # Turn 1 fits the 512-block mirror; turn 2 reuses the primary prefix but outgrows the mirror while decoding.
    Scenario.DRAFT_POOL: BurstPlan(conversations=5, prefix_words=1500, turns=2, turn_words=100, max_tokens=64),
    # Turn 2 needs 70 page-index entries; the table holds 68.
    Scenario.PAGE_INDEX: BurstPlan(conversations=3, prefix_words=1800, turns=2, turn_words=400, max_tokens=64),
    # Four beams of 19 blocks each per request: four requests want 304 of 256 blocks.
    Scenario.BLOCKS_EXHAUSTED: BurstPlan(conversations=4, prefix_words=600, turns=2, turn_words=100,
                                         max_tokens=64),
    Scenario.HEALTHY: BurstPlan(conversations=4, prefix_words=2000, turns=2, turn_words=100, max_tokens=64),
}


@dataclass(frozen=True, slots=True)
class TurnResult:
    conversation: int
    turn: int
    status: int | None
    finish_reason: str | None
    error: str | None
    prompt_tokens: int | None
    cached_tokens: int | None
    chunks: int

    @property
    def ok(self) -> bool:
        return self.error is None and self.finish_reason is not None


def _words(conversation: int, count: int, salt: str) -> str:
    words = []
    for i in range(count // 4):
        words.append(f"{salt}{conversation} record{i} value {(conversation * 31 + i * 7) % 997}")
    return " ".join(words)


def _reply(conversation: int, turn: int) -> str:
    return f"Noted record set {conversation} turn {turn}, continuing with the analysis as asked."


def _events(lines: list[str]) -> list[str]:
    """The data of each SSE event (the sim sends one `data:` line per event)."""
    return [line[5:].strip() for line in lines if line.startswith("data:")]


async def _send(client: httpx.AsyncClient, body: dict, conversation: int, turn: int) -> TurnResult:
    status = finish = error = None
    usage: dict = {}
    chunks = 0
    try:
        async with client.stream("POST", "/v1/chat/completions", json=body) as response:
            status = response.status_code
            if status != 200:
                await response.aread()
                error = response.text[:500]
            else:
                for data in _events([line async for line in response.aiter_lines()]):
                    if data == "[DONE]":
                        break
                    event = json.loads(data)
                    if "error" in event:
                        error = str(event["error"].get("message"))
                        continue
                    usage = event.get("usage") or usage
                    for choice in event.get("choices", []):
                        chunks += 1
                        finish = choice.get("finish_reason") or finish
    except httpx.HTTPError as exc:
        error = f"{type(exc).__name__}: {exc}"
    details = usage.get("prompt_tokens_details") or {}
    return TurnResult(conversation, turn, status, finish, error, usage.get("prompt_tokens"),
                      details.get("cached_tokens"), chunks)


async def _conversation(client: httpx.AsyncClient, plan: BurstPlan, conversation: int) -> list[TurnResult]:
    messages = [{"role": "system", "content": "You are an analyst. Keep every record in mind."},
                {"role": "user", "content": _words(conversation, plan.prefix_words, "customer")}]
    results = []
    for turn in range(1, plan.turns + 1):
        body = {"messages": list(messages), "stream": True, "stream_options": {"include_usage": True},
                "ignore_eos": True, "max_tokens": 1 if turn == 1 else plan.max_tokens}
        result = await _send(client, body, conversation, turn)
        results.append(result)
        if not result.ok:
            break
        messages += [{"role": "assistant", "content": _reply(conversation, turn)},
                     {"role": "user", "content": _words(conversation, plan.turn_words, f"tool{turn}-")}]
    return results


async def run_burst(base_url: str, plan: BurstPlan, timeout_s: float = 60.0) -> list[TurnResult]:
    """Run every conversation of `plan` at once; each request is bounded by `timeout_s`."""
    limits = httpx.Limits(max_connections=plan.conversations + 2)
    async with httpx.AsyncClient(base_url=base_url, timeout=timeout_s, limits=limits) as client:
        per_conversation = await asyncio.gather(*(_conversation(client, plan, c) for c in range(plan.conversations)))
    return [r for results in per_conversation for r in results]
