"""[slo]: each request met the service level or missed it (which limits; a failed request always misses), judged
in the steady state unless the ramp-up is asked for, with goodput; rule `slo` fails below min_attainment."""

from __future__ import annotations

import dataclasses
import json

import pytest

import loadrepro
from loadrepro.config.profile import SloSpec, VerdictSpec
from loadrepro.judge.judgement import judge
from loadrepro.records import Outcome, RequestRecord
from loadrepro.report.build import _slo as slo_section
from tests import builders
from tests.builders import START, S, record
from tests.helpers import rule
from tests.slo_server import TOKENS, SloServer


def timed(id: int, sent_s: float, ttft_s: float, gap_s: float, outcome: Outcome = Outcome.OK,
          tokens: int = 4, long_s: float | None = None) -> RequestRecord:
    """A record sent at `sent_s` with its first token `ttft_s` later and `gap_s` between tokens."""
    sent = START + int(sent_s * S)
    first = sent + int(ttft_s * S)
    chunks = tuple(first + int(i * gap_s * S) for i in range(tokens)) if outcome is Outcome.OK else ()
    end = sent + int(long_s * S) if long_s is not None else (chunks[-1] if chunks else sent + int(0.1 * S))
    return dataclasses.replace(record(id, outcome), queued_ns=sent, sent_ns=sent, first_byte_ns=sent + 1000,
                               first_token_ns=first if chunks else None, first_content_ns=first if chunks else None,
                               chunk_ns=chunks, end_ns=end, completion_tokens=len(chunks) or None)


def judged(records, slo: SloSpec, duration_s: float):
    result = dataclasses.replace(builders.result(records, duration_s=duration_s), slo=slo)
    spec = VerdictSpec()
    judgement = judge(result, spec)
    return dict(judgement.findings)["slo"], slo_section(result, spec, judgement.measurements)


def test_attainment_and_goodput_are_the_requests_counted_by_hand():
    slo = SloSpec(ttft_ms=200, itl_ms=50, e2e_ms=900, include_ramp_up=True, min_attainment=0.8)
    records = [
        timed(1, 0.0, 0.1, 0.01),  # met
        timed(2, 0.5, 0.3, 0.01),  # TTFT 300 ms: missed ttft
        timed(3, 1.0, 0.1, 0.08),  # mean ITL 80 ms: missed itl
        timed(4, 1.5, 0.1, 0.3),  # ITL 300 ms and end to end 1.0 s: missed itl and e2e
        timed(5, 2.0, 0.1, 0.01, Outcome.SERVER_ERROR),  # failed: missed whatever its latency
        timed(6, 2.5, 0.1, 0.01, Outcome.CANCELLED),  # cancelled by loadrepro: not judged
        timed(7, 3.0, 0.1, 0.01),  # met
        timed(8, 3.5, 0.05, 0.01, tokens=10),  # met, 10 output tokens
    ]
    finding, info = judged(records, slo, duration_s=5.0)
    assert (info.requests, info.met, info.from_s, info.steady_state) == (7, 3, 0, False)
    assert info.missed.model_dump() == {"ttft": 1, "itl": 2, "e2e": 1, "failed": 1}
    assert info.attainment == pytest.approx(3 / 7, abs=1e-5)
    last_end_s = (max(r.end_ns for r in records) - START) / S  # goodput over the span judged: 0 s to the last answer
    assert info.goodput_requests_per_s == pytest.approx(3 / last_end_s, abs=1e-3)
    assert info.goodput_tokens_per_s == pytest.approx((4 + 4 + 10) / last_end_s, abs=1e-3)
    assert finding.severity == "fail" and "42.9% of the 7 requests" in finding.summary
    assert "below the 80.0% required" in finding.summary


def test_the_ramp_up_is_not_judged_unless_asked():
    """Requests of 4 s sent one a second: in flight 1, 2, 3, then 4 from second 3 on (the level). The three sent
    while it ramped up were late; from second 3 on every request met the SLO."""
    records = [timed(i + 1, i + 0.2, 0.6 if i < 3 else 0.1, 0.01, long_s=4.0) for i in range(12)]
    slo = SloSpec(ttft_ms=500, min_attainment=0.99)
    finding, info = judged(records, slo, duration_s=16.0)
    assert (info.from_s, info.in_flight_level, info.requests, info.met) == (3, 4, 9, 9)
    assert info.attainment == 1.0 and info.whole_run_attainment == 0.75
    assert finding.severity == "info" and "sent from 3 s (the steady state" in finding.summary
    finding, info = judged(records, slo.model_copy(update={"include_ramp_up": True}), duration_s=16.0)
    assert (info.from_s, info.requests, info.met) == (0, 12, 9)
    assert finding.severity == "fail"


def test_no_limit_set_judges_nothing():
    finding, info = judged([timed(1, 0.0, 5.0, 1.0)], SloSpec(min_attainment=0.5), duration_s=10.0)
    assert finding is None and info is None


PROFILE = """
name = "slo"
api = "chat"
[workload]
seed = 5
conversations = 40
turns = 1
prefix_tokens = 300
max_tokens = 4
[load]
concurrency = 4
max_retries = 0
request_timeout_s = 20
stall_timeout_s = 10
[watch]
metrics_path = ""
[verdict]
allow_rejected = true
min_completed = 0.0
[slo]
ttft_ms = 500
itl_ms = 100
include_ramp_up = true
min_attainment = {min_attainment}
"""


def run(tmp_path, tokenizer_dir, plan: tuple[str, ...], min_attainment: float):
    path = tmp_path / "slo.toml"
    path.write_text(PROFILE.format(min_attainment=min_attainment))
    with SloServer(plan, late_s=1.0, slow_gap_s=0.3).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    return server, report


def test_a_server_late_slow_and_failing_on_planned_requests_misses_exactly_those(tmp_path, tokenizer_dir):
    plan = ("fast", "late", "fast", "slow", "error", "fast", "fast", "fast", "late", "fast")
    server, report = run(tmp_path, tokenizer_dir, plan, min_attainment=0.9)
    done = server.done
    assert sum(done.values()) == 40 and report.slo is not None
    s = report.slo
    assert (s.requests, s.met) == (40, done["fast"])
    assert s.missed.model_dump() == {"ttft": done["late"], "itl": done["slow"], "e2e": 0, "failed": done["error"]}
    assert s.attainment == pytest.approx(done["fast"] / 40, abs=1e-5)
    records = [json.loads(line) for line in (tmp_path / "run" / "requests.jsonl").read_text().splitlines()]
    span_s = (max(r["end_ns"] for r in records) - min(r["queued_ns"] for r in records)) / S
    assert s.goodput_requests_per_s * span_s == pytest.approx(done["fast"], rel=0.05)
    assert s.goodput_tokens_per_s == pytest.approx(s.goodput_requests_per_s * TOKENS, rel=1e-3)
    assert not report.passed and rule(report, "slo").severity == "fail"
    assert "below the 90.0% required" in rule(report, "slo").detail
    md = (tmp_path / "run" / "report.md").read_text()
    assert "## Service level" in md and f"Attainment {s.attainment:.1%}" in md


def test_a_server_that_is_always_fast_meets_it_and_the_run_passes(tmp_path, tokenizer_dir):
    server, report = run(tmp_path, tokenizer_dir, ("fast",), min_attainment=0.99)
    assert report.passed, report.reasons
    assert report.slo is not None and report.slo.attainment == 1.0 and report.slo.met == 40
    assert rule(report, "slo").severity == "info"
