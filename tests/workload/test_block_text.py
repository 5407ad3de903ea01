"""The text of a trace's hash-id blocks: every tree of a multi-trace file as long as planned in a tokenizer that
splits numbers into digits (as Llama 3 and Qwen do: the large hash ids of later trees cost more tokens), and seeded
corpus text in every block, the same bytes for the same hash id."""

import asyncio
import json
import re
from collections import defaultdict
from pathlib import Path

from loadrepro.config.profile_files import load_profile
from loadrepro.sim.tokenizer import render_chat
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import FILLER_WORD

EXAMPLE = Path(__file__).parents[2] / "loadrepro/profiles/traces/example-weka.jsonl"
_DIGITS = re.compile(r"<\|[a-z_]+\|>|\d|[^\W\d]+|[^\w\s]")


class DigitCounter:
    """A target's /tokenize whose tokenizer splits numbers into digits, counted over the wire (not local): lengths
    are planned from calibrated costs, not counted text."""

    source = "digit-splitting test tokenizer"
    local, probing, additive = False, False, False

    def count_now(self, text: str) -> int:
        raise TypeError("not local")

    async def count_text(self, text: str) -> int:
        return len(_DIGITS.findall(text)) + 1  # and a BOS

    async def count_chat(self, messages: list) -> int:
        return await self.count_text(render_chat(messages))


def weka_profile(*overrides: str):
    return load_profile("trace-example", [f"workload.trace='{EXAMPLE}'", "workload.trace_format='weka'",
                                          "workload.trace_block_tokens=0", *overrides])


def per_tree_errors(plan) -> dict[int, float]:
    """Each tree's prompt tokens as the tokenizer counts them against the plan's, as a signed share."""
    counter = DigitCounter()
    counted, planned = defaultdict(int), defaultdict(int)
    for conversation in plan.workload.conversations:
        for request in conversation.turns:
            actual = asyncio.run(counter.count_chat(request.payload()["messages"]))
            counted[conversation.root] += actual
            planned[conversation.root] += request.expected_prompt_tokens
    return {tree: counted[tree] / planned[tree] - 1 for tree in counted}


def test_every_tree_of_a_multi_trace_file_is_as_long_as_planned():
    plan = asyncio.run(plan_workload(weka_profile(), DigitCounter()))
    errors = per_tree_errors(plan)
    assert len(errors) == 3
    first = errors[min(errors)]
    for error in errors.values():
        assert abs(error) <= 0.02, errors
        assert abs(error - first) <= 0.01, errors


def test_blocks_are_corpus_text_the_same_bytes_for_the_same_hash_id(plan_local):
    weka = ("trace-example", f"workload.trace='{EXAMPLE}'", "workload.trace_format='weka'",
            "workload.trace_block_tokens=0")
    one, again = plan_local(*weka), plan_local(*weka)
    texts = ["\n".join(m["content"] for m in r.payload()["messages"]) for r in one.workload.requests]
    assert texts == ["\n".join(m["content"] for m in r.payload()["messages"]) for r in again.workload.requests]
    words = " ".join(texts).split()
    assert words.count(FILLER_WORD) < 0.02 * len(words)


def test_blocks_too_small_for_their_lead_are_still_each_their_own(tmp_path):
    """Blocks of 12 tokens leave no room for a lead in a tokenizer that splits digits: each is words drawn for its
    id alone, the same for the same id and another for another."""
    rows = [{"timestamp": 10 * i, "input_length": 12 * len(ids), "output_length": 2, "hash_ids": ids}
            for i, ids in enumerate([[0, 1, 2, 3], [0, 1, 4], [0, 5, 6, 7, 8], [9, 1, 2], [0, 1, 2, 3, 10]])]
    trace = tmp_path / "small.jsonl"
    trace.write_text("".join(json.dumps(r) + "\n" for r in rows))
    profile = load_profile("trace-example", [f"workload.trace='{trace}'", "workload.trace_format='mooncake'",
                                             "workload.trace_block_tokens=12"])
    plan = asyncio.run(plan_workload(profile, DigitCounter()))
    texts: dict[int, set[str]] = defaultdict(set)
    for row, request in zip(rows, plan.workload.requests, strict=True):
        lines = request.payload()["messages"][0]["content"].split("\n")
        assert len(lines) == len(row["hash_ids"])
        for hash_id, line in zip(row["hash_ids"], lines):
            assert not line.startswith("[block")
            texts[hash_id].add(line)
    assert len(texts) == 11 and all(len(t) == 1 for t in texts.values())
    assert len({t.pop() for t in texts.values()}) == len(texts)
