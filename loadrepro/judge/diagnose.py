"""Engine-log analysis: first signatures, the initiating process versus collateral failures, the capacity figures
the engine logged, and the next step. Streams each file once, in constant memory.

A process is what a line's tag names (TensorRT-LLM `[RANK n]`, vLLM `(EngineCore_DP0 pid=…)` /
`(VllmWorker rank=n pid=…)`, SGLang `TP0` / `DP0 TP1`), else its file (several files: several ranks). The
initiating process is the one whose failure is a cause (not a hard-kill, abort or broadcast that only passes
another's failure on) and comes first: by the lines' own timestamps where they have them, else in reading order.
"""

from __future__ import annotations

import json
import re
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

from loadrepro.config.capacity import KvConfig, capacity, parse_size
from loadrepro.errors import UsageError
from loadrepro.judge.signatures import CATALOG, Signature, SignatureClass, line_time, may_match, union
from loadrepro.records import FAILED, read_jsonl

CONTEXT_LINES = 100
_PROCESS = (
    re.compile(r"\[RANK (\d+)\]"),
    re.compile(r"\((EngineCore(?:_DP\d+)?|VllmWorker(?: rank=\d+)?|Worker_TP\d+) pid=\d+\)"),
    re.compile(r"\b((?:DP\d+ )?TP\d+)\]"),
)
_TRT_SPLIT = re.compile(r"Splitting KV cache max_gpu_total_bytes:(.*)")
# One field of that line, in any order: `name=SIZE`, with `(N bytes/token)` after it for the target and draft sides.
_SPLIT_FIELD = re.compile(r"\b(\w+)=([\d.,]+(?:\s*[KMGT]?i?B\b)?)(?:\s*\(([\d,]+)\s*bytes/token\))?")
_KEY_VALUES = re.compile(r"\b(tokens_per_block|max_num_tokens|max_batch_size|max_seq_len|max_beam_width)=(\d+)")
_VLLM_KV = re.compile(r"KV cache size: ([\d,]+) tokens")
_VLLM_CONCURRENCY = re.compile(r"Maximum concurrency for ([\d,]+) tokens per request: ([\d.]+)x")
_RESIZE = re.compile(r"could not resize to (\d+) tokens")
_SIM_POOLS = re.compile(r"KV pools: primary (\d+) blocks x (\d+) tokens, draft (\d+) blocks, beam width (\d+), "
                        r"max_model_len (\d+)")
_FIGURE_WORDS = ("bytes/token", "=", "KV cache size", "Maximum concurrency", "could not resize", "KV pools:")
_WARN = re.compile(r"\bWARN(?:ING)?\b|\[W\]")


@dataclass(frozen=True, slots=True)
class Occurrence:
    signature: str
    klass: str
    cause: str
    file: str
    line: int  # its number in the file, from 1
    timestamp: str | None
    process: str
    text: str


@dataclass(slots=True)
class Diagnosis:
    files: list[str]
    lines: int = 0
    first: dict[str, Occurrence] = field(default_factory=dict)  # signature -> its first occurrence
    counts: dict[str, int] = field(default_factory=dict)
    start_line: str | None = None
    first_warn: Occurrence | None = None
    context: list[str] = field(default_factory=list)  # up to 100 lines before the first fatal line
    initiating: Occurrence | None = None
    collateral: list[Occurrence] = field(default_factory=list)  # each other process's first fatal line
    figures: dict[str, float] = field(default_factory=dict)
    capacity: str = ""  # what the figures say of the KV pools
    next_step: str = ""
    verification: str = ""
    # The run's own requests (a run's diagnosis): signature -> requests that ended with its text, and of those the
    # ones that failed (HTTP 5xx, a stream error...): a text a failed request carried is a failure, whatever its class.
    requests: dict[str, int] = field(default_factory=dict)
    failed_requests: dict[str, int] = field(default_factory=dict)
    engine: str = ""  # the engine the signatures are of (llama.cpp, vLLM...): whose flags the next step names
    run_reasons: list[str] = field(default_factory=list)  # a run that failed: why (report.json's reasons)
    no_log: str = ""  # a run diagnosed from its requests alone: why no engine log was read

    @property
    def fatal(self) -> bool:
        return any(o.klass == SignatureClass.FATAL.value for o in self.first.values())

    @property
    def failed(self) -> bool:
        """The engine failed: a fatal line, a request that failed with a known text, or the run's own verdict."""
        return self.fatal or bool(self.failed_requests) or bool(self.run_reasons)

    @property
    def pressure_only(self) -> bool:
        return (bool(self.first) and not self.failed
                and all(o.klass == SignatureClass.TEMPORARY.value for o in self.first.values()))


