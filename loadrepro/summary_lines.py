"""A few plain lines about a finished run, for the terminal."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from loadrepro.capacity import Capacity, KvConfig
from loadrepro.run_report import RunReport


def describe_verdict(report: RunReport, written: list[Path]) -> list[str]:
    outcomes = ", ".join(f"{k} {v}" for k, v in report.requests.by_outcome.items())
    lines = [f"verdict: {report.verdict.upper()}  ({report.requests.total} requests in {report.duration_s:.1f} s: "
             f"{outcomes}; /health after: {report.health.post})"]
    lines += [f"  - {reason}" for reason in report.reasons]
    lines += [f"report: {path}" for path in written]
    return lines


def describe_capacity(kv: KvConfig, cap: Capacity, as_json: bool = False) -> list[str]:
    if as_json:
        return [json.dumps({"config": dataclasses.asdict(kv), **dataclasses.asdict(cap)}, indent=2)]
    primary, draft = kv.pools()
    lines = [f"bytes per token      {cap.bytes_per_token:,}" + (f" (+ {kv.draft_bytes_per_token:,} draft)"
                                                                 if kv.draft_bytes_per_token else ""),
             f"pool                 {primary:,} bytes = {cap.pool_tokens:,} tokens = {cap.pool_blocks:,} blocks of "
             f"{kv.tokens_per_block}"]
    if draft is not None:
        lines.append(f"draft pool           {draft:,} bytes = {cap.draft_pool_tokens:,} tokens")
    lines += [f"clamped length       {cap.clamped_seq_len:,} tokens (max_seq_len {kv.max_seq_len:,})",
              f"blocks needed        {cap.blocks_needed:,} for {kv.max_batch} x {kv.max_seq_len:,} tokens"
              + (f" x beam {kv.beam_width}" if kv.beam_width > 1 else ""),
              f"full-length fit      {cap.full_sequences_fit:,} sequences at once",
              f"page-index width     {cap.index_width} entries from the clamped length; max_seq_len needs "
              f"{cap.index_needed}",
              f"verdict              {cap.verdict}: {cap.why}"]
    return lines
