import asyncio
import hashlib
import json
import os

import numpy as np

from loadrepro.sim.tokenizer import render_chat, tokenize
from loadrepro.workload.conversations import SYSTEM_PROMPT


def digest(workload) -> str:
    h = hashlib.sha256()
    for r in workload.requests:
        h.update(json.dumps(r.payload(), sort_keys=True).encode())
    return h.hexdigest()


def rendered(request) -> str:
    body = request.payload()
    return render_chat(body["messages"]) if "messages" in body else body["prompt"]


def common_prefix(a: str, b: str) -> str:
    return a[:len(os.path.commonprefix([a, b]))]


# quickstart's payloads, pinned: a change of faker, numpy or the assembly that alters them fails here, not only a
# comparison of two builds made by the same versions in one process.
QUICKSTART_SHA256 = "746b1eaef4edb43900502141925d420abff03e9ab35adbbb37a3b270e53cd888"


def test_quickstarts_payloads_match_their_golden_hash(plan_local):
    assert digest(plan_local("quickstart").workload) == QUICKSTART_SHA256


def test_one_seed_gives_byte_identical_payloads_and_another_seed_does_not(plan_local):
    first = plan_local("quickstart").workload
    again = plan_local("quickstart").workload
    other = plan_local("quickstart", "workload.seed=8").workload
    assert digest(first) == digest(again)
    assert digest(first) != digest(other)


def test_later_turns_start_with_the_earlier_prompts_byte_for_byte(plan_local):
    for api in ("chat", "completions"):
        workload = plan_local("healthy", f"api={api}").workload
        for conversation in workload.conversations:
            texts = [rendered(t) for t in conversation.turns]
            assert len(texts) == 3
            for earlier, later in zip(texts, texts[1:]):
                # The chat template's generation prompt opens the assistant message that the next turn holds.
                assert later.startswith(earlier if api == "completions" else earlier.removesuffix("<|assistant|>\n"))
            if api == "chat":
                first = conversation.turns[0].payload()["messages"]
                assert conversation.turns[-1].payload()["messages"][:len(first)] == first


def test_distinct_conversations_share_only_the_short_system_prompt(plan_local):
    workload = plan_local("quickstart").workload
    prompts = [rendered(c.turns[0]) for c in workload.conversations]
    for a, b in zip(prompts, prompts[1:]):
        shared = len(tokenize(common_prefix(a, b)))
        assert SYSTEM_PROMPT in common_prefix(a, b)
        assert shared <= 0.05 * 4000


def test_group_members_share_exactly_the_group_prefix(plan_local):
    workload = plan_local("quickstart", "workload.groups=3", "workload.group_prefix_tokens=1500").workload
    members = {}
    for conversation in workload.conversations:
        members.setdefault(conversation.group, []).append(conversation)
    assert sorted(members) == [0, 1, 2] and all(len(m) == 4 for m in members.values())
    group_docs = {}
    for group, convs in members.items():
        contents = [c.turns[0].payload()["messages"][1]["content"] for c in convs]
        group_part = contents[0][:contents[0].index("\nCase file ") + 1]
        assert group_part.startswith(f"Shared reference {group} ")
        assert abs(len(tokenize(group_part)) - 1500) <= 1
        for a, b in zip(contents, contents[1:]):
            shared = common_prefix(a, b)
            assert shared.startswith(group_part)
            assert len(tokenize(shared[len(group_part):])) <= 4  # then only "Case file <seed>-" is alike
        group_docs[group] = group_part
    assert len(tokenize(common_prefix(group_docs[0], group_docs[1]))) <= 3  # "Shared reference"


