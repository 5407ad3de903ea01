"""A few plain lines about a finished run, for the terminal."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import TYPE_CHECKING

from loadrepro.config.capacity import Capacity, KvConfig
from loadrepro.judge.findings import counted
from loadrepro.schema.report_sections import health_said
from loadrepro.schema.run_report import RunReport

if TYPE_CHECKING:  # a run's last lines do not describe a probe: its models are built by the probe alone
    from loadrepro.load.probe import Probe, Usage


def describe_verdict(report: RunReport, written: list[Path] | None = None) -> list[str]:
    """The verdict and its reasons, what the run cost beside its load, then the files written (when given)."""
    outcomes = ", ".join(f"{k} {v}" for k, v in report.requests.by_outcome.items())
    if skipped := report.requests.later_turns_not_sent:  # planned, never sent: "done 14/24" says no more
        outcomes += f"; {skipped} later turn{'s' * (skipped > 1)} not sent after a failed or refused turn"
    sent = counted(report.requests.total, "request")
    lines = [f"verdict: {report.verdict.upper()}  ({sent} in {report.duration_s:.1f} s: {outcomes}; /health after: "
             f"{health_said(report.health.post)})"]
    lines += [f"  - {reason}" for reason in report.reasons]
    t = report.timing
    if t is not None and t.to_first_request_s is not None and t.last_answer_to_verdict_s is not None:
        lines.append(f"  ({t.to_first_request_s:.1f} s from the command to the first request, "
                     f"{t.last_answer_to_verdict_s:.1f} s from the last answer to this verdict)")
    lines += [f"report: {path}" for path in written or ()]
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
              f"verdict              {cap.verdict.words}: {cap.why}"]
    return lines


def describe_probe(probe: Probe) -> list[str]:
    """The probe as a two-column table, then what a run will do."""
    usage = probe.usage
    rows = [("target", probe.base_url),
            ("engine", f"{probe.flavour} ({'; '.join(probe.evidence)})"),
            ("models", ", ".join(probe.models) or "none listed at /v1/models"),
            ("max_model_len", f"{probe.max_model_len:,}" if probe.max_model_len else "not published"),
            ("tokenize", probe.tokenize or "none answers"),
            ("health", f"GET {probe.health.path}: {probe.health.status or 'no answer'}"),
            ("metrics", f"GET {probe.metrics.path}: {probe.metrics.status or 'no answer'} {probe.metrics.detail}"),
            ("recognised", ", ".join(f"{k} ({v})" for k, v in probe.series.items()) or "none"),
            ("streamed usage", _usage_cell(usage)),
            ("cached_tokens", "not reported" if usage is None or usage.cached_tokens is None
             else f"{usage.cached_tokens} of {usage.prompt_tokens} on the second request"),
            ("KV limits", probe.limits or "not published"),
            ("APIs", _apis_cell(probe)),
            ("sent", f"{probe.requests} requests; the {2 + len(probe.apis)} one-token generations had "
                     f"{probe.generated_prompt_tokens} prompt tokens in all")]
    width = max(len(name) for name, _ in rows)
    return [f"{name:{width}}  {value}" for name, value in rows] + ["", "A run against this target:"] + [
        f"  - {line}" for line in probe.plan]


def _apis_cell(probe: Probe) -> str:
    if not probe.apis:
        return "not checked (no model listed)"
    answering = [f"{api}{' (reasoning first)' if c.reasoning else ''}" for api, c in probe.apis.items() if c.answers]
    silent = [f"{api} ({c.detail.split(':')[0]})" for api, c in probe.apis.items() if not c.answers]
    return f"{', '.join(answering) or 'none'} answer" + (f"; not {', '.join(silent)}" if silent else "")


def _usage_cell(usage: Usage | None) -> str:
    if usage is None:
        return "not checked (no model listed)"
    if usage.error and usage.prompt_tokens is None:
        return f"not checked: {usage.error}"
    return f"{'yes' if usage.streamed_usage else 'no'} ({usage.api})"
