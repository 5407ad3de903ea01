"""scrub skips the shapes a text cannot hold: what it gives must be what scanning for every shape gives."""

from __future__ import annotations

import pytest

from loadrepro.records.redact import _SHAPES, REDACTED, scrub

SECRETS = {
    "HF_TOKEN=hf_abcdefghijklmnop1234 vllm serve m": "hf_abcdefghijklmnop1234",
    "FOO=bar my_Api_Key='quoted value' x": "quoted value",
    "FOO=HF_TOKEN=plainvalue99": "plainvalue99",
    "see https://someone:Pa55word@example.com/v1": "Pa55word",
    "GET /v1/models?api_key=QueryKey123&x=1": "QueryKey123",
    '{"api_key": "JsonKey12345", "n": 1}': "JsonKey12345",
    "token: YamlToken987": "YamlToken987",
    "Authorization: Bearer BearerValue42": "BearerValue42",
    "loadrepro run --api-key CliKey0042 --quiet": "CliKey0042",
    "key sk-abcdefgh12345678 here": "sk-abcdefgh12345678",
    "ghp_abcdefghijklmnopqrstuvwxyz": "ghp_abcdefghijklmnopqrstuvwxyz",
    "xoxb-1234567890-abc": "xoxb-1234567890-abc",
    # after thousands of names that are not secrets' (a page's scripts, a report's token counts)
    "\n".join([f"var a{i}={i};" for i in range(3000)] + ['"max_tokens": 5,'] * 3000 + ["PASSWORD=hunter22222"]):
        "hunter22222",
    "\n".join(['"kv_bytes_per_token": null,'] * 3000 + ['"Token": "LateToken777"']): "LateToken777",
    "X" * 2000 + "_TOKEN=LongNameValue1": "LongNameValue1",
    "API-KEY = UpperKey1234": "UpperKey1234",
    "secret\t:TabValue999": "TabValue999",
}
PLAIN = ['{"prompt_tokens": 120, "max_tokens": 64, "first_token_ms": 12.5, "detail": "x=1 y=2"}',
         '"kv_bytes_per_token": null, a_password: x, tokens: 3, Ätoken: y',
         "no secret here: a = b, c@d, -- e, Bearerless", ""]


def every_shape(text: str) -> str:
    for shape in _SHAPES:
        text = shape.pattern.sub(shape.replacement, text)
    return text


@pytest.mark.parametrize("text", [*SECRETS, *PLAIN, "\n".join([*SECRETS, *PLAIN])])
def test_scrub_gives_what_scanning_for_every_shape_gives(text):
    assert scrub(text) == every_shape(text)


@pytest.mark.parametrize(("text", "secret"), SECRETS.items())
def test_each_shape_is_redacted(text, secret):
    scrubbed = scrub(text)
    assert secret not in scrubbed and REDACTED in scrubbed


@pytest.mark.parametrize("text", PLAIN)
def test_text_without_a_secret_is_left_as_it_is(text):
    assert scrub(text) == text
