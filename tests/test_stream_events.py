"""What one streamed event of a chat or completions stream says (load/streams.py): the kind of token it carried,
its finish reason and usage, and ProtocolViolation for a shape no OpenAI-compatible engine sends."""

from __future__ import annotations

import pytest

from loadrepro.load.streams import CONTENT, NONE, TOKEN, Attempt, ProtocolViolation, chat_event, completions_event


def _chat(delta: object, **more: object) -> dict[str, object]:
    return {"object": "chat.completion.chunk", "choices": [{"index": 0, "delta": delta, "finish_reason": None}],
            **more}


@pytest.mark.parametrize(("delta", "kind"), [
    ({"content": "hi"}, CONTENT), ({"reasoning_content": "so"}, TOKEN), ({"reasoning": "so"}, TOKEN),
    ({"tool_calls": [{"index": 0, "function": {"arguments": "{\""}}]}, TOKEN),
    ({"tool_calls": [{"index": 0, "function": {"name": "f"}}]}, TOKEN), ({"tool_calls": [{"index": 0}]}, NONE),
    ({"role": "assistant", "content": ""}, NONE), ({}, NONE), (None, NONE)])
def test_a_chat_delta_says_which_kind_of_token_it_carried(delta, kind):
    assert chat_event(_chat(delta), Attempt()) == kind


def test_the_strongest_kind_among_several_choices_is_the_events():
    payload = {"choices": [{"delta": {"reasoning": "so"}}, {"delta": {"content": "hi"}}, {"delta": {}}]}
    assert chat_event(payload, Attempt()) == CONTENT
    assert completions_event({"choices": [{"text": ""}, {"text": "hi"}]}, Attempt()) == CONTENT


def test_the_finish_reason_usage_and_timings_are_kept():
    a = Attempt()
    payload = {"choices": [{"delta": {}, "finish_reason": "length"}], "usage": {"prompt_tokens": 5},
               "timings": {"draft_n": 3}}
    assert chat_event(payload, a) == NONE
    assert (a.finish_reason, a.usage, a.timings) == ("length", {"prompt_tokens": 5}, {"draft_n": 3})
    chat_event(_chat({"content": "x"}, usage=None), a)  # a null usage leaves the one before
    assert a.usage == {"prompt_tokens": 5} and a.finish_reason == "length"


@pytest.mark.parametrize("payload", [
    {"choices": "hi"}, {"choices": ["hi"]}, {"choices": [{"delta": "hi"}]}, {"choices": [{"delta": ["hi"]}]},
    {"choices": [], "usage": [1]}])
def test_a_shape_no_engine_sends_is_a_protocol_violation(payload):
    with pytest.raises(ProtocolViolation):
        chat_event(payload, Attempt())
