"""`trace anonymize`: an OpenAI log with private names and numbers in, a trace out that holds none of its words,
nor does a run of it or a bundle of that run; and its replay loads the prefix cache as the text replay did, request
by request, within one block."""

from __future__ import annotations

import gzip
import json
import re
import zipfile

import pytest

from tests.helpers import cli
from tests.trace_files import NAMES, SYSTEM, make_turns, openai_log

BLOCK = 16


def _runs_of_four(texts):
    runs = set()
    for text in texts:
        words = re.findall(r"\w+", text.lower())
        runs.update(" ".join(words[i:i + 4]) for i in range(len(words) - 3))
    return runs


def _texts_in(path):
    """Every text a file holds: decompressed, and each member of a zip."""
    data = path.read_bytes()
    if path.suffix == ".zip":
        with zipfile.ZipFile(path) as bundle:
            return [t for name in bundle.namelist() for t in _texts_of(name, bundle.read(name))]
    return _texts_of(path.name, data)


def _texts_of(name, data):
    if name.endswith(".gz"):
        data = gzip.decompress(data)
    if name.endswith(".png"):
        return []
    return [data.decode("utf-8", "replace")]


def _leaks(texts, turns):
    private = {n.lower() for n in NAMES} | {m for t in turns for m in re.findall(r"\d{8}", t.user)}
    runs = _runs_of_four([SYSTEM] + [t.user for t in turns] + [t.answer for t in turns])
    flat = [" ".join(re.findall(r"\w+", text.lower())) for text in texts]
    return sorted({p for p in private | runs if any(p in f for f in flat)})


def _cached(run_dir):
    rows = [json.loads(line) for line in (run_dir / "requests.jsonl").read_text().splitlines()]
    return {(r["conversation"], r["turn"]): r["cached_tokens"] for r in rows}


@pytest.fixture(scope="module")
def replays(tmp_path_factory):
    """The log, its anonymized trace, and a run of each on the simulated engine (and a bundle of the latter)."""
    tmp = tmp_path_factory.mktemp("anonymize")
    turns = make_turns(seed=11, sessions=6, block=BLOCK)
    log = openai_log(turns, tmp / "prod-log.jsonl")
    anon = tmp / "anon.jsonl"
    done = cli("trace", "anonymize", str(log), "-o", str(anon), "--block-tokens", str(BLOCK))
    assert done.returncode == 0, done.stderr
    runs = {}
    for name, trace in (("text", log), ("anon", anon)):
        out = tmp / f"run-{name}"
        done = cli("run", "--profile", "trace-example", "--set", f"workload.trace='{trace}'",
                    "--set", f"workload.trace_block_tokens={BLOCK}", "--set", "sim.block_size=16",
                    "--out", str(out), "--quiet")
        assert done.returncode == 0, done.stderr
        runs[name] = out
    bundle = tmp / "bundle.zip"
    assert cli("bundle", str(runs["anon"]), "-o", str(bundle)).returncode == 0
    return turns, log, anon, runs, bundle


def test_the_trace_the_run_and_the_bundle_hold_none_of_the_words(replays):
    turns, log, anon, runs, bundle = replays
    assert _leaks(_texts_in(log), turns)  # the check finds what is there
    assert _leaks(_texts_in(anon), turns) == []
    for path in sorted(runs["anon"].rglob("*")):
        if path.is_file():
            assert _leaks(_texts_in(path), turns) == [], path
    assert _leaks(_texts_in(bundle), turns) == []
    for line in anon.read_text().splitlines():
        assert set(json.loads(line)) == {"timestamp", "session_id", "input_length", "output_length", "hash_ids"}


def test_the_anonymized_trace_keeps_sessions_times_and_the_shared_system_prompt(replays):
    turns, _, anon, _, _ = replays
    rows = [json.loads(line) for line in anon.read_text().splitlines()]
    assert len(rows) == len(turns)
    assert [r["timestamp"] for r in rows] == [round((t.t_s - turns[0].t_s) * 1000, 3) for t in turns]
    assert [r["output_length"] for r in rows] == [t.output_tokens for t in turns]
    sessions = {}
    for row, turn in zip(rows, turns):
        sessions.setdefault(turn.session, set()).add(row["session_id"])
    assert all(len(ids) == 1 for ids in sessions.values()) and len({min(i) for i in sessions.values()}) == 6
    assert len({r["hash_ids"][0] for r in rows}) == 1  # every prompt starts with the one system block
    by_session = {}
    for row, turn in zip(rows, turns):
        earlier = by_session.setdefault(turn.session, [])
        for before in earlier:  # a later turn extends the earlier ones: their whole blocks come first
            whole = before["input_length"] // BLOCK
            assert row["hash_ids"][:whole] == before["hash_ids"][:whole]
        earlier.append(row)


