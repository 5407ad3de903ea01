import json
import os

import pytest

from loadrepro.errors import ProfileError
from loadrepro.sim.tokenizer import render_chat, tokenize
from loadrepro.workload.trace import read_trace


def test_common_hash_ids_share_exactly_that_many_block_tokens(plan_local):
    workload = plan_local("trace-example").workload
    rows = read_trace(os.path.join(os.path.dirname(__file__), "../../profiles/trace-example.jsonl"))
    contents = [r.body["messages"][0]["content"] for r in workload.requests]
    compared = 0
    for i in range(len(rows)):
        for j in range(i + 1, len(rows)):
            a, b = rows[i].hash_ids, rows[j].hash_ids
            common = len(os.path.commonprefix([a, b]))
            if common == 0 or common == min(len(a), len(b)):
                continue  # no shared block, or one ends inside the shared run (cut short)
            shared_text = contents[i][:contents[i].index(f"\n[block {a[common]}]") + 1]
            assert contents[j].startswith(shared_text)
            assert not contents[j].startswith(shared_text + f"[block {a[common]}]")
            assert len(tokenize(shared_text)) == common * 512
            compared += 1
    assert compared >= 5


def test_trace_lengths_schedule_and_outputs(plan_local):
    workload = plan_local("trace-example").workload
    rows = read_trace(os.path.join(os.path.dirname(__file__), "../../profiles/trace-example.jsonl"))
    for row, request in zip(rows, workload.requests):
        assert request.arrival_s == pytest.approx((row.timestamp_ms - rows[0].timestamp_ms) / 1000)
        assert request.max_tokens == row.output_length
        assert len(tokenize(render_chat(request.body["messages"]))) == request.expected_prompt_tokens
        assert len(tokenize(request.body["messages"][0]["content"])) == row.input_length


@pytest.mark.parametrize("line,message", [
    ('{"timestamp": 0, "output_length": 4}', "missing 'input_length'"),
    ('{"timestamp": 0, "input_length": "x", "output_length": 4}', "invalid literal"),
    ("[1, 2]", "must be a JSON object"),
    ("{oops", "not JSON"),
    ('{"timestamp": 0, "input_length": 0, "output_length": 4}', "must be positive"),
])
def test_bad_trace_lines_are_named_by_line_number(tmp_path, line, message):
    path = tmp_path / "t.jsonl"
    path.write_text(json.dumps({"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1]}) + "\n"
                    + line + "\n")
    with pytest.raises(ProfileError, match=f"t.jsonl:2: .*{message}"):
        read_trace(path)
