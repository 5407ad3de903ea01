import json
import os

import pytest

from loadrepro.errors import TraceError
from loadrepro.sim.tokenizer import render_chat, tokenize
from loadrepro.workload.tokens import block_lead
from loadrepro.workload.trace_formats import read_rows

EXAMPLE = os.path.join(os.path.dirname(__file__), "../../profiles/trace-example.jsonl")


def read_trace(path):
    return list(read_rows(path, "mooncake")[1])


def test_common_hash_ids_share_exactly_that_many_block_tokens(plan_local):
    workload = plan_local("trace-example").workload
    rows = read_trace(EXAMPLE)
    contents = [r.payload()["messages"][0]["content"] for r in workload.requests]
    compared = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i].hash_ids, rows[j].hash_ids
            common = len(os.path.commonprefix([a, b]))
            if common == 0 or common == min(len(a), len(b)):
                continue  # no shared block, or one ends inside the shared run (cut short)
            shared_text = contents[i][:contents[i].index("\n" + block_lead(a[common])) + 1]
            assert contents[j].startswith(shared_text)
            assert not contents[j].startswith(shared_text + block_lead(a[common]))
            assert len(tokenize(shared_text)) == common * 512
            compared += 1
    assert compared >= 5


def test_trace_lengths_schedule_and_outputs(plan_local):
    workload = plan_local("trace-example").workload
    rows = read_trace(EXAMPLE)
    for row, request in zip(rows, workload.requests):
        assert request.arrival_s == pytest.approx(row.timestamp_s - rows[0].timestamp_s)
        assert request.max_tokens == row.output_length
        assert len(tokenize(render_chat(request.payload()["messages"]))) == request.expected_prompt_tokens
        assert len(tokenize(request.payload()["messages"][0]["content"])) == row.input_length


@pytest.mark.parametrize("line,message", [
    ('{"timestamp": 0, "output_length": 4}', "input_length: missing"),
    ('{"timestamp": 0, "input_length": "x", "output_length": 4}', "input_length: not a number"),
    ("[1, 2]", "must be a JSON object"),
    ("{oops", "not JSON"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 4}', "input_length: 0 tokens; it must be at least 1"),
    ('{"timestamp": 0, "input_length": -3, "output_length": 4}', "input_length: -3 tokens"),
    ('{"timestamp": "noon", "input_length": 3, "output_length": 4}', "timestamp: not a number"),
    ('{"input_length": 3, "output_length": 4}', "timestamp: missing"),
])
def test_bad_trace_lines_are_named_by_line_number(tmp_path, line, message):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}) + "\n"
                    + line + "\n")
    with pytest.raises(TraceError, match=f"t.jsonl:2: .*{message}"):
        read_trace(path)


def test_a_deferred_body_is_the_same_bytes_made_anywhere_in_any_order(plan_local, monkeypatch):
    """Trace bodies are made when sent, in a worker process too: a pickled request makes the body the planner
    would, and a block cache too small to hold the trace makes the same text in reverse order."""
    import pickle

    from loadrepro.workload import trace_bodies as trace_module

    requests = plan_local("trace-example").workload.requests
    expected = [json.dumps(r.payload()) for r in requests]
    assert all(not isinstance(r.body, dict) for r in requests)
    assert [json.dumps(r.payload()) for r in pickle.loads(pickle.dumps(requests))] == expected
    monkeypatch.setattr(trace_module, "_CACHED_BLOCKS", 1)
    small = plan_local("trace-example").workload.requests
    assert [json.dumps(r.payload()) for r in reversed(small)] == expected[::-1]


def test_a_long_traces_workload_file_carries_the_first_bodies_and_every_schedule(plan_local, monkeypatch, tmp_path,
                                                                                  capsys):
    import gzip

    from loadrepro.standalone import replay
    from loadrepro.workload import export

    workload = plan_local("trace-example").workload
    monkeypatch.setattr(export, "DEFERRED_BODIES_WRITTEN", 3)
    written = export.compress_workload(export.write_workload(workload, tmp_path / export.PLAIN_WORKLOAD_FILE))
    with export.open_workload(written) as lines:
        header, *rows = map(json.loads, lines)
    assert header["requests"] == len(rows) == len(workload.requests) > 3 and header["bodies"] == 3
    assert [json.dumps(r["body"]) for r in rows if "body" in r] == \
        [json.dumps(r.payload()) for r in workload.requests[:3]]
    with export.open_workload_bytes(written) as plain:  # as a bundle ships it, for replay.py
        (tmp_path / export.BUNDLED_WORKLOAD_FILE).write_bytes(gzip.compress(plain.read()))
    monkeypatch.setattr(replay, "HERE", tmp_path)
    assert len(replay.read_requests()) == 3
    assert f"3 of the workload's {len(rows)} requests carry their body" in capsys.readouterr().out
    # an agent trace's long prompts: bodies stop before the prompt tokens they hold pass the cap
    monkeypatch.setattr(export, "DEFERRED_PROMPT_TOKENS_WRITTEN", sum(r.expected_prompt_tokens
                                                                       for r in workload.requests[:2]))
    assert export.bodies_written(workload) == 2


def test_a_traces_requests_stream_or_not_by_the_same_draw_as_their_bodies(plan_local):
    requests = plan_local("trace-example", "workload.stream=0.5").workload.requests
    assert {r.stream for r in requests} == {True, False}
    assert all(r.payload()["stream"] is r.stream for r in requests)