_FAILED = frozenset(o.value for o in FAILED)  # an outcome as records and requests.jsonl spell it


def request_signatures(ended: Iterable[tuple[str | None, str]]) -> tuple[dict[str, int], dict[str, int]]:
    """Of requests as (signature, outcome): per signature, how many ended with its text, and how many of those
    failed. One definition for the run's report and for `loadrepro diagnose RUN_DIR`."""
    every: dict[str, int] = {}
    failed: dict[str, int] = {}
    for signature, outcome in ended:
        if signature:
            every[signature] = every.get(signature, 0) + 1
            if outcome in _FAILED:
                failed[signature] = failed.get(signature, 0) + 1
    return every, failed


def _process(line: str, file_label: str) -> str:
    for pattern in _PROCESS:
        found = pattern.search(line)
        if found:
            return f"rank {found.group(1)}" if pattern is _PROCESS[0] else found.group(1)
    return file_label


def _figures(line: str, figures: dict[str, float]) -> None:
    found = _TRT_SPLIT.search(line)
    if found:
        _split_figures(found.group(1), figures)
    for key, value in _KEY_VALUES.findall(line):
        figures[key] = float(value)
    if (found := _VLLM_KV.search(line)) is not None:
        figures["kv_cache_tokens"] = float(found.group(1).replace(",", ""))
    if (found := _VLLM_CONCURRENCY.search(line)) is not None:
        figures["request_tokens"] = float(found.group(1).replace(",", ""))
        figures["max_concurrency"] = float(found.group(2))
    if (found := _SIM_POOLS.search(line)) is not None:
        for key, value in zip(("pool_blocks", "tokens_per_block", "draft_blocks", "max_beam_width", "max_seq_len"),
                              found.groups()):
            figures[key] = float(value)
    if (found := _RESIZE.search(line)) is not None:
        figures["failed_resize_tokens"] = max(figures.get("failed_resize_tokens", 0.0), float(found.group(1)))


def _split_figures(fields: str, figures: dict[str, float]) -> None:
    """TensorRT-LLM's split of one KV budget between the target model and its draft, e.g. `total=60.51 GiB,
    target=59.38 GiB (49968 bytes/token), draft=1.53 GiB (1284 bytes/token)`, or without `target=`, with the
    target's bytes per token after `total=`. The capacity model splits `total` itself, by bytes per token."""
    for name, size, per_token in _SPLIT_FIELD.findall(fields):
        side = {"total": "", "target": "target_", "draft": "draft_"}.get(name.lower())
        if side is None:
            continue
        figures["pool_bytes" if side == "" else f"{side}pool_bytes"] = float(parse_size(size.replace(",", "")))
        if per_token:
            key = "draft_bytes_per_token" if side == "draft_" else "bytes_per_token"
            if side != "" or key not in figures:  # a target= figure wins over one after total=
                figures[key] = float(per_token.replace(",", ""))


