"""Structured answers ([workload] structured_share): a seeded share of chat requests ask for JSON; an answer that
ended on its own and does not parse fails structured_output, named; answers cut at max_tokens are not judged."""

from __future__ import annotations

import re

import loadrepro
from loadrepro.config.profile_files import load_profile
from loadrepro.workload.structured_requests import RESPONSE_FORMATS
from tests.helpers import rule
from tests.structured_server import StructuredServer

PROFILE = """
name = "structured"
api = "chat"
[workload]
seed = 8
conversations = 40
turns = 1
prefix_tokens = 300
max_tokens = 32
structured_share = 0.5
structured_format = {format}
[load]
concurrency = 4
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
"""


def run(tmp_path, tokenizer_dir, server: StructuredServer, format_: str = "json_schema", extra: str = ""):
    path = tmp_path / "structured.toml"
    path.write_text(PROFILE.format(format=format_ if format_.startswith("[") else f'"{format_}"') + extra)
    with server.running():
        return loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")


def test_a_seeded_share_of_requests_asks_for_json_and_warm_ups_never_do():
    from loadrepro.workload.generation import generation

    spec = load_profile("quickstart", ["workload.structured_share=0.25"]).workload
    asked = [generation(spec, 256, True, (c, 2)).get("response_format") for c in range(400)]
    share = sum(a is not None for a in asked) / len(asked)
    assert 0.18 < share < 0.32 and all(a in (None, RESPONSE_FORMATS["json_schema"]) for a in asked)
    assert asked == [generation(spec, 256, True, (c, 2)).get("response_format") for c in range(400)]  # seeded
    assert all("response_format" not in generation(spec, 1, True, (c, 1)) for c in range(100))  # a warm-up


def test_answers_that_parse_pass(tmp_path, tokenizer_dir):
    server = StructuredServer()
    report = run(tmp_path, tokenizer_dir, server)
    assert report.passed, report.reasons
    s = report.structured_outputs
    assert s is not None and (s.answers, s.unparsed, s.cut) == (server.structured, 0, 0) and server.plain > 0
    assert server.formats == {"json_schema"}
    assert rule(report, "structured_output").severity == "info"


def test_answers_broken_under_load_fail_naming_the_first(tmp_path, tokenizer_dir):
    server = StructuredServer("breaks_under_load")
    report = run(tmp_path, tokenizer_dir, server, "json_object")
    assert server.broken > 0 and server.formats == {"json_object"}
    found = rule(report, "structured_output")
    assert not report.passed and found.severity == "fail", report.reasons
    assert found.detail.startswith(f"{server.broken} of {server.structured} structured answers")
    assert "'{\"ok\": tr'" in found.detail
    assert report.structured_outputs is not None and report.structured_outputs.unparsed == server.broken


def test_answers_cut_at_max_tokens_are_not_judged(tmp_path, tokenizer_dir):
    server = StructuredServer("cut")
    report = run(tmp_path, tokenizer_dir, server)
    assert report.passed, report.reasons
    s = report.structured_outputs
    assert s is not None and s.cut == s.answers == server.structured and s.unparsed == 0
    assert rule(report, "structured_output").detail.startswith(f"none of the {server.structured} structured answers "
                                                               "ended on their own")


def test_each_structured_request_asks_for_one_of_the_formats_drawn_from_the_seed():
    from loadrepro.workload.generation import generation
    from loadrepro.workload.structured_requests import asked

    spec = load_profile("quickstart", ["workload.structured_share=1",
                                       'workload.structured_format=["choice", "regex", "grammar", "json_object"]']
                        ).workload
    bodies = [generation(spec, 64, True, (c, 2)) for c in range(200)]
    kinds = [asked(b) for b in bodies]
    assert set(kinds) == {"choice", "regex", "grammar", "json_object"}
    assert kinds == [asked(generation(spec, 64, True, (c, 2))) for c in range(200)]  # seeded
    choice = next(b for b in bodies if asked(b) == "choice")
    assert choice["structured_outputs"] == {"choice": ["yes", "no"]} and choice["ignore_eos"] is False


def test_what_an_answer_is_checked_against():
    from loadrepro.workload.structured_requests import mismatch

    choice = {"structured_outputs": {"choice": ["yes", "no"]}}
    regex = {"structured_outputs": {"regex": "(yes|no), case [0-9]{1,3}"}}
    schema = {"response_format": {"type": "json_schema"}}
    assert mismatch(choice, "no", "stop") is None and mismatch(choice, "maybe", "stop") == "maybe"
    assert mismatch(choice, " no", "stop") == " no"  # a choice is answered exactly
    assert mismatch(regex, "yes, case 7", "stop") is None and mismatch(regex, "yes, case 7!", "stop") == "yes, case 7!"
    assert mismatch(schema, '{"ok": true}', "stop") is None and mismatch(schema, "[1]", "stop") == "[1]"
    assert mismatch(schema, '{"ok": tr', "length") is None  # cut: says nothing of the grammar
    assert mismatch({"structured_outputs": {"grammar": "root ::= \"a\""}}, "b", "stop") is None  # not checkable
    assert mismatch({"response_format": {"type": "text"}}, "free words", "stop") is None  # a free answer
    assert mismatch({"response_format": {"type": "something_new"}}, "x", "stop") is None  # unknown: not judged
    assert mismatch({"structured_outputs": {"json": {"type": "array"}}}, "[1, 2]", "stop") is None
    assert mismatch({}, "anything", "stop") is None
    tools = {"tools": [{"type": "function"}], "tool_choice": {"type": "function", "function": {"name": "f"}}}
    assert mismatch(tools, "", "tool_calls", '{"ok": true}') is None
    assert mismatch(tools, "", "tool_calls", '{"ok": tr') == '(tool call arguments) {"ok": tr'
    assert mismatch(tools, "I will not", "stop", None) == "(no tool call) I will not"
    assert mismatch(tools | {"tool_choice": "auto"}, "free words", "stop", None) is None  # may or may not call