def test_prefix_lengths_follow_the_requested_p50_and_p95(plan_local):
    workload = plan_local("quickstart", "workload.conversations=400", "workload.turns=1",
                          "workload.prefix_tokens=2000", "workload.prefix_tokens_p95=5000").workload
    lengths = np.array([c.turns[0].expected_prompt_tokens for c in workload.conversations])
    assert abs(np.percentile(lengths, 50) - 2000) / 2000 < 0.1
    assert abs(np.percentile(lengths, 95) - 5000) / 5000 < 0.15
    actual = [len(tokenize(rendered(c.turns[0]))) for c in workload.conversations[:20]]
    assert actual == [c.turns[0].expected_prompt_tokens for c in workload.conversations[:20]]


def test_turn_structure_and_output_caps(plan_local):
    workload = plan_local("dsa-prefix-shared").workload
    assert len(workload.conversations) == 12 and len(workload.requests) == 24
    for conversation in workload.conversations:
        warm, follow = conversation.turns
        assert warm.max_tokens == 1 and warm.payload()["max_tokens"] == 1 and warm.payload()["ignore_eos"] is True
        assert follow.max_tokens == 32768 and follow.payload()["max_completion_tokens"] == 32768
        assert follow.shared_prefix_tokens == warm.expected_prompt_tokens == 81000
        assert len(tokenize(rendered(follow))) == follow.expected_prompt_tokens
    text = workload.requests[0].payload()["messages"][1]["content"]
    for marker in ("CUSTOMER", "ORDER", "TICKET", "TOOL RESULT", " INFO "):
        assert marker in text  # varied records, not one repeated word


def test_a_share_of_requests_asks_for_whole_answers_the_same_ones_every_time(plan_local):
    """[workload] stream = 0.25: about a quarter of the requests stream, the rest ask for the whole answer at once
    (no stream_options), the same ones in every plan of the seed, their PlannedRequest saying so; true and false:
    all and none."""
    def streamed(*overrides: str) -> list[bool]:
        requests = plan_local("quickstart", "workload.conversations=200", *overrides).workload.requests
        for r in requests:
            body = r.payload()
            assert body["stream"] is r.stream and ("stream_options" in body) is r.stream
        return [r.stream for r in requests]

    share = streamed("workload.stream=0.25")
    assert 0.15 < share.count(True) / len(share) < 0.35
    assert streamed("workload.stream=0.25") == share
    assert all(streamed()) and not any(streamed("workload.stream=false"))


def test_conversations_built_alone_come_out_as_in_the_whole_workload():
    """The per-conversation correction rebuilds only the conversations that were off: each must be what a whole
    rebuild with the same corrections gives, byte for byte, and the rest untouched."""
    from loadrepro.config.profile_files import load_profile
    from loadrepro.workload.corpus import record_pool
    from loadrepro.workload.plan import build_workload
    from loadrepro.workload.tokens import SimTokenCounter, calibrate

    profile = load_profile("quickstart", ["workload.conversations=12", "workload.turns=2", "workload.groups=3"])
    pool = record_pool(profile.workload.seed)
    calibration = asyncio.run(calibrate(SimTokenCounter(), pool))
    corrections = {2: 40.0, 7: -25.0}
    whole = build_workload(profile, pool, calibration, None, corrections)
    alone = build_workload(profile, pool, calibration, None, corrections, set(corrections))
    plain = build_workload(profile, pool, calibration)
    assert [c.index for c in alone.conversations] == [2, 7]
    for c in alone.conversations:
        assert c == whole.conversations[c.index] != plain.conversations[c.index]
    assert all(whole.conversations[i] == plain.conversations[i] for i in range(12) if i not in corrections)


def test_planned_prompt_tokens_are_the_built_workloads_without_building_it():
    """The probe budget is drawn from the planned prompt tokens: counted without assembling a text, they must be
    what the built workload plans, turn by turn summed, for every shape of conversation."""
    from loadrepro.config.profile_files import load_profile
    from loadrepro.workload.conversations import planned_prompt_tokens
    from loadrepro.workload.corpus import record_pool
    from loadrepro.workload.plan import build_workload
    from loadrepro.workload.tokens import SimTokenCounter, calibrate

    shapes = ([], ["workload.groups=3", "workload.turns=4", "workload.prefix_tokens_p95=20000"],
              ["api='completions'", "workload.turns=3"])
    for overrides in shapes:
        profile = load_profile("quickstart", ["workload.conversations=30", *overrides])
        pool = record_pool(profile.workload.seed)
        calibration = asyncio.run(calibrate(SimTokenCounter(), pool)).scaled(1.07)  # not the exact counter's
        built = build_workload(profile, pool, calibration).requests
        assert planned_prompt_tokens(profile.workload, profile.api, calibration) == \
            sum(r.expected_prompt_tokens for r in built), overrides


