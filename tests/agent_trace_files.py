"""A WEKA agent trace shaped like AIPerf's fixtures (tests/fixtures/weka_traces/one_subagent.json): a root agent whose
first answer stops for a tool, a subagent it waits for, a tool-result turn, an async subagent it does not wait for, a
compaction turn and a trailing subagent. Block size 16; the tools and system prompt are the first 2 blocks."""

from __future__ import annotations

import json
from pathlib import Path

BLOCK = 16
SYSTEM = [1, 2]

ROOT = [
    {"t": 0.0, "type": "n", "in": 4 * BLOCK + 5, "out": 20, "hash_ids": [1, 2, 3, 4], "stop": "tool_use",
     "input_types": ["text"], "api_time": 0.2, "think_time": 0.0},
    {"t": 0.3, "type": "subagent", "agent_id": "a", "status": "completed", "duration_ms": 600, "requests": [
        {"t": 0.0, "type": "n", "in": 3 * BLOCK, "out": 5, "hash_ids": [1, 2, 50], "stop": "end_turn"},
        {"t": 0.2, "type": "n", "in": 5 * BLOCK, "out": 5, "hash_ids": [1, 2, 50, 51, 52], "stop": "end_turn"},
    ]},
    {"t": 0.6, "type": "n", "in": 7 * BLOCK, "out": 8, "hash_ids": [1, 2, 3, 4, 5, 6, 7], "stop": "end_turn",
     "input_types": ["tool_result"], "think_time": 0.1},
    {"t": 0.8, "type": "subagent", "agent_id": "b", "status": "async_launched", "duration_ms": None, "requests": [
        {"t": 0.8, "type": "s", "in": 3 * BLOCK, "out": 4, "hash_ids": [1, 2, 60], "stop": "end_turn"},
    ]},
    {"t": 1.0, "type": "n", "in": 5 * BLOCK, "out": 6, "hash_ids": [1, 2, 3, 90, 91], "stop": "end_turn",
     "input_types": ["text"]},
    {"t": 1.2, "type": "subagent", "agent_id": "c", "status": "completed", "duration_ms": 100, "requests": [
        {"t": 0.1, "type": "n", "in": 3 * BLOCK, "out": 4, "hash_ids": [1, 2, 70], "stop": "end_turn"},
    ]},
]


def weka_trace(trace_id: str = "agent-1", scope: str = "local") -> dict:
    return {"id": trace_id, "models": ["m"], "block_size": BLOCK, "hash_id_scope": scope, "tool_tokens": BLOCK,
            "system_tokens": BLOCK, "requests": json.loads(json.dumps(ROOT))}


def write_lines(path: Path, traces: list[dict]) -> Path:
    path.write_text("".join(json.dumps(t) + "\n" for t in traces))
    return path


def write_whole(path: Path, trace: dict) -> Path:
    """One trace a file, pretty-printed as the published ones are."""
    path.write_text(json.dumps(trace, indent=2))
    return path
