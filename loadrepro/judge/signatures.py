"""The catalog of engine error texts: pattern -> (name, class), for response bodies, SSE errors and log lines.

Classes: F fatal engine death, P permanently infeasible (must be rejected at admission), T temporary pressure
(waiting or retrying is correct), R graceful rejection. TensorRT-LLM reports fatal engine errors as HTTP 400, so
the text, not the status, decides what a failed request was.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import datetime
from enum import StrEnum

from loadrepro.config.profile import Profile


class SignatureClass(StrEnum):
    FATAL = "F"
    NEVER_FITS = "P"
    TEMPORARY = "T"
    REJECTION = "R"


@dataclass(frozen=True, slots=True)
class Signature:
    name: str
    pattern: re.Pattern[str]
    klass: SignatureClass
    engine: str
    cause: str = ""
    propagation: bool = False  # a consequence of another process's failure (hard-kills, broadcasts), not the cause
    throttling: bool = False  # a refusal to retry later (the engine is busy), inside a stream as much as in a 429
    # A gateway's word that it could not reach the engine behind it: one is a failed request; every request failing
    # with it, none succeeding, is the engine's death as a client behind the gateway can tell (judge/death.py).
    upstream: bool = False


def _sig(name: str, pattern: str, klass: str, engine: str, cause: str = "", propagation: bool = False,
         throttling: bool = False, upstream: bool = False) -> Signature:
    return Signature(name, re.compile(pattern), SignatureClass(klass), engine, cause, propagation, throttling,
                     upstream)


INPUT_TRUNCATED = "llamacpp-input-truncated"  # a log line saying a prompt was cut: rule prompt_truncated reads it

# Order matters: the first match names a text, so specific patterns come before generic ones.
CATALOG: tuple[Signature, ...] = (
    _sig("trtllm-blocks-exhausted", r"Available blocks exhausted", "F", "TensorRT-LLM",
         "the KV pool ran out mid-allocation: admission did not reserve blocks for prompt + output (x beams)"),
    _sig("trtllm-page-indices-too-short", r"User-provided base page indices is too short", "F", "TensorRT-LLM",
         "a sequence outgrew the page-index table, which was sized from a memory-clamped length"),
    _sig("trtllm-history-exceeds-capacity", r"History length cannot exceed capacity", "F", "TensorRT-LLM",
         "a sequence grew past the capacity its KV cache was created with"),
    _sig("trtllm-draft-resume-failed", r"Failed to resume draft KV cache for request \d+", "F", "TensorRT-LLM",
         "the draft/indexer pool could not take back a resumed request: admission counted the primary pool only"),
    _sig("trtllm-draft-resize-failed",
         r"Draft KV cache context resize failed for request \d+: could not resize to \d+ tokens", "F",
         "TensorRT-LLM", "the draft/indexer pool, which mirrors every token without prefix reuse, could not grow: "
         "admission counted the primary pool only"),
    _sig("trtllm-executor-crashed", r"Executor loop crashed on this rank; hard-killing all \d+ ranks", "F",
         "TensorRT-LLM", "the executor loop died and took every rank down", propagation=True),
    _sig("trtllm-hang-detected", r"Hang detected on rank \d+ in PyExecutor|HangDetector|MPI_Abort", "F",
         "TensorRT-LLM", "a rank was hard-killed after another one failed", propagation=True),
    _sig("trtllm-broadcast-error", r"Broadcasting event-loop error to \d+ pending request\(s\)", "F",
         "TensorRT-LLM", "every pending request was failed with the loop's error", propagation=True),
    _sig("trtllm-unavailable", r"LLM is unavailable", "F", "TensorRT-LLM",
         "the server front end outlived its engine and answers 503", propagation=True),
    _sig("trtllm-request-exceeds-capacity",
         r"Request requires \d+ (?:draft )?KV cache blocks to complete, which exceeds the (?:total|draft pool) "
         r"capacity of \d+ blocks", "P", "TensorRT-LLM"),
    _sig("trtllm-exceeds-max-seq-len", r"must be less than max sequence length", "P", "TensorRT-LLM"),
    _sig("page-index-exceeds-table", r"Request requires \d+ page-index entries to complete", "P", "loadrepro sim"),
    _sig("vllm-context-length", r"maximum context length is \d+ tokens", "R", "vLLM"),
    _sig("vllm-longer-than-max-model-len", r"is longer than the maximum model length", "R", "vLLM"),
    _sig("vllm-max-tokens-too-large", r"'max_tokens' or 'max_completion_tokens' is too large", "R", "vLLM"),
    _sig("vllm-preempted", r"is preempted by PreemptionMode\.RECOMPUTE", "T", "vLLM",
         "the KV pool was short, so a request was preempted and will be recomputed"),
    _sig("vllm-engine-dead", r"EngineDeadError|EngineCore encountered an issue", "F", "vLLM",
         "the engine core process died; the API server fails every request", propagation=True),
    _sig("vllm-no-cache-memory", r"No available memory for the cache blocks", "F", "vLLM"),
    _sig("vllm-engine-busy", r"The engine is currently busy", "T", "vLLM", throttling=True),
    _sig("sglang-retract", r"KV cache pool is full\. Retract requests\.", "T", "SGLang",
         "the KV pool was full, so requests were retracted and will run again"),
    _sig("sglang-prefill-oom", r"Prefill out of memory", "F", "SGLang",
         "the scheduler admitted a prefill the token pool could not hold"),
    _sig("sglang-exceeds-max-length", r"exceeds the maximum allowed length", "P", "SGLang"),
    _sig("sglang-longer-than-context", r"is longer than the model's context length", "R", "SGLang"),
    _sig("llamacpp-exceeds-context", r"the request exceeds the available context size|exceed_context_size_error",
         "P", "llama.cpp"),
    _sig("llamacpp-no-kv-slot", r"failed to find free space in the KV cache|failed to find a memory slot for batch",
         "T", "llama.cpp"),
    _sig("llamacpp-context-exceeded", r"Context size has been exceeded|decode\(\) failed", "T", "llama.cpp"),
    _sig("llamacpp-context-shift-disabled", r"context shift is disabled", "P", "llama.cpp"),
    _sig(INPUT_TRUNCATED, r"input truncated", "P", "llama.cpp",
         "a prompt longer than a slot's context was cut and answered, where it should have been refused"),
    # Gateways and proxies in front of an engine (LiteLLM, the OpenAI client's wording, Envoy, nginx, HAProxy).
    _sig("gateway-upstream-connection", r"APIConnectionError|Exception - Connection error|\bConnection error\.",
         "T", "gateway", "the gateway could not connect to the engine behind it", upstream=True),
    _sig("proxy-no-healthy-upstream", r"no healthy upstream|upstream connect error", "T", "proxy",
         "the proxy had no engine to send the request to", upstream=True),
    _sig("proxy-bad-gateway", r"502 Bad Gateway|504 Gateway Time-?out|503 Service (?:Temporarily )?Unavailable",
         "T", "proxy", "the proxy's page for an engine that did not answer", upstream=True),
)


def compile_catalog(extra: Iterable[tuple[str, str, str] | tuple[str, str, str, bool]] = ()) -> tuple[Signature, ...]:
    """The catalog with user signatures (name, pattern, class[, throttling]) first, so they can refine built-in
    ones; they behave exactly like built-in ones everywhere, since records and log matches keep the class."""
    return tuple(_sig(name, pattern, klass, "profile", throttling=bool(rest and rest[0]))
                 for name, pattern, klass, *rest in extra) + CATALOG


def profile_catalog(profile: Profile) -> tuple[Signature, ...]:
    """The catalog with the profile's own signatures ([[signatures]]) first."""
    return compile_catalog((s.name, s.pattern, s.class_, s.throttling) for s in profile.signatures)


