"""After the load, [verify]: the run's answers checked against the same requests sent again alone on the idle
engine."""

from __future__ import annotations

import asyncio
from pathlib import Path

from loadrepro.config.profile import Profile
from loadrepro.load.client import Client
from loadrepro.load.references import verify_answers
from loadrepro.load.transport import Transport
from loadrepro.records import RunResult, Verification, write_checks, write_lines
from loadrepro.runs.progress import Say
from loadrepro.workload.model import Workload


async def verified(result: RunResult, client: Client, url: str, api_key: str | None, workload: Workload,
                    profile: Profile, notes: list[str], say: Say, run_dir: Path, stop: asyncio.Event) -> Verification:
    """The run with its answers checked ([verify]), when its load ended as planned and the engine is there to ask;
    Ctrl-C (`stop`) stops the checking, keeping what was checked. What each request answered alone is kept in
    references.jsonl, beside requests.jsonl's answers under load, and each answer's check in answers.jsonl (which a
    rebuilt report judges)."""
    if not result.stop_reason.as_planned:
        notes.append(f"answers: not checked, since the run ended {result.stop_reason.replace('_', ' ')}")
        return Verification(spec=profile.verify)
    records = result.sampled_answers or result.records
    if result.tally is not None and result.tally.dropped:
        notes.append(f"answers: chosen among a uniform sample of {len(records):,} of the run's completed requests "
                     f"(of {result.tally.requests:,} requests; beyond [load] keep_records, records are not kept in "
                     "memory)")
    say(f"checking answers: {profile.verify.outputs} of the completed requests, each sent again alone")
    async with Transport(url, api_key) as http:
        verified = await verify_answers(client, http, workload, records, profile.verify, stop)
    write_lines(run_dir / "references.jsonl", verified.references)
    write_checks(run_dir, verified.checks)
    notes.append(verified.note)
    say(verified.note)
    return Verification(tuple(verified.checks), profile.verify)