class _Reader:
    """One pass over the files: first occurrences, the fatal context, the processes' first fatal lines."""

    def __init__(self, catalog: tuple[Signature, ...]) -> None:
        self.catalog, self.pattern = catalog, union(catalog)
        self._prefilter = catalog[-len(CATALOG):] == CATALOG and len(catalog) == len(CATALOG)  # no user patterns
        self.year = datetime.now().year
        self.diagnosis = Diagnosis([])
        self._recent: deque[str] = deque(maxlen=CONTEXT_LINES)
        self._fatal_by_process: dict[str, tuple[tuple[bool, float, int, int], Occurrence]] = {}
        self._contexts: dict[str, tuple[bool, list[str]]] = {}  # file -> (before a propagation line?, lines)
        self._starts: dict[Path, str] = {}
        self._warns: dict[Path, Occurrence] = {}

    def read(self, path: Path, label: str, order: int) -> None:
        d = self.diagnosis
        d.files.append(str(path))
        self._recent = deque(maxlen=CONTEXT_LINES)
        try:
            handle = path.open("r", encoding="utf-8", errors="replace")
        except OSError as exc:
            raise UsageError(f"cannot read {path}: {exc.strerror}") from exc
        with handle:
            for number, raw in enumerate(handle, 1):
                self._line(raw.rstrip("\r\n"), path, label, order, number)

    def _line(self, line: str, path: Path, label: str, order: int, number: int) -> None:
        d = self.diagnosis
        d.lines += 1
        if path not in self._starts and line.strip():
            self._starts[path] = line
        if any(word in line for word in _FIGURE_WORDS):
            _figures(line, d.figures)
        found = self.pattern.search(line) if not self._prefilter or may_match(line) else None
        if found is None:
            if path not in self._warns and _WARN.search(line):
                self._warns[path] = self._occurrence(None, line, path, label, number)
            self._recent.append(line)
            return
        signature = self.catalog[int(found.lastgroup[1:])]  # type: ignore[index]
        occurrence = self._occurrence(signature, line, path, label, number)
        d.counts[signature.name] = d.counts.get(signature.name, 0) + 1
        d.first.setdefault(signature.name, occurrence)
        if path not in self._warns and (_WARN.search(line) or signature.klass is SignatureClass.TEMPORARY):
            self._warns[path] = occurrence
        if signature.klass is SignatureClass.FATAL:
            kept = self._contexts.get(occurrence.file)
            if kept is None or (kept[0] and not signature.propagation):  # prefer the lines before a cause
                self._contexts[occurrence.file] = (signature.propagation, list(self._recent))
            when = line_time(line, self.year)
            key = (signature.propagation, when if when is not None else float("inf"), order, number)
            best = self._fatal_by_process.get(occurrence.process)
            if best is None or key < best[0]:
                self._fatal_by_process[occurrence.process] = (key, occurrence)
        self._recent.append(line)

    def _occurrence(self, signature: Signature | None, line: str, path: Path, label: str, number: int) -> Occurrence:
        when = line_time(line, self.year)
        stamp = datetime.fromtimestamp(when).isoformat(sep=" ", timespec="milliseconds") if when else None
        return Occurrence(signature.name if signature else "", signature.klass.value if signature else "",
                          signature.cause if signature else "", str(path), number, stamp, _process(line, label),
                          line[:1000])

    def finish(self) -> Diagnosis:
        d = self.diagnosis
        ranked = sorted(self._fatal_by_process.values(), key=lambda kv: kv[0])
        if ranked:
            d.initiating = ranked[0][1]
            d.collateral = [o for _, o in ranked[1:]]
            d.context = self._contexts[d.initiating.file][1]
        # The fingerprint is the initiating file's (else the first file's): its start, first warning, symptom.
        where = Path(d.initiating.file) if d.initiating else (Path(d.files[0]) if d.files else None)
        d.start_line = self._starts.get(where) if where else None
        d.first_warn = self._warns.get(where) if where else None
        return d


