"""What requests without a first token waited behind, said in the finding: an engine of one slot that keeps
running the queued requests whose clients left (zombies holding the slot) against one that drops them, where the
later requests only queue behind loadrepro's own."""

from __future__ import annotations

import pytest

import loadrepro
from tests.slot_server import SlotServer

PROFILE = """
name = "one-slot"
api = "chat"
[workload]
seed = 3
conversations = 8
turns = 1
prefix_tokens = 300
max_tokens = 100
[load]
concurrency = 4
stall_timeout_s = 4
request_timeout_s = {timeout}
[watch]
metrics_interval_s = 0.25
[verdict]
min_completed = 0.9
[[chaos.events]]
at_s = 0.5
action = "abort_burst"
count = 4
"""


def run(tmp_path, tokenizer_dir, server: SlotServer, timeout: float):
    path = tmp_path / "slot.toml"
    path.write_text(PROFILE.format(timeout=timeout))
    with server.running():
        return loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")


def finding(report, rule: str) -> str:
    return next((r.detail for r in report.rules if r.name == rule and r.fired), "")


def facts(report, rule: str) -> dict:
    return next((r.facts for r in report.rules if r.name == rule and r.fired), {})


@pytest.mark.slow
def test_requests_waiting_behind_cancelled_requests_the_engine_kept_running_are_said_to(tmp_path, tokenizer_dir):
    server = SlotServer(keeps_cancelled=True)
    report = run(tmp_path, tokenizer_dir, server, 60)
    assert server.zombies_run >= 2, server
    found = facts(report, "stalled_streams")
    assert found["waited_behind"] == "held" and found["cancelled_before"] == 4, report.rules


@pytest.mark.slow
def test_requests_queued_behind_loadrepros_own_are_said_to_queue_not_to_wait_for_zombies(tmp_path, tokenizer_dir):
    server = SlotServer(keeps_cancelled=False)
    report = run(tmp_path, tokenizer_dir, server, 7)
    assert server.zombies_run == 0
    assert not finding(report, "stalled_streams")
    found = facts(report, "low_completion")
    assert found["waited_behind"] == "queued", report.rules
    # the work ahead: three 100-token answers at 20 tokens/s, one slot, beyond the 7 s the last had
    assert found["timeouts"] == "queueing", report.rules


@pytest.mark.slow
def test_timeouts_behind_a_slot_that_slowed_are_not_told_as_queueing(tmp_path, tokenizer_dir):
    # the burst cancels the four first requests; the second request sent after it trickles a token every 1.5 s
    # (the sixth to arrive; the seventh if one of the first four was cancelled before it arrived): the requests
    # behind it time out at 20 s, though the work queued ahead of them (three 100-token answers, 15 s at 20
    # tokens/s) would fit in 20 s: the engine gave them far less than its usual pace
    server = SlotServer(keeps_cancelled=False, slow_request=5)
    report = run(tmp_path, tokenizer_dir, server, 20)
    found = facts(report, "low_completion")
    assert found["timed_out"] > 0 and found["timeouts"] == "unexplained", report.rules