def match(text: str, catalog: tuple[Signature, ...] = CATALOG) -> Signature | None:
    for signature in catalog:
        if signature.pattern.search(text):
            return signature
    return None


def union(catalog: tuple[Signature, ...] = CATALOG) -> re.Pattern[str]:
    """One pattern for the whole catalog: a line is scanned once; `lastgroup` ("s<i>") names the entry."""
    return re.compile("|".join(f"(?P<s{i}>{s.pattern.pattern})" for i, s in enumerate(catalog)))


# Words at least one of which is in every catalog entry's text: a line with none cannot match, which lets a large
# log skip the full pattern for almost every line (tests check each catalog entry's real message has one).
PREFILTER = ("exhausted", "indices", "History length", "KV cache", "Executor loop", "Hang detected",
             "HangDetector", "MPI_Abort", "Broadcasting", "unavailable", "Request requires", "sequence length",
             "context length", "model length", "max_tokens", "preempted", "EngineDeadError", "EngineCore",
             "No available memory", "currently busy", "Prefill out of memory", "allowed length", "context size",
             "Context size",
             "exceed_context_size_error", "memory slot", "decode() failed", "context shift", "Connection",
             "upstream", "Gateway", "Service", "input truncated")


def may_match(line: str) -> bool:
    return any(word in line for word in PREFILTER)


# "2026-11-30 06:04:23.220" / "2026-11-30T06:04:23,220" (simulated engine, SGLang, many loggers) and vLLM's
# "11-30 06:04:23" (year implied), all in the machine's local time.
_ISO = re.compile(r"(\d{4})-(\d\d)-(\d\d)[ T](\d\d):(\d\d):(\d\d)(?:[.,](\d{1,6}))?")
_VLLM = re.compile(r"^(?:[A-Z]+\s+)?(\d\d)-(\d\d) (\d\d):(\d\d):(\d\d)")
_TRT = re.compile(r"\[(\d\d)/(\d\d)/(\d{4})-(\d\d):(\d\d):(\d\d)\]")  # TensorRT-LLM: [11/30/2026-06:04:23]


def line_time(line: str, year: int) -> float | None:
    """The wall-clock time a log line says it was written, when it says so near its start."""
    head = line[:64]
    found = _ISO.search(head)
    if found:
        y, mo, d, h, mi, s, frac = found.groups()
        micro = int((frac or "0").ljust(6, "0"))
        return datetime(int(y), int(mo), int(d), int(h), int(mi), int(s), micro).timestamp()
    found = _TRT.search(head)
    if found:
        mo, d, y, h, mi, s = (int(x) for x in found.groups())
        return datetime(y, mo, d, h, mi, s).timestamp()
    found = _VLLM.search(head)
    if found:
        mo, d, h, mi, s = (int(x) for x in found.groups())
        return datetime(year, mo, d, h, mi, s).timestamp()
    return None