def _capacity_verdict(d: Diagnosis) -> str:
    f = d.figures
    if "pool_bytes" in f and "tokens_per_block" in f:
        # "total" is the whole budget, which the draft cache shares (each side gets the same token count)
        kv = KvConfig(int(f["bytes_per_token"]), int(f["tokens_per_block"]), int(f["pool_bytes"]),
                      int(f.get("max_seq_len", f.get("max_num_tokens", f.get("failed_resize_tokens", 1)))),
                      int(f.get("max_batch_size", 1)), int(f.get("max_beam_width", 1)),
                      int(f.get("draft_bytes_per_token", 0)))
        cap = capacity(kv)
        words = (f"{cap.pool_tokens:,} tokens in the primary pool ({int(f['bytes_per_token']):,} B/token)"
                 + (f" and {cap.draft_pool_tokens:,} in the draft pool ({int(f['draft_bytes_per_token']):,} B/token)"
                    if cap.draft_pool_tokens is not None else ""))
        failed = f.get("failed_resize_tokens")
        if failed is not None:
            limit = min(cap.pool_tokens, cap.draft_pool_tokens or cap.pool_tokens)
            kind = "a request that can never fit" if failed > limit else (
                "temporary pressure (it fits alone, not beside the others)")
            return f"{words}; the failed resize to {int(failed):,} tokens was {kind}"
        return f"{words}; {cap.verdict.words}: {cap.why}"
    if "pool_blocks" in f and "tokens_per_block" in f:
        pool = int(f["pool_blocks"] * f["tokens_per_block"]) // int(f.get("max_beam_width", 1))
        draft = int(f.get("draft_blocks", 0) * f["tokens_per_block"]) or None
        words = f"{pool:,} tokens in the primary pool" + (f" and {draft:,} in the draft pool" if draft else "")
        failed = f.get("failed_resize_tokens")
        if failed is not None:
            limit = min(pool, draft or pool)
            kind = "a request that can never fit" if failed > limit else (
                "temporary pressure (it fits alone, not beside the others)")
            return f"{words}; the failed resize to {int(failed):,} tokens was {kind}"
        return words
    if "kv_cache_tokens" in f:
        words = f"KV cache of {int(f['kv_cache_tokens']):,} tokens"
        if "max_concurrency" in f:
            fits = f["max_concurrency"] >= 1
            words += (f"; {f['max_concurrency']:.2f}x concurrency for {int(f['request_tokens']):,}-token requests: "
                      + ("temporary pressure when more run at once" if fits else "such a request can never fit"))
        return words
    return ""


# What gives each engine's KV pool room, in its own flags: what the next step names for the engine the signatures
# are of (research: real-engine-llamacpp.md, real-engine-vllm-cpu.md).
KV_FLAGS = {
    "llama.cpp": ("llama-server's slots share one KV pool when it runs unified (`-kvu/--kv-unified`, the default "
                  "when `-np/--parallel` is not given), and no request is checked against what the others hold: "
                  "give each slot its own context (`-np N --no-kv-unified`, `-c/--ctx-size` = N x the longest "
                  "prompt + max_tokens), or raise `-c/--ctx-size`, or send fewer at once than the pool holds "
                  "(ggml-org/llama.cpp#23652)"),
    "vLLM": ("raise `--gpu-memory-utilization` (on CPU, `VLLM_CPU_KVCACHE_SPACE` in GiB), or lower "
             "`--max-num-seqs` or `--max-model-len`"),
    "SGLang": "raise `--mem-fraction-static`, or lower `--max-running-requests`",
    "TensorRT-LLM": ("raise `--kv_cache_free_gpu_memory_fraction` (`kv_cache_config: free_gpu_memory_fraction` in "
                     "the config file), or lower `--max_batch_size` or `--max_num_tokens`"),
}
_ANY_ENGINE = "raise the KV memory fraction or lower concurrency"


def _engine_of(d: Diagnosis, catalog: tuple[Signature, ...]) -> str:
    """The engine the signatures are of: the failed requests' first, then the log's, by their catalog entries."""
    engines = {s.name: s.engine for s in catalog}
    named = [*d.failed_requests, *d.requests, *(n for n, _ in sorted(d.first.items(), key=lambda kv: kv[1].line))]
    return next((engines[n] for n in named if engines.get(n) in KV_FLAGS), "")


