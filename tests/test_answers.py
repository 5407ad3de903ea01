"""Answers checked under load ([verify]): each rule fires on a server that answers wrongly only under load, and
not on one whose differences are near-ties, or that gives no logprobs to judge by. The comparison itself, pure."""

import json
import re

import pytest

import loadrepro
from loadrepro.config.profile import VerifySpec
from loadrepro.judge.answers import check, choose, compare, garbled
from loadrepro.records import Answer, Outcome
from tests.answer_server import AnswerServer
from tests.builders import record
from tests.helpers import fired, rebuilt_alike

SPEC = VerifySpec(outputs="all", compare_tokens=8, min_margin=1.0)
TAG = re.compile(r"LR[A-Z2-7]{8}")


def answer(tokens: str, margins: dict[int, float] | None = None, text: str | None = None) -> Answer:
    """Tokens split on spaces, each leading its runner-up by 4 nats unless `margins` says otherwise."""
    words = tuple(" " + w for w in tokens.split())
    margins = margins or {}
    return Answer("".join(words) if text is None else text, len("".join(words)) if text is None else len(text),
                  words, tuple(-0.1 for _ in words), tuple(-0.1 - margins.get(i, 4.0) for i in range(len(words))),
                  tuple(" other" for _ in words))


def loaded(a: Answer, completion_tokens: int | None = None, conversation: int = 0):
    r = record(1, conversation=conversation)
    return r.__class__(**{**{f: getattr(r, f) for f in r.__slots__}, "answer": a,
                          "completion_tokens": completion_tokens if completion_tokens is not None else len(a.tokens)})


@pytest.mark.parametrize(("load", "reference", "kind", "position"), [
    ("a b c d", "a b c d", "identical", None),
    ("a b x d", "a b c d", "diverged", 2),
    ("a b c", "a b c d", "diverged", 3),  # it stopped where alone it goes on
    ("a b c d e f g h i", "a b c d e f g h z", "identical", None),  # beyond compare_tokens
])
def test_the_first_difference_decides_by_the_references_margin(load, reference, kind, position):
    found = compare(answer(load), answer(reference), SPEC)
    assert (found[0], found[1]) == (kind, position)


def test_a_difference_where_the_reference_was_unsure_is_a_near_tie_and_just_sure_enough_is_wrong():
    assert compare(answer("a x"), answer("a b", {1: 0.99}), SPEC)[0] == "near_tie"
    assert compare(answer("a x"), answer("a b", {1: 1.0}), SPEC)[0] == "diverged"


def test_without_logprobs_a_difference_is_unverifiable_and_the_same_text_identical():
    bare = lambda text: Answer(text, len(text))  # noqa: E731
    assert compare(bare(" a b"), bare(" a b"), SPEC)[0] == "identical"
    assert compare(bare(" a x"), bare(" a b"), SPEC)[0] == "unverifiable"


def test_garbled_is_what_the_reference_does_not_share():
    clean = answer("a b c")
    assert garbled(loaded(answer("a \ufffd c")), clean).startswith("U+FFFD")
    assert garbled(loaded(answer("a \ufffd c")), answer("a \ufffd c")) is None
    assert garbled(loaded(answer("a " + "! " * 16)), clean) == "one token repeated 16 times in a row"
    assert garbled(loaded(answer("a " + "! " * 15)), clean) is None
    assert garbled(loaded(answer("", text=""), completion_tokens=9), clean) == \
        "no text, with 9 completion tokens counted"
    assert garbled(loaded(answer("", text=""), completion_tokens=9), answer("", text="")) is None


def test_another_conversations_tag_is_cross_talk_and_still_counted_where_it_differs():
    markers = {"LRAAAAAAAA": 0, "LRBBBBBBBB": 1}
    mixed = check(loaded(answer("LRBBBBBBBB b")), loaded(answer("LRAAAAAAAA b")), SPEC, markers, TAG)
    assert (mixed.kind, mixed.position, mixed.margin) == ("cross_talk", 0, 4.0)
    own = check(loaded(answer("LRAAAAAAAA b")), loaded(answer("LRAAAAAAAA b")), SPEC, markers, TAG)
    assert own.kind == "identical"
    failed = loaded(answer("a"))
    failed = failed.__class__(**{**{f: getattr(failed, f) for f in failed.__slots__}, "answer": None,
                                 "outcome": Outcome.SERVER_ERROR, "detail": "boom"})
    assert check(loaded(answer("a")), failed, SPEC, markers, TAG).detail == "its reference ended server_error: boom"


def test_a_sample_prefers_cache_hits_and_is_the_same_for_the_same_seed():
    records = [loaded(answer("a")) for _ in range(10)]
    records = [r.__class__(**{**{f: getattr(r, f) for f in r.__slots__}, "id": i, "cached_tokens": 100 * (i % 2)})
               for i, r in enumerate(records)]
    spec = VerifySpec(outputs="sample", sample=4)
    picked = choose(records, spec, seed=7)
    assert len(picked) == 4 and all(r.cached_tokens for r in picked)
    assert [r.id for r in picked] == [r.id for r in choose(records, spec, seed=7)]
    assert len(choose(records, VerifySpec(outputs="all"), seed=7)) == 10


# -- against servers that answer wrongly only under load ------------------------------------------------------