MIXED = '["choice", "regex", "grammar", "json_schema", "tools"]'


def test_choices_regexes_and_grammars_answered_as_asked_pass(tmp_path, tokenizer_dir):
    server = StructuredServer()
    report = run(tmp_path, tokenizer_dir, server, MIXED)
    assert report.passed, report.reasons
    assert server.formats == {"choice", "regex", "grammar", "json_schema", "tools"}
    s = report.structured_outputs
    assert s is not None and s.answers == server.structured and s.unparsed == 0 and 0 < s.unchecked < s.answers
    assert s.format == "choice, regex, grammar, json_schema, tools"
    assert "(" + f"{s.unchecked} to a grammar: not judged)" in rule(report, "structured_output").detail


def test_a_choice_or_a_match_broken_under_load_fails(tmp_path, tokenizer_dir):
    server = StructuredServer("breaks_under_load")
    report = run(tmp_path, tokenizer_dir, server, '["choice", "regex", "tools"]')
    found = rule(report, "structured_output")
    assert server.broken > 0 and not report.passed and found.severity == "fail", report.reasons
    assert found.detail.startswith(f"{server.broken} of {server.structured} structured answers that ended on their "
                                   "own were not what they asked for")
    assert re.search(r"""answered ('n'|'no, case'|'\(tool call arguments\) \{"ok": tr')$""", found.detail), found.detail


def test_grammar_answers_are_counted_not_judged(tmp_path, tokenizer_dir):
    """No grammar parser here: a broken answer to a grammar cannot be told from a right one, so none is judged, and
    the rule says so instead of claiming they were right."""
    server = StructuredServer("breaks_under_load")
    report = run(tmp_path, tokenizer_dir, server, "grammar")
    assert server.broken > 0 and report.passed, report.reasons
    s = report.structured_outputs
    assert s is not None and s.unchecked == s.answers == server.structured and s.unparsed == 0
    assert rule(report, "structured_output").detail == (
        f"{s.unchecked} answers to a grammar ended on their own (counted, not checked: that needs the engine's "
        "grammar parser)")


def test_a_regex_python_cannot_compile_or_no_format_is_a_profile_error():
    import pytest

    from loadrepro.errors import ProfileError

    with pytest.raises(ProfileError, match="structured_regex does not compile"):
        load_profile("quickstart", ["workload.structured_regex=(unclosed"])
    with pytest.raises(ProfileError, match="name at least one format"):
        load_profile("quickstart", ["workload.structured_format=[]"])


ENGINE = """
[engine]
bytes_per_token = 1024
pool_bytes = 16777216
tokens_per_block = 16
max_seq_len = 4096
"""


def test_tool_calls_an_engine_was_not_started_to_serve_are_refused_not_a_capacity_failure(tmp_path, tokenizer_dir):
    """vLLM without --tool-call-parser refuses every request with tools (400): the run says they were not judged,
    with the engine's words, and does not read the refusals as admission refusing requests that fit."""
    server = StructuredServer("no_tool_parser")
    report = run(tmp_path, tokenizer_dir, server, '["json_schema", "tools"]', ENGINE)
    assert server.refused > 0 and server.structured > 0
    assert not rule(report, "capacity_mismatch").fired, rule(report, "capacity_mismatch")
    s = report.structured_outputs
    assert s is not None and s.refused == server.refused and s.answers == server.structured
    assert s.first_refusal is not None and "--tool-call-parser" in s.first_refusal
    found = rule(report, "structured_output")
    assert found.severity == "info" and f"; {server.refused} structured requests were refused, so not judged (the " \
        "first, request " in found.detail, found.detail


def test_requests_that_fit_refused_whatever_they_asked_still_fail_capacity(tmp_path, tokenizer_dir):
    """The twin: the same refusal of plain requests that fit is admission disagreeing with the KV arithmetic."""
    server = StructuredServer("refuses_all")
    report = run(tmp_path, tokenizer_dir, server, '["json_schema", "tools"]', ENGINE)
    found = rule(report, "capacity_mismatch")
    assert found.fired and found.severity == "fail", report.rules
    s = report.structured_outputs
    assert s is not None and s.answers == 0 and s.refused > 0
    assert found.detail.startswith(f"{server.refused - s.refused} requests that fit were rejected"), found.detail