def _failed_words(d: Diagnosis) -> str:
    return ", ".join(f"{n:,} with `{name}`" for name, n in sorted(d.failed_requests.items(), key=lambda kv: -kv[1]))


def _next_step(d: Diagnosis, catalog: tuple[Signature, ...]) -> str:
    flags = KV_FLAGS.get(d.engine, _ANY_ENGINE)
    never_fits = {s.name for s in catalog if s.klass is SignatureClass.NEVER_FITS}
    if d.fatal:
        return ("The engine died under KV pressure instead of making requests wait or rejecting them. Fix admission: "
                "reserve prompt + max_tokens (x beams) in every KV pool, including draft/indexer pools, queue what "
                f"does not fit yet and reject at admission what never can. Until then: {flags}.")
    if d.failed_requests:
        return (f"Requests failed with the engine's own error text ({_failed_words(d)}): a failure, not pressure. "
                "An engine short of KV must make a request wait, or refuse one that can never fit with a clean "
                f"4xx. To give it room: {flags}.")
    if d.run_reasons:
        return "The run failed (" + "; ".join(d.run_reasons) + "), and the engine log names no cause."
    if any(o.klass == SignatureClass.NEVER_FITS.value for o in d.first.values()) or never_fits & set(d.requests):
        return "Requests that can never fit were refused: correct, if clean. Shorten them or give the engine more KV."
    if d.pressure_only:
        return ("Pressure, not failure: the engine waited, preempted or retracted and went on. If latency matters: "
                f"{flags}.")
    return "No known failure signature."


def diagnose(paths: Iterable[Path], catalog: tuple[Signature, ...] = CATALOG, verification: str = "",
             ended: Iterable[tuple[str | None, str]] = (), run_reasons: Iterable[str] = (),
             no_log: str = "") -> Diagnosis:
    """Analyse one or more logs (several files: several ranks, labelled by file name), beside the run's requests
    as (signature, outcome) when there is a run, and the reasons it failed. A run without an engine log (`no_log`
    says why) is diagnosed from its requests alone."""
    paths = list(paths)
    if not paths and not no_log:
        raise UsageError("diagnose needs a log file or a run directory")
    reader = _Reader(catalog)
    for order, path in enumerate(paths):
        reader.read(path, path.name if len(paths) > 1 else "engine", order)
    d = reader.finish()
    d.requests, d.failed_requests = request_signatures(ended)
    d.run_reasons = list(run_reasons)
    d.no_log = no_log
    d.engine = _engine_of(d, catalog)
    d.capacity = _capacity_verdict(d)
    d.next_step = _next_step(d, catalog)
    d.verification = verification
    return d


def verification_for(run_dir: Path, engine_cmd: str | None = None) -> str:
    """The command that repeats a run's input against a changed engine; the signature must then be gone."""
    report = run_dir / "report.json"
    if engine_cmd is None and report.exists():
        engine_cmd = json.loads(report.read_text()).get("target", {}).get("engine_cmd")
    engine = engine_cmd or ""
    profile = run_dir / "profile.toml"
    if "loadrepro sim" in engine or " -m loadrepro sim " in engine:
        return f"loadrepro ab --profile {profile}  (stock vs patched simulated engine; exit 0 when the fix holds)"
    return (f"loadrepro ab --profile {profile} --stock-cmd '<stock engine>' --patched-cmd '<patched engine>'; "
            "then loadrepro diagnose on the patched run must exit 0")


@dataclass(frozen=True, slots=True)
class Logs:
    """What `loadrepro diagnose` reads for the paths it was given: the logs, how to verify a fix, and for a run
    directory its requests as (signature, outcome) and why it failed."""

    paths: list[Path]
    verification: str
    ended: list[tuple[str | None, str]] = field(default_factory=list)
    run_reasons: list[str] = field(default_factory=list)
    no_log: str = ""  # a run directory without an engine log: why, and that its requests alone are read