PROFILE = """
name = "answers"
api = "chat"
[workload]
seed = 5
conversations = 8
turns = 1
prefix_tokens = 300
max_tokens = 24
[load]
concurrency = 4
[watch]
metrics_path = ""
[verify]
outputs = "all"
compare_tokens = 24
"""


def run_against(mode: str, tmp_path, tokenizer_dir):
    path = tmp_path / "answers.toml"
    path.write_text(PROFILE)
    with AnswerServer(mode).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert server.under_load >= 4  # the load overlapped, so the server's under-load answers were given
    assert server.resets == 8  # a cold reference each, through SGLang's /flush_cache
    return report


def test_answers_swapped_between_requests_in_flight_are_wrong_and_cross_talk(tmp_path, tokenizer_dir):
    report = run_against("swap", tmp_path, tokenizer_dir)
    assert not report.passed
    assert re.search(r"checked answers were wrong under load \(first: request \d+, conversation \d+ turn 1: at "
                     r"output position 0 it answered ' LR\w{8}' where alone it answers ' LR\w{8}', which led its "
                     r"runner-up by 5.00 nats", fired(report).get("wrong_output"))
    assert "carried another conversation's tag" in fired(report).get("cross_talk")
    assert report.outputs.cross_talk >= 4 and report.outputs.checked == 8
    assert rebuilt_alike(tmp_path / "run")["outputs"] == report.outputs.model_dump(mode="json")


def test_near_ties_flipped_under_load_pass_and_are_counted(tmp_path, tokenizer_dir):
    report = run_against("flip", tmp_path, tokenizer_dir)
    assert report.passed, report
    o = report.outputs
    assert o.near_tie >= 4 and o.diverged == 0 and o.identical + o.near_tie == 8
    assert o.near_tie_margin_max == pytest.approx(0.2)
    assert not fired(report).get("wrong_output")


def test_a_healthy_server_answers_the_same_under_load(tmp_path, tokenizer_dir):
    report = run_against("healthy", tmp_path, tokenizer_dir)
    assert report.passed and report.outputs.identical == 8


@pytest.mark.parametrize(("mode", "words"), [("garbled", "one token repeated 23 times in a row"),
                                             ("fffd", "U+FFFD (an undecodable byte)"),
                                             ("empty", "no text, with 24 completion tokens counted")])
def test_garbled_answers_under_load_fail(mode, words, tmp_path, tokenizer_dir):
    report = run_against(mode, tmp_path, tokenizer_dir)
    assert not report.passed and words in fired(report).get("garbled_output")
    assert report.outputs.garbled >= 4
    rebuilt_alike(tmp_path / "run")


def test_a_server_without_logprobs_passes_with_its_differences_unverifiable(tmp_path, tokenizer_dir):
    report = run_against("no_logprobs", tmp_path, tokenizer_dir)
    assert report.passed, report
    assert report.outputs.unverifiable >= 4 and report.outputs.diverged == 0


# -- each API's evidence, read by the real client from the simulated engine -----------------------------------


def test_each_api_gives_the_same_answer_and_only_the_messages_api_no_logprobs():
    import asyncio
    import time

    from loadrepro.load.client import Client, ClientConfig
    from loadrepro.sim.config import sim_config
    from loadrepro.sim.serve import sim_in_thread
    from loadrepro.workload.apis import deterministic
    from loadrepro.workload.model import PlannedRequest

    body = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "case LRAAAAAAAA"}],
            "max_tokens": 12, "max_completion_tokens": 12, "ignore_eos": True, "stream": True,
            "stream_options": {"include_usage": True}}

    async def ask(url: str, api: str):
        async with Client(ClientConfig(url, api, "loadrepro-sim", 1, 30, 10, compare_tokens=8)) as client:
            planned = PlannedRequest(0, 1, deterministic(api, body, 7, 2), 12, 10, 0)
            return await client.send(1, planned, time.perf_counter_ns(), time.time(), lambda r: None)

    with sim_in_thread(sim_config("healthy")) as sim:
        found = {api: asyncio.run(ask(sim.url, api)).answer for api in ("chat", "responses", "messages")}
    chat = found["chat"]
    assert chat.tokens[0] == " LRAAAAAAAA" and len(chat.tokens) == 8 and chat.chars == len(chat.text) > 0
    assert all(m is not None and m > 0 for m in (chat.margin(i) for i in range(8)))
    assert found["responses"] == chat
    assert found["messages"].tokens == () and found["messages"].text == chat.text


def test_a_run_beyond_keep_records_checks_answers_drawn_from_the_whole_run(tmp_path, tokenizer_dir):
    """Records beyond [load] keep_records are not kept in memory; the answers checked are a uniform sample of the
    whole run's completed requests, not the first ones kept."""
    path = tmp_path / "answers.toml"
    path.write_text(PROFILE.replace("conversations = 8", "conversations = 60").replace(
        'outputs = "all"', 'outputs = "sample"\nsample = 6').replace("[load]\n", "[load]\nkeep_records = 5\n"))
    with AnswerServer("healthy").running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert report.passed and report.outputs.checked == 6, report
    checked = [json.loads(line)["id"] for line in (tmp_path / "run" / "references.jsonl").read_text().splitlines()]
    assert len(checked) == 6 and max(checked) > 20, checked  # the first 5 completed are all memory kept
    assert any("answers: chosen among a uniform sample of" in n for n in report.notes), report.notes
