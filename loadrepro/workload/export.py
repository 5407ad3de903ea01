"""workload.jsonl.zst: the exact request payloads (as the run's API takes them, without the model) and their schedule,
independent of faker's version. A bundle ships it gzipped (workload.jsonl.gz), which its replay.py reads with the
standard library alone."""

from __future__ import annotations

import gzip
import io
from pathlib import Path
from typing import IO, Any, cast

import orjson
import zstandard

from loadrepro.workload.apis import wire_body
from loadrepro.workload.model import Deferred, PlannedRequest, Workload

SCHEMA = "loadrepro.workload/1"
WORKLOAD_FILE, PLAIN_WORKLOAD_FILE = "workload.jsonl.zst", "workload.jsonl"
BUNDLED_WORKLOAD_FILE = "workload.jsonl.gz"  # a bundle's; also what runs wrote before the file was packed with zstd
# Zstandard level 3, not gzip: a 2,000-request workload (16 MB) took 0.35 s to gzip at level 1 (to 6.0 MB), part of
# every run's CPU, and 0.03 s here (to 0.7 MB): its window (megabytes, not gzip's 32 KB) reaches the previous turn's
# history and the shared prefixes.
_LEVEL = 3
# Bodies made when sent (a trace's) are written for this many requests, the first in order, and the rest without
# one: writing a 100,000-row trace's took 27 s and 250 MB before the first request (benchmarks/trace_scale.py).
# The profile and the trace rebuild the rest byte for byte.
DEFERRED_BODIES_WRITTEN = 20_000
# And no more than this many prompt tokens of them: an agent trace's requests each hold the agent's whole history
# (thousands of tokens), so 20,000 of them were 80 million tokens to make and compress before the first request.
DEFERRED_PROMPT_TOKENS_WRITTEN = 20_000_000
_BUFFER = 1 << 20


def bodies_written(workload: Workload) -> int:
    """How many of the workload's requests its file gives with their body (the first ones)."""
    requests = workload.requests
    if not any(isinstance(r.body, Deferred) for r in requests[:1]):
        return len(requests)
    tokens = 0
    for count, r in enumerate(requests[:DEFERRED_BODIES_WRITTEN]):
        tokens += r.expected_prompt_tokens
        if tokens > DEFERRED_PROMPT_TOKENS_WRITTEN:
            return count
    return min(len(requests), DEFERRED_BODIES_WRITTEN)


def write_workload(workload: Workload, path: Path, engine_warmups: tuple[PlannedRequest, ...] = ()) -> Path:
    """One JSON line describing the workload, then one per request in conversation and turn order, with its body
    (a trace's: the first DEFERRED_BODIES_WRITTEN; the header says how many) and the headers sent with it ([workload]
    session_header), then one per warm-up sent before the load, with its body: the engine's ([load]
    warmup_requests, `engine_warmup`), then a mid-trajectory start's (`warmup`), in the order the run sent them.
    Plain text (compress_workload packs it). Written beside `path` and renamed to it when whole: a process killed
    while writing leaves no half file."""
    partial = path.with_name(path.name + ".partial")
    with partial.open("wb", buffering=_BUFFER) as out:
        _write(workload, out, engine_warmups)
    partial.replace(path)
    return path


def compress_workload(plain: Path) -> Path:
    """workload.jsonl compressed beside it (workload.jsonl.zst), then removed: a run writes the plain file before
    its load and compresses it once its verdict is out, so that neither its first request nor its verdict waits on
    the compression (0.03 s for 2,000 requests; gzip took ten times as long, and on a thread during the load it held
    the GIL often enough to delay the streams' clocks). A kill in between leaves one whole file or the other."""
    packed = plain.with_name(plain.name + ".zst")
    partial = packed.with_name(packed.name + ".partial")
    with plain.open("rb") as source, partial.open("wb") as out:
        zstandard.ZstdCompressor(level=_LEVEL).copy_stream(source, out, read_size=_BUFFER, write_size=_BUFFER)
    partial.replace(packed)
    plain.unlink()
    return packed


def workload_file(run_dir: Path) -> Path | None:
    """A run directory's workload file: workload.jsonl.zst, workload.jsonl when the run was killed before it
    compressed it, or an older run's workload.jsonl.gz; None when it has none."""
    names = (WORKLOAD_FILE, PLAIN_WORKLOAD_FILE, BUNDLED_WORKLOAD_FILE)
    return next((p for p in (run_dir / name for name in names) if p.exists()), None)


def open_workload_bytes(path: Path) -> IO[bytes]:
    """Its plain bytes, whichever of the three it is."""
    if path.suffix == ".zst":
        return cast(IO[bytes], zstandard.open(path, "rb"))
    return cast(IO[bytes], gzip.open(path, "rb")) if path.suffix == ".gz" else path.open("rb")


def open_workload(path: Path) -> IO[str]:
    """Its lines as text, whichever of the three it is."""
    return io.TextIOWrapper(open_workload_bytes(path), encoding="utf-8")


def _headed(line: dict[str, Any], request: PlannedRequest) -> dict[str, Any]:
    """The line with the headers its request was sent with, when it had any ([name, value] pairs)."""
    return {**line, "headers": [list(h) for h in request.headers]} if request.headers else line


def _write(workload: Workload, out: IO[bytes], engine_warmups: tuple[PlannedRequest, ...]) -> None:
    requests, written = workload.requests, bodies_written(workload)
    header = {"type": "workload", "schema": SCHEMA, "kind": workload.kind, "api": workload.api,
              "seed": workload.seed, "faker_version": workload.faker_version,
              "calibration_source": workload.calibration_source, "requests": len(requests), "bodies": written}
    out.write(orjson.dumps(header) + b"\n")
    spawners = {c.index: c.spawned_by for c in workload.conversations if c.spawned_by is not None}
    for i, r in enumerate(requests):
        line = {"type": "request", "conversation": r.conversation, "turn": r.turn, "arrival_s": r.arrival_s,
                "delay_s": r.delay_s,
                "expected_prompt_tokens": r.expected_prompt_tokens, "max_tokens": r.max_tokens,
                "shared_prefix_tokens": r.shared_prefix_tokens}
        if r.joins:  # agent trees: the subagents (conversations) that end before it is sent
            line["joins"] = list(r.joins)
        if r.turn == 1 and r.conversation in spawners:  # a subagent: after the turn that spawned it answered
            line["spawned_by"] = list(spawners[r.conversation])
        if i < written:
            line["body"] = wire_body(workload.api, r.payload(), None)
        out.write(orjson.dumps(_headed(line, r)) + b"\n")
    for kind, warmups in (("engine_warmup", engine_warmups), ("warmup", workload.warmups)):  # sent first, not judged
        for w in warmups:
            out.write(orjson.dumps(_headed({"type": kind, "conversation": w.conversation,
                                            "body": wire_body(workload.api, w.payload(), None)}, w)) + b"\n")