def logs_of(target: Path) -> Logs:
    """The logs to read for a path given on the command line, and how to verify a fix for that run. A run against
    an engine loadrepro did not start (--base-url) has no engine log: its requests, which carry the engine's error
    texts, are read alone."""
    if target.is_dir():
        log, requests = target / "engine.log", target / "requests.jsonl"
        if not log.exists() and not requests.exists():
            raise UsageError(f"{target} has neither engine.log nor requests.jsonl: not a run directory")
        return Logs([log] if log.exists() else [], verification_for(target), _ended(requests),
                    _run_reasons(target), "" if log.exists() else _why_no_log(target))
    if not target.exists():
        raise UsageError(f"no such log: {target}")
    return Logs([target], ("loadrepro ab --profile PROFILE --stock-cmd '<stock engine>' --patched-cmd "
                           "'<patched engine>' with the input that produced this log; loadrepro diagnose on the "
                           "patched engine's log must then exit 0"))


def _why_no_log(run_dir: Path) -> str:
    """Why a run directory has no engine log: loadrepro keeps one only of an engine it started."""
    report = run_dir / "report.json"
    target = json.loads(report.read_text()).get("target", {}) if report.exists() else {}
    started = target.get("engine_cmd")
    where = (f"the run was against --base-url {target['base_url']}, an engine loadrepro did not start"
             if target.get("base_url") and not started else "the run directory has none")
    return (f"No engine log read: {where}, so it kept none. The run's requests, which carry the engine's error "
            "texts, are read alone (`loadrepro diagnose LOG` reads the engine's own log)")


def _ended(requests: Path) -> list[tuple[str | None, str]]:
    if not requests.exists():
        return []
    return [(row.get("signature"), row["outcome"]) for row in read_jsonl(requests)
            if row.get("kind", "request") == "request" and "outcome" in row]


def _run_reasons(run_dir: Path) -> list[str]:
    """Why the run failed, as its report says: a failed run is not diagnosed as one that went well."""
    report = run_dir / "report.json"
    if not report.exists():
        return []
    data = json.loads(report.read_text())
    return [str(r) for r in data.get("reasons", [])] if data.get("verdict") == "fail" else []


_NOTABLE = re.compile(r"(?i)\bwarn(?:ing)?\b|\berror\b|\bfail(?:ed|ure)?\b|\bexceed(?:ed|s)?\b|\[[WE]\]")
_NUMBER = re.compile(r"0x[0-9a-fA-F]+|\d+(?:[.,]\d+)*")


@dataclass(frozen=True, slots=True)
class LogDigest:
    """An engine log as its maintainer first reads it: its last lines, and the warnings and errors it repeated,
    each distinct line (its numbers made `N`) with how often it came."""

    tail: list[str]
    repeated: list[tuple[str, int]]  # most frequent first
    lines: int


def normalised(line: str) -> str:
    """A log line with its numbers (sizes, ids, times, addresses) made `N`: one warning however its numbers vary."""
    return _NUMBER.sub("N", line.strip())


def log_digest(path: Path, tail: int = 40, top: int = 10, catalog: tuple[Signature, ...] = CATALOG) -> LogDigest:
    """The last `tail` lines and the `top` most repeated warnings and errors of a log, in one pass and bounded
    memory (the distinct lines counted are capped)."""
    last: deque[str] = deque(maxlen=tail)
    counts: dict[str, int] = {}
    pattern, lines = union(catalog), 0
    with path.open("r", encoding="utf-8", errors="replace") as handle:
        for raw in handle:
            line = raw.rstrip("\r\n")
            lines += 1
            last.append(line)
            if _NOTABLE.search(line) or pattern.search(line):
                key = normalised(line)[:300]
                if key in counts or len(counts) < 10_000:
                    counts[key] = counts.get(key, 0) + 1
    ranked = sorted(counts.items(), key=lambda kv: -kv[1])[:top]
    return LogDigest(list(last), ranked, lines)
