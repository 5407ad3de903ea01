"""Warm-ups before the load ([load] warmup_requests) and a fresh engine's cold start.

Warm-ups are sent first, kept out of the judged requests (engine-warmup.jsonl), and share no prefix with the run: a
warm-up that primed the run's own prefixes would hide a prefix-cache bug. An engine loadrepro started that stalls
its first requests only (tests/cold_server.py --stall-first) fails with the words that a cold start may be the cause;
one that stalls once warm (--stall-after) fails without them; and warm-ups sent first let the same cold engine pass.
"""

from __future__ import annotations

import json
import sys

from tests.helpers import cli, facts, rule
from tests.stub_server import StubServer

SMALL = ["--profile", "healthy", "--set", "workload.conversations=8", "--set", "workload.turns=1", "--set",
         "workload.prefix_tokens=200", "--set", "workload.max_tokens=1", "--set", "load.concurrency=4", "--set",
         "load.stall_timeout_s=1", "--set", "watch.metrics_path=''", "--quiet"]


def _cold_run(out, *engine: str, more: tuple[str, ...] = ()) -> tuple[int, dict]:
    command = f"{sys.executable} -m tests.cold_server --port {{port}} " + " ".join(engine)
    done = cli("run", *SMALL, *more, "--engine-cmd", command, "--out", str(out))
    return done.returncode, json.loads((out / "report.json").read_text())


def test_stalls_of_a_fresh_engines_first_requests_say_a_cold_start_may_be_the_cause(tmp_path):
    code, report = _cold_run(tmp_path, "--stall-first", "4")
    stalled = rule(report, "stalled_streams")
    assert code == 1 and stalled["fired"] and facts(report, "stalled_streams")["requests"] == 4
    assert 0 <= stalled["facts"]["cold_start_s"] <= 60, stalled
    assert "cold start may be the cause" in stalled["detail"] and "warmup_requests" in stalled["detail"]
    assert any("cold start" in reason for reason in report["reasons"])


def test_stalls_once_the_engine_answered_are_not_called_a_cold_start(tmp_path):
    code, report = _cold_run(tmp_path, "--stall-after", "4")
    stalled = rule(report, "stalled_streams")
    assert code == 1 and stalled["fired"] and stalled["facts"]["requests"] == 4, stalled
    assert stalled["facts"]["cold_start_s"] == -1 and "cold start" not in stalled["detail"]


def test_a_target_at_a_url_is_fresh_when_its_metrics_counted_no_finished_request(tmp_path):
    """At a URL, loadrepro did not see the engine start: an engine whose /metrics counted no finished request at the
    run's first scrape is fresh (the note), one that had served 5 before the run is not."""
    from tests.cold_server import app
    from tests.stub_server import serving

    def url_run(out, served_before: int) -> dict:
        with serving(app(4, None, served_before)) as url:
            cli("run", *SMALL[:-3], "--set", "watch.metrics_interval_s=0.1", "--quiet", "--base-url", url, "--out",
                str(out))
        return json.loads((out / "report.json").read_text())

    fresh, served = url_run(tmp_path / "fresh", 0), url_run(tmp_path / "served", 5)
    assert 0 <= facts(fresh, "stalled_streams")["cold_start_s"] <= 60, rule(fresh, "stalled_streams")
    assert "cold start may be the cause" in rule(fresh, "stalled_streams")["detail"]
    assert facts(served, "stalled_streams")["requests"] == 4 and facts(served, "stalled_streams")["cold_start_s"] == -1


def test_warm_ups_take_the_cold_start_and_are_not_judged(tmp_path):
    """The same cold engine with 4 warm-ups first: they stall, are kept apart and said, and the run passes."""
    code, report = _cold_run(tmp_path, "--stall-first", "4", more=("--set", "load.warmup_requests=4"))
    assert code == 0 and report["verdict"] == "pass", report["reasons"]
    assert report["requests"]["total"] == 8 and report["requests"]["by_outcome"] == {"ok": 8}
    warm = [json.loads(line) for line in (tmp_path / "engine-warmup.jsonl").read_text().splitlines()]
    assert [(w["outcome"], w["conversation"]) for w in warm] == [("stalled", -2)] * 4
    assert any(n.startswith("warm-up ([load] warmup_requests): 4 warm-up requests") for n in report["notes"])


