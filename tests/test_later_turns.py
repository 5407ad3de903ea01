"""A conversation goes on only from an answer: when a turn fails or is refused, its later turns are not sent, and the
report says how many and of which conversations (requests.later_turns_not_sent, a note). Must say: a stub that
refuses every second turn (about 300 tokens; first turns about 200 fit). Must not: the same workload answered."""

from __future__ import annotations

from tests.context_server import ContextServer
from tests.helpers import cli, report, small

TURNS = ("workload.turns=3", "workload.turn_tokens=60", "workload.max_tokens=4")


def _run(tmp_path, n_ctx: int) -> tuple[str, dict]:
    with ContextServer(n_ctx, refuses=True).running() as server:
        done = cli("run", "--base-url", server.url, "--out", str(tmp_path / "run"), *small(*TURNS))
    return done.stdout, report(tmp_path / "run")


def test_later_turns_not_sent_after_a_refused_turn_are_counted_and_said(tmp_path):
    said, found = _run(tmp_path, 250)
    r = found["requests"]
    assert r["by_outcome"] == {"ok": 3, "rejected": 3} and r["later_turns_not_sent"] == 3, r
    note = next(n for n in found["notes"] if "later turns not sent" in n)
    assert note.startswith("run: 3 later turns not sent") and "conversations 0, 1, 2" in note, note
    assert "3 later turns not sent" in (tmp_path / "run" / "report.md").read_text()
    assert "rejected 3; 3 later turns not sent after a failed or refused turn" in said, said  # the verdict line


def test_a_run_whose_turns_all_answered_says_nothing_of_turns_not_sent(tmp_path):
    said, found = _run(tmp_path, 4096)
    assert found["requests"]["by_outcome"] == {"ok": 9} and found["requests"]["later_turns_not_sent"] == 0
    assert not any("not sent" in n for n in found["notes"]) and "not sent" not in said, found["notes"]
