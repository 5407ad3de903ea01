"""Seeded traces of one shape, written in every format loadrepro reads: sessions of turns whose prompts extend the
turn before, every prompt starting with one system block shared by all, arrivals at recorded times. What each
request should look like on the wire is known, so a replay can be judged from what a test server received."""

from __future__ import annotations

import csv
import json
import random
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path

EPOCH = datetime(2025, 3, 14, 9, 30, tzinfo=UTC)
NAMES = ["Johanna Castellanos", "Pieter Vandersloot", "Amara Okonkwo-Reyes", "Tobiah Lindqvist", "Mireille Daubigny"]
SYSTEM = "You are the support assistant of Quillfeather Logistics. Answer briefly and cite order numbers."


@dataclass(frozen=True)
class Turn:
    session: int
    index: int  # 0-based within its session
    t_s: float  # recorded arrival, seconds from the first
    blocks: tuple[int, ...]  # hash ids: block 0 is the shared system block
    input_tokens: int
    output_tokens: int
    user: str  # the text formats' new user message
    answer: str  # and the recorded answer to it


def make_turns(seed: int = 3, sessions: int = 5, block: int = 16) -> list[Turn]:
    """Sessions of 1 to 3 turns, in arrival order; a later turn's blocks extend its predecessor's."""
    rng = random.Random(seed)
    turns, next_block = [], 1
    for s in range(sessions):
        t = round(rng.uniform(0.0, 1.5), 3)
        blocks = [0]
        for k in range(rng.randint(1, 3)):
            own = rng.randint(2, 4)
            blocks += range(next_block, next_block + own)
            next_block += own
            name = NAMES[(s + k) % len(NAMES)]
            number = 10_000_000 + rng.randrange(89_999_999)
            user = (f"My name is {name} and my account number is {number}. Where did shipment {number % 9973} "
                    f"go after the depot in {rng.choice(['Rotterdam', 'Gdansk', 'Valparaiso'])}?")
            answer = f"Shipment {number % 9973} for {name} left the depot on day {rng.randint(1, 28)}."
            turns.append(Turn(s, k, t, tuple(blocks), len(blocks) * block - rng.randint(0, block - 1),
                              rng.randint(4, 12), user, answer))
            t = round(t + rng.uniform(0.3, 0.6), 3)
    return sorted(turns, key=lambda x: (x.t_s, x.session, x.index))


def _lines(path: Path, rows: list[dict]) -> Path:
    path.write_text("".join(json.dumps(r) + "\n" for r in rows))
    return path


def mooncake(turns: list[Turn], path: Path) -> Path:
    return _lines(path, [{"timestamp": round(t.t_s * 1000), "session_id": t.session, "input_length": t.input_tokens,
                          "output_length": t.output_tokens, "hash_ids": list(t.blocks)} for t in turns])


def bailian(turns: list[Turn], path: Path) -> Path:
    def chat_id(t: Turn) -> int:
        return 1000 + 10 * t.session + t.index
    return _lines(path, [{"chat_id": chat_id(t), "parent_chat_id": chat_id(t) - 1 if t.index else -1,
                          "timestamp": t.t_s, "input_length": t.input_tokens, "output_length": t.output_tokens,
                          "type": "text", "turn": t.index + 1, "hash_ids": list(t.blocks)} for t in turns])


def azure(turns: list[Turn], path: Path) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["TIMESTAMP", "ContextTokens", "GeneratedTokens"])
        for t in turns:
            stamp = (EPOCH + timedelta(seconds=t.t_s)).strftime("%Y-%m-%d %H:%M:%S.%f") + "0"  # 7 digits, as Azure
            writer.writerow([stamp, t.input_tokens, t.output_tokens])
    return path


def burstgpt(turns: list[Turn], path: Path, failed: bool = True) -> Path:
    with path.open("w", newline="") as out:
        writer = csv.writer(out)
        writer.writerow(["Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"])
        for i, t in enumerate(turns):
            writer.writerow([5 + t.t_s, "ChatGPT", t.input_tokens, t.output_tokens, t.input_tokens + t.output_tokens,
                             "Conversation log"])
            if failed and i == 1:  # a request that failed in the log: no response tokens
                writer.writerow([5 + t.t_s, "ChatGPT", 300, 0, 300, "Conversation log"])
    return path


def _history(turns: list[Turn], upto: Turn) -> list[dict]:
    messages = [{"role": "system", "content": SYSTEM}]
    for t in turns:
        if t.session == upto.session and t.index < upto.index:
            messages += [{"role": "user", "content": t.user}, {"role": "assistant", "content": t.answer}]
    return messages + [{"role": "user", "content": upto.user}]


def sharegpt(turns: list[Turn], path: Path) -> Path:
    items = []
    for s in sorted({t.session for t in turns}):
        mine = [t for t in turns if t.session == s]
        conversation = [{"from": "system", "value": SYSTEM}]
        for t in sorted(mine, key=lambda x: x.index):
            conversation += [{"from": "human", "value": t.user}, {"from": "gpt", "value": t.answer}]
        items.append({"id": f"conv-{s}", "conversations": conversation})
    path.write_text(json.dumps(items))
    return path


def openai_log(turns: list[Turn], path: Path) -> Path:
    return _lines(path, [{"timestamp": (EPOCH + timedelta(seconds=t.t_s)).isoformat(),
                          "body": {"model": "prod-model", "messages": _history(turns, t), "max_tokens": 512},
                          "response": {"usage": {"prompt_tokens": 999, "completion_tokens": t.output_tokens}}}
                         for t in turns])


WRITERS = {"mooncake": mooncake, "bailian": bailian, "azure": azure, "burstgpt": burstgpt, "sharegpt": sharegpt,
           "openai-log": openai_log}
SUFFIX = {"azure": ".csv", "burstgpt": ".csv", "sharegpt": ".json"}
