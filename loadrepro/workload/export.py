"""workload.jsonl.gz: the exact request payloads and their schedule, independent of faker's version."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

from loadrepro.workload.model import Workload

SCHEMA = "loadrepro.workload/1"


def write_workload(workload: Workload, path: Path) -> Path:
    """One JSON line describing the workload, then one per request in conversation and turn order."""
    with gzip.open(path, "wt", encoding="utf-8", compresslevel=5) as out:
        header = {"type": "workload", "schema": SCHEMA, "kind": workload.kind, "api": workload.api,
                  "seed": workload.seed, "faker_version": workload.faker_version,
                  "calibration_source": workload.calibration_source}
        out.write(json.dumps(header) + "\n")
        for r in workload.requests:
            line = {"type": "request", "conversation": r.conversation, "turn": r.turn, "arrival_s": r.arrival_s,
                    "expected_prompt_tokens": r.expected_prompt_tokens,
                    "shared_prefix_tokens": r.shared_prefix_tokens, "body": r.body}
            out.write(json.dumps(line, separators=(",", ":")) + "\n")
    return path
