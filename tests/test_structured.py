"""Structured answers ([workload] structured_share): a seeded share of chat requests ask for JSON; an answer that
ended on its own and does not parse fails structured_output, named; answers cut at max_tokens are not judged."""

from __future__ import annotations

import loadrepro
from loadrepro.profile import load_profile
from loadrepro.workload.generation import RESPONSE_FORMATS
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
structured_format = "{format}"
[load]
concurrency = 4
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
"""


def run(tmp_path, tokenizer_dir, server: StructuredServer, format_: str = "json_schema"):
    path = tmp_path / "structured.toml"
    path.write_text(PROFILE.format(format=format_))
    with server.running():
        return loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")


def rule(report, name: str):
    return next(r for r in report.rules if r.name == name)


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