def _text(body: dict) -> str:
    return "".join(m["content"] for m in body["messages"] if isinstance(m.get("content"), str))


def _ngrams(text: str, n: int = 6) -> set[tuple[str, ...]]:
    words = text.split()
    # of distinct words: runs of one repeated word (the planner's padding) are as common between any two requests
    return {gram for i in range(len(words) - n + 1) if len(set(gram := tuple(words[i:i + n]))) == n}


def test_warm_ups_share_no_prefix_and_no_run_of_words_with_the_run(tmp_path):
    """Sent before the load and shaped as its first requests, each warm-up's text starts with a salted marker and
    has its words shuffled: no prefix a cache could serve the run from, and no six words of the run in a row (what
    llama.cpp's chunk reuse, --cache-reuse, would find)."""
    with StubServer("ok", tokens=2).running() as server:
        done = cli("run", "--profile", "healthy", "--set", "workload.conversations=6", "--set", "workload.turns=2",
                   "--set", "workload.groups=1", "--set", "workload.prefix_tokens=300", "--set",
                   "workload.max_tokens=2", "--set", "load.concurrency=3", "--set", "load.warmup_requests=5",
                   "--base-url", server.url, "--out", str(tmp_path), "--quiet")
        bodies = [b for b in server.stats.bodies if b.get("stream")]
    assert (tmp_path / "report.json").exists(), done.stdout + done.stderr  # its verdict is the stub's cache's
    warm = [b for b in bodies if _text(b).startswith("[warm-up ")]
    run = [b for b in bodies if not _text(b).startswith("[warm-up ")]
    assert len(warm) == 5 and len(run) == 12 and bodies[:5] == warm  # every warm-up before the load
    assert [b["max_tokens"] for b in warm] == [1, 2, 1, 2, 1]  # the run's first five in shape: turn 1, turn 2, ...
    assert len({_text(b)[:24] for b in warm}) == 5  # a salt of its own each
    run_grams = set().union(*(_ngrams(_text(b)) for b in run))
    for body in warm:
        shared = next(i for i, (a, b) in enumerate(zip(_text(body), _text(run[0]) + "\0", strict=False)) if a != b)
        assert shared <= 1 and not _ngrams(_text(body)) & run_grams
        assert any(abs(len(_text(body).split()) - len(_text(b).split())) <= 3 for b in run)  # as long


def test_every_form_of_body_is_scrambled_and_led_by_its_marker():
    """A completions prompt, and chat messages whose first content is parts (an image and text): each warm-up's text
    starts with a salted marker of its own and keeps its words and its other parts; there are as many as asked,
    taken from the first requests in turn."""
    from loadrepro.workload.model import Conversation, PlannedRequest, Workload
    from loadrepro.workload.warmups import WARMUP_CONVERSATION, engine_warmups

    words = " ".join(f"w{i}" for i in range(40))
    image = {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}}
    prompt = PlannedRequest(0, 1, {"prompt": words}, 4, 40, 0)
    first_message = {"role": "user", "content": [image, {"type": "text", "text": words}]}
    parts = PlannedRequest(1, 1, {"messages": [first_message]}, 8, 40, 30, arrival_s=2.0, joins=(0,))
    conversations = (Conversation(0, None, (prompt,)), Conversation(1, None, (parts,)))
    workload = Workload("trace", "chat", 7, "x", "", conversations)
    warm = engine_warmups(workload, 3, "salt")
    assert [(w.conversation, w.turn, w.max_tokens, w.arrival_s, w.joins, w.shared_prefix_tokens) for w in warm] == [
        (WARMUP_CONVERSATION, 0, 4, None, (), 0), (WARMUP_CONVERSATION, 0, 8, None, (), 0),
        (WARMUP_CONVERSATION, 0, 4, None, (), 0)]
    first, second, third = (w.payload() for w in warm)
    assert first["prompt"].startswith("[warm-up ") and first["prompt"] != third["prompt"]
    assert sorted(first["prompt"].split("\n\n", 1)[1].split()) == sorted(words.split())
    assert first["prompt"].split("\n\n", 1)[1] != words
    marker, kept_image, text = second["messages"][0]["content"]
    assert marker["text"].startswith("[warm-up ") and kept_image == image and sorted(text["text"].split()) == \
        sorted(words.split())
    assert engine_warmups(workload, 0, "salt") == ()