def test_the_anonymized_replay_caches_what_the_text_replay_did_within_one_block(replays):
    _, _, _, runs, _ = replays
    text, anon = _cached(runs["text"]), _cached(runs["anon"])
    assert text.keys() == anon.keys()
    assert sum(text.values()) > 0
    for key in text:
        assert abs(text[key] - anon[key]) <= BLOCK, (key, text[key], anon[key])
    reuse = [json.loads((runs[n] / "report.json").read_text())["workload"]["prefix_reuse"] for n in ("text", "anon")]
    assert all(r["possible_tokens"] > 0 and r["cached_tokens"] > 0 for r in reuse)


def _agent_log(path):
    """An agent's OpenAI log: a task, a tool call, its result (naming a private customer), a follow-up."""
    system = {"role": "system", "content": "You are the billing agent. " + " ".join(f"rule {i}." for i in range(40))}
    task = {"role": "user", "content": "Refund the duplicate charge on the Zorblatt Ventures account."}
    call = {"role": "assistant", "content": None, "tool_calls": [
        {"id": "call_1", "type": "function", "function": {"name": "lookup", "arguments": '{"account": "ZV-1"}'}}]}
    result = {"role": "tool", "tool_call_id": "call_1", "content": "Zorblatt Ventures: charges 4412 and 4412 on "
              "the ninth of March, " + " ".join(f"line {i}" for i in range(40))}
    answer = {"role": "assistant", "content": "Both charges are duplicates; refunding one."}
    follow = {"role": "user", "content": "Confirm the refund reached Zorblatt Ventures."}
    requests = [[system, task], [system, task, call, result], [system, task, call, result, answer, follow]]
    path.write_text("".join(json.dumps({"timestamp": 10 + i, "body": {"messages": m, "max_tokens": 32},
                                        "response": {"usage": {"completion_tokens": 20}}}) + "\n"
                            for i, m in enumerate(requests)))
    return path


def test_an_agents_log_becomes_a_weka_trace_with_its_tool_round_trip_and_no_words(tmp_path):
    from tests.test_trace_replay import replay
    from tests.trace_server import TraceServer

    log = _agent_log(tmp_path / "agent.jsonl")
    out = tmp_path / "agent.weka.jsonl"
    done = cli("trace", "anonymize", str(log), "-o", str(out), "--block-tokens", str(BLOCK))
    assert done.returncode == 0, done.stderr
    assert "(weka)" in done.stdout
    (trace,) = [json.loads(line) for line in out.read_text().splitlines()]
    requests = trace["requests"]
    assert [r["input_types"] for r in requests] == [["text"], ["tool_result"], ["text"]]
    assert [r["stop"] for r in requests] == ["tool_use", "end_turn", "end_turn"]
    assert [r["t"] for r in requests] == [0.0, 1.0, 2.0] and all(r["out"] == 20 for r in requests)
    assert requests[1]["hash_ids"][:len(requests[0]["hash_ids"])] == requests[0]["hash_ids"]
    assert trace["system_tokens"] > 0 and trace["block_size"] == BLOCK
    assert "zorblatt" not in out.read_text().lower() and not _runs_of_four([out.read_text()]) & _runs_of_four(
        [log.read_text()])
    server = TraceServer(answer_s=0.0)
    with server.running() as url:
        replay(url, tmp_path, out, "workload.trace_block_tokens=0")
    tool_turn = next(g for g in server.received if g.body["messages"][-1]["role"] == "tool")
    assert tool_turn.body["messages"][-1]["tool_call_id"] == tool_turn.body["messages"][-2]["tool_calls"][0]["id"]
    mooncake = cli("trace", "anonymize", str(log), "-o", str(tmp_path / "m.jsonl"), "--to", "mooncake")
    assert mooncake.returncode == 0 and "session_id" in (tmp_path / "m.jsonl").read_text()
