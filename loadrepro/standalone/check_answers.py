#!/usr/bin/env python3
"""replay.py --check-answers: re-check the wrong answers in answers.json. Standard library only; replay.py, beside
this file, loads it and passes itself (its client and the workload it reads).

Each request is sent alone (its answer the reference), the prefix cache is reset where the engine offers it, then the
run's traffic is replayed (--copies N copies at once) and each request's answer under it is compared with its
reference: where they first differ, a reference token that led its runner-up by at least min_margin nats makes a
wrong answer (exit 1), less a near-tie.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import re
from typing import Any


def judge(load: dict[str, Any], alone: dict[str, Any], compare_tokens: int, min_margin: float) -> tuple[str, str]:
    """(identical | near_tie | wrong | differs, words) for an answer against its reference."""
    if not load["tokens"] or not alone["tokens"]:
        same = load["text"] == alone["text"]
        return ("identical", "the same text") if same else ("differs", "different text, no logprobs to judge by")
    ours, theirs = load["tokens"][:compare_tokens], alone["tokens"][:compare_tokens]
    position = next((i for i, (a, b) in enumerate(zip(ours, theirs)) if a != b), None)
    if position is None:
        if len(ours) == len(theirs):
            return "identical", f"the same {len(ours)} tokens"
        position = min(len(ours), len(theirs))
    if position >= len(theirs) or alone["runner_up"][position] is None:
        return "differs", f"different from position {position}, no margin to judge by"
    margin = alone["logprobs"][position] - alone["runner_up"][position]
    mine = ours[position] if position < len(ours) else "(end)"
    words = f"at position {position} {mine!r} where alone {theirs[position]!r}, which led by {margin:.2f} nats"
    return ("wrong" if margin >= min_margin else "near_tie"), words


async def check_answers(args: argparse.Namespace, replay: Any) -> int:
    """`replay`: the replay module beside this one (its Target, send and the workload's requests)."""
    HERE, PATHS, Target, send, new_answer = replay.HERE, replay.PATHS, replay.Target, replay.send, replay.new_answer
    config = json.loads((HERE / "replay.json").read_text())
    fatal = [re.compile(p) for p in config["fatal_patterns"]]
    target = Target(args.base_url, config["stall_timeout_s"], config["request_timeout_s"],
                    os.environ.get(args.api_key_env) or None)
    entries = json.loads((HERE / "answers.json").read_text())
    path = PATHS[config["api"]]
    model = args.model or config.get("model")
    status, data = await target.get("/v1/models")
    if not args.model and status == 200:
        model = json.loads(data)["data"][0]["id"]
    references = {}
    for e in entries:
        alone = new_answer()
        outcome, _ = await send(target, path, {**e["body"], "model": model}, fatal, alone)
        references[(e["conversation"], e["turn"])] = alone
        print(f"request {e['request']} (conversation {e['conversation']} turn {e['turn']}) alone: {outcome}: "
              f"{' '.join(alone['text'].split())[:80]!r}")
    for reset in ("/reset_prefix_cache", "/flush_cache"):
        if (await target.request("POST", reset))[0] == 200:
            print(f"prefix cache reset with POST {reset}")
            break
    requests = replay.read_requests()
    conversations: dict[tuple[int, int], list[dict[str, Any]]] = {}
    for copy in range(args.copies):
        for r in requests:
            conversations.setdefault((copy, r["conversation"]), []).append(r)
    gate = asyncio.Semaphore(args.concurrency * args.copies)
    verdicts: list[tuple[str, str]] = []

    async def conversation(turns: list[dict[str, Any]]) -> None:
        for turn in sorted(turns, key=lambda t: t["turn"]):
            key = (turn["conversation"], turn["turn"])
            answer = new_answer() if key in references else None
            async with gate:
                outcome, _ = await send(target, path, {**turn["body"], "model": model}, fatal, answer,
                                        turn.get("headers"))
            if answer is not None and outcome == "ok":
                kind, words = judge(answer, references[key], config["compare_tokens"], config["min_margin"])
                verdicts.append((kind, f"conversation {key[0]} turn {key[1]} under load: {kind}: {words}"))
                print(verdicts[-1][1], flush=True)
            if outcome != "ok":
                return

    print(f"replaying {len(requests)} requests x {args.copies} at concurrency {args.concurrency * args.copies}")
    await asyncio.gather(*(conversation(t) for t in conversations.values()))
    wrong = [words for kind, words in verdicts if kind == "wrong"]
    print(f"{len(wrong)} of {len(verdicts)} re-checked answers wrong under load")
    print("WRONG ANSWER REPRODUCED" if wrong else "no wrong answer this time")
    return 1 if wrong else 0
