"""Rule prompt_truncated: an engine that cuts a prompt longer than its context and answers it (llama.cpp's slots)
answered another request. Must fire: prompts cut, the others' lengths agreeing with the plan, the context from
/props and the log line said. Must not: the same prompts refused with a 400 (a conversation ends at its first
refusal), or every prompt counted shorter (a calibration error: rule prompt_lengths' warning)."""

from __future__ import annotations

from tests.context_server import ContextServer
from tests.helpers import cli, facts, fired, report, small

# Three conversations of three turns: the first turns (200 tokens) fit a context of 250, the later ones (about 290
# and 375) do not.
N_CTX = 250
TURNS = ("workload.turns=3", "workload.turn_tokens=60", "workload.max_tokens=4")


def run(server: ContextServer, tmp_path, *extra: str) -> tuple[int, dict]:
    with server.running():
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), "--quiet",
                   *small(*TURNS, *extra))
    assert done.returncode in (0, 1), done.stderr[-2000:]
    return done.returncode, report(tmp_path / "run")


def test_prompts_cut_and_answered_fail_the_run_saying_how_many_and_by_how_much(tmp_path):
    log = tmp_path / "engine.log"
    log.touch()
    server = ContextServer(N_CTX, log=log)
    code, found = run(server, tmp_path, f"watch.engine_log={log}")
    rules = fired(found)
    assert code == 1 and found["verdict"] == "fail" and server.cut == 6, (server.cut, rules)
    said = rules["prompt_truncated"]
    assert said.startswith("6/9 prompts") and f"{N_CTX} tokens a request" in said and "/props" in said, said
    cut = facts(found, "prompt_truncated")
    assert (cut["cut"], cut["prompts"], cut["context_tokens"]) == (6, 9, N_CTX), cut
    assert cut["logged"] == 1 and cut["calibration_ruled_out"] == 1, cut
    assert "prompt_lengths" not in rules  # the cut prompts are this rule's, not a calibration warning


def test_a_cut_prompt_is_information_when_allowed(tmp_path):
    code, found = run(ContextServer(N_CTX), tmp_path, "verdict.allow_truncated_prompts=true")
    assert code == 0 and "prompt_truncated" in fired(found), fired(found)


def test_refused_prompts_and_a_calibration_error_are_not_truncation(tmp_path):
    code, found = run(ContextServer(N_CTX, refuses=True), tmp_path / "refused")
    assert "prompt_truncated" not in fired(found) and found["requests"]["by_outcome"]["rejected"] == 3, fired(found)
    code, found = run(ContextServer(N_CTX, shrinks=0.3), tmp_path / "shrunk")
    rules = fired(found)
    assert code == 0 and "prompt_truncated" not in rules and rules["prompt_lengths"].startswith("warning: 9/9"), rules