def test_the_checked_part_holds_the_requests_a_check_of_the_whole_would_count():
    """The plan's check counts the first request, the last and the (first) longest: built alone, the conversations
    holding them must give those very requests, byte for byte."""
    from loadrepro.config.profile_files import load_profile
    from loadrepro.workload.corpus import record_pool
    from loadrepro.workload.plan import _checked_part, _sample, build_workload
    from loadrepro.workload.tokens import SimTokenCounter, calibrate

    shapes = ([], ["workload.groups=3", "workload.turns=3", "workload.prefix_tokens_p95=20000"],
              ["api='completions'", "workload.turns=2"], ["workload.turns=1"])
    for overrides in shapes:
        profile = load_profile("quickstart", ["workload.conversations=25", *overrides])
        pool = record_pool(profile.workload.seed)
        calibration = asyncio.run(calibrate(SimTokenCounter(), pool)).scaled(0.93)
        part = _checked_part(profile, pool, calibration, None)
        assert len(part.conversations) <= 3
        assert _sample(part) == _sample(build_workload(profile, pool, calibration)), overrides


def test_a_correction_below_the_least_a_prompt_holds_shortens_it_to_that_least_and_a_profile_below_it_is_refused():
    """A target that counts a conversation much longer than planned shortens its records to the least a prompt
    holds, not refuses a profile that asked for nothing wrong; a profile whose prompts cannot hold it is refused."""
    import pytest

    from loadrepro.config.profile_files import load_profile
    from loadrepro.errors import ProfileError
    from loadrepro.workload import conversations
    from loadrepro.workload.corpus import record_pool
    from loadrepro.workload.plan import build_workload
    from loadrepro.workload.tokens import SimTokenCounter, calibrate

    profile = load_profile("quickstart", ["workload.conversations=3"])
    pool = record_pool(profile.workload.seed)
    calibration = asyncio.run(calibrate(SimTokenCounter(), pool))
    own = conversations._sizes(profile.workload, profile.api, calibration)[1].own
    far = build_workload(profile, pool, calibration, None, {1: -100_000.0})
    least = build_workload(profile, pool, calibration, None, {1: conversations._MIN_OWN_TOKENS - own})
    assert far.conversations[1] == least.conversations[1]
    assert far.conversations[1].turns[0].expected_prompt_tokens == profile.workload.prefix_tokens
    with pytest.raises(ProfileError, match="at least 32 needed"):
        build_workload(load_profile("quickstart", ["workload.prefix_tokens=100", "workload.groups=2"]), pool,
                       calibration)


def test_turn_one_counts_as_shared_what_an_earlier_conversation_holds(plan_local):
    """Turn 1's shared prefix (workload.prefix_reuse's possible tokens) is what an earlier request holds of it: none
    for the first conversation, the system prompt for the others, and the group's document too from each group's
    second conversation on (counting none, an engine caching the system prompt read above 100%)."""
    for groups in (0, 3):
        workload = plan_local("quickstart", f"workload.groups={groups}", "workload.group_prefix_tokens=1500").workload
        prompts = [rendered(c.turns[0]) for c in workload.conversations]
        for i, conversation in enumerate(workload.conversations):
            held = max((len(tokenize(common_prefix(prompts[i], p))) for p in prompts[:i]), default=0)
            first = conversation.turns[0]
            assert abs(first.shared_prefix_tokens - held) <= 8, (groups, i, first.shared_prefix_tokens, held)
