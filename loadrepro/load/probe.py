"""What loadrepro can see of an engine before anyone spends an hour on a run: its models and context length, how
tokens can be counted, its health and metrics endpoints, whether streams report usage and cached tokens, which
engine it is (with the evidence), and so what a run will and will not be able to judge.

The probe sends little, and nothing a run could benefit from: GETs, tokenize calls of two words, two one-token
generations whose shared prefix starts with a random salt, so that no run's prefix is ever cached by it, and one
salted one-token request to each API (chat, completions, responses, messages) to see which answer.
"""

from __future__ import annotations

import secrets
import time

from pydantic import BaseModel, ConfigDict

from loadrepro.config.capacity import smallest_pool_tokens
from loadrepro.load.client import Client, ClientConfig
from loadrepro.load.gateway import find_gateway, health_path_for
from loadrepro.load.limits import discover
from loadrepro.load.references import reset_path
from loadrepro.load.target import check_reachable
from loadrepro.load.transport import NoAnswer, Transport, get_json
from loadrepro.load.watch.canary import one_token_request, salted_request
from loadrepro.load.watch.metrics_scrapes import CANONICAL, parse_kept
from loadrepro.records import CACHE_HITS, KV_USAGE, PREEMPTIONS, RUNNING, WAITING, Outcome, RequestRecord
from loadrepro.workload.apis import APIS, PATHS
from loadrepro.workload.tokens import detect_counter

SCHEMA = "loadrepro.probe/1"
PREFIX_WORDS = 160  # long enough to fill whole KV blocks (vLLM 16 tokens, TensorRT-LLM 32, llama.cpp per token)
SERIES_NAMES = {KV_USAGE: "KV usage", WAITING: "waiting", RUNNING: "running", PREEMPTIONS: "preemptions",
                CACHE_HITS: "prefix cache"}
_FAMILY_FLAVOURS = (("vllm:", "vLLM"), ("sglang:", "SGLang"), ("llamacpp:", "llama.cpp"), ("trtllm", "TensorRT-LLM"),
                    ("loadrepro_sim:", "simulated engine"))
_OWNERS = {"vllm": "vLLM", "sglang": "SGLang", "llamacpp": "llama.cpp", "loadrepro": "simulated engine"}


class _Model(BaseModel):
    model_config = ConfigDict(frozen=True, extra="forbid")


class Endpoint(_Model):
    path: str
    status: int | None  # None: no answer
    detail: str = ""


class Usage(_Model):
    api: str  # the endpoint the two short requests went to
    streamed_usage: bool  # a usage object arrived in the stream (stream_options.include_usage)
    prompt_tokens: int | None
    cached_tokens: int | None  # on the second request, whose prefix the first one left in the cache
    error: str = ""
    requests: int = 0  # the one-token requests this took


class ApiCheck(_Model):
    """One salted one-token streamed request to one API."""

    path: str
    answers: bool  # the request completed
    reasoning: bool  # its first token was not content (reasoning, or a tool call)
    prompt_tokens: int | None = None  # as its usage counted them
    detail: str = ""  # what went wrong, when it did not answer


class Probe(_Model):
    schema_version: str = SCHEMA
    base_url: str
    flavour: str  # vLLM, SGLang, TensorRT-LLM, llama.cpp, simulated engine, unknown
    evidence: list[str]
    models: list[str]
    max_model_len: int | None
    tokenize: str | None  # the endpoint that counts tokens, or None
    health: Endpoint
    metrics: Endpoint
    series: dict[str, str]  # canonical series loadrepro found -> the engine's family
    usage: Usage | None
    apis: dict[str, ApiCheck] = {}  # chat, completions, responses, messages: which answer
    limits: str | None  # the KV limits the target publishes, in words
    kv_pool_tokens: int | None = None  # the binding KV pool they give, in tokens (None: none published)
    cache_reset: str | None = None  # the prefix-cache reset it serves ([verify] computes references cold with it)
    gateway: str | None = None  # a gateway in front of the engine, and the health path a run polls on it
    requests: int  # what the probe sent, all of it
    generated_prompt_tokens: int
    plan: list[str]  # what a run will therefore do, or cannot do


async def probe(base_url: str, health_path: str = "/health", metrics_path: str = "/metrics",
                api_key: str | None = None) -> Probe:
    """Probe the target at `base_url` (TargetUnreachable if nothing answers)."""
    async with Transport(base_url, api_key, timeout_s=10.0) as http:
        gateway = await find_gateway(http)
        health_path, switched = health_path_for(gateway, health_path)
        await check_reachable(http, health_path)
        models, max_len, owner = await _models(http)
        health = await _get(http, health_path)
        metrics, text = await _metrics(http, metrics_path)
        series = _series(text)
        flavour, evidence = await _flavour(http, owner, text)
        if gateway is not None:
            evidence.append(f"a {gateway.name} gateway answers: {gateway.evidence}")
        if max_len is None and flavour == "llama.cpp":
            max_len = await _llamacpp_context(http)
        counter = await detect_counter(http, models[0] if models else "") if models else None
        tokenize = None if counter is None or counter.probing else counter.source
        limits = await discover(http)
        cache_reset = await reset_path(http)
    usage = await _usage(base_url, models[0], api_key) if models else None
    apis = await _apis(base_url, models[0], api_key) if models else {}
    described = (f"{limits.source}: {limits.pool_blocks:,} blocks x {limits.tokens_per_block} tokens = "
                 f"{limits.pool_tokens:,} tokens" if limits is not None else None)
    generated = 2 * usage.prompt_tokens if usage and usage.prompt_tokens else 0
    result = Probe(base_url=base_url, flavour=flavour, evidence=evidence, models=models, max_model_len=max_len,
                   tokenize=tokenize, health=health, metrics=metrics, series=series, usage=usage, apis=apis,
                   limits=described, kv_pool_tokens=smallest_pool_tokens(limits) if limits is not None else None,
                   cache_reset=cache_reset, gateway=switched or (
                       gateway.owns(health_path) if gateway is not None else None),
                   requests=http.sent + (usage.requests if usage else 0) + len(apis),
                   generated_prompt_tokens=generated + sum(c.prompt_tokens or 0 for c in apis.values()), plan=[])
    return result.model_copy(update={"plan": plan(result)})


async def _get(http: Transport, path: str) -> Endpoint:
    response = await http.get(path)
    if isinstance(response, NoAnswer):
        return Endpoint(path=path, status=None, detail=response.reason[:200])
    return Endpoint(path=path, status=response.status, detail=response.text.strip()[:120])


async def _models(http: Transport) -> tuple[list[str], int | None, str | None]:
    listed = await get_json(http, "/v1/models")
    cards = listed.get("data") if isinstance(listed, dict) else None
    if not isinstance(cards, list) or not cards:
        return [], None, None
    first = cards[0] if isinstance(cards[0], dict) else {}
    max_len = first.get("max_model_len")
    return ([str(c.get("id")) for c in cards if isinstance(c, dict)], int(max_len) if max_len else None,
            first.get("owned_by"))


async def _metrics(http: Transport, path: str) -> tuple[Endpoint, str]:
    response = await http.get(path)
    if isinstance(response, NoAnswer):
        return Endpoint(path=path, status=None, detail=response.reason.split(":")[0]), ""
    if response.status != 200:
        return Endpoint(path=path, status=response.status, detail="no metrics"), ""
    text = response.text
    shape = "JSON (TensorRT-LLM iteration stats)" if text.lstrip().startswith("[") else "Prometheus text"
    return Endpoint(path=path, status=200, detail=shape), text


def _series(text: str) -> dict[str, str]:
    """Canonical series found -> the first engine family that feeds it."""
    if not text or text.lstrip().startswith(("[", "{")):
        return {}
    try:
        names = {key.partition("{")[0] for key in parse_kept(text)}
    except (ValueError, TypeError, IndexError):
        return {}
    found: dict[str, str] = {}
    for name in sorted(names):
        canonical = CANONICAL.get(name)
        if canonical in SERIES_NAMES and canonical not in found:
            found[canonical] = name
    if "loadrepro_sim:kv_blocks_used" in names:
        found.setdefault(KV_USAGE, "loadrepro_sim:kv_blocks_used")
    return {SERIES_NAMES[k]: v for k, v in sorted(found.items(), key=lambda kv: list(SERIES_NAMES).index(kv[0]))}


async def _flavour(http: Transport, owner: str | None, metrics: str) -> tuple[str, list[str]]:
    votes: list[tuple[str, str]] = []
    if isinstance(await get_json(http, "/sim/config"), dict):
        votes.append(("simulated engine", "GET /sim/config answers"))
    if owner in _OWNERS:
        votes.append((_OWNERS[owner], f"/v1/models says owned_by {owner!r}"))
    if metrics.lstrip().startswith("[") and "kvCacheStats" in metrics:
        votes.append(("TensorRT-LLM", "/metrics is a JSON list with kvCacheStats"))
    for prefix, name in _FAMILY_FLAVOURS:
        if f"\n{prefix}" in "\n" + metrics or f"# TYPE {prefix}" in metrics:
            votes.append((name, f"/metrics has {prefix}* families"))
    version = await get_json(http, "/version")
    if isinstance(version, dict) and "version" in version and not votes:
        votes.append(("vLLM", f"GET /version answers {version['version']!r}"))
    props = await get_json(http, "/props")
    if isinstance(props, dict) and "default_generation_settings" in props:
        votes.append(("llama.cpp", "GET /props has default_generation_settings"))
    if not votes:
        return "unknown", ["none of /sim/config, owned_by, /metrics families, /version or /props identifies it"]
    flavour = max({v for v, _ in votes}, key=lambda v: sum(1 for name, _ in votes if name == v))
    return flavour, [f"{why} ({name})" if name != flavour else why for name, why in votes]


async def _llamacpp_context(http: Transport) -> int | None:
    props = await get_json(http, "/props")
    settings = props.get("default_generation_settings") if isinstance(props, dict) else None
    n_ctx = settings.get("n_ctx") if isinstance(settings, dict) else None
    return int(n_ctx) if n_ctx else None


async def _apis(base_url: str, model: str, api_key: str | None) -> dict[str, ApiCheck]:
    """One salted one-token streamed request to each API, through the load's own client: which answer, and whether
    their streams begin with reasoning."""
    checks: dict[str, ApiCheck] = {}
    for api in APIS:
        config = ClientConfig(base_url, api, model, 1, 60.0, 30.0, api_key=api_key, max_retries=0)
        async with Client(config) as client:
            record = await client.send(0, salted_request(api, "probe"), time.perf_counter_ns(), time.time(),
                                       lambda r: None)
        answered = record.outcome is Outcome.OK
        checks[api] = ApiCheck(path=PATHS[api], answers=answered, prompt_tokens=record.prompt_tokens,
                               reasoning=answered and record.first_token_ns != record.first_content_ns,
                               detail="" if answered else f"{record.outcome}: {' '.join(record.detail.split())[:160]}")
    return checks


def _prefix() -> str:
    """A salted text: its first words are random, so it shares no prefix with any run's prompts."""
    salt = secrets.token_hex(8)
    words = " ".join(f"item{i} weighs {(i * 37) % 101} units" for i in range(PREFIX_WORDS // 4))
    return f"probe {salt}. {words}."


async def _usage(base_url: str, model: str, api_key: str | None) -> Usage:
    """Two one-token streamed requests sharing a salted prefix, through the load's own client: does the stream
    carry usage, and does the second report the first's prefix as cached?"""
    prefix, sent = _prefix(), 0
    for api in ("chat", "completions"):
        config = ClientConfig(base_url, api, model, 1, 60.0, 30.0, api_key=api_key, max_retries=0)
        async with Client(config) as client:
            sent += 1
            first = await _one_token(client, api, prefix + " First question: which item weighs most?")
            if first.status is not None and 400 <= first.status < 500:
                continue  # no chat template, or chat not served: try completions
            if first.outcome is not Outcome.OK:
                return Usage(api=PATHS[api], streamed_usage=False, prompt_tokens=None, cached_tokens=None,
                             error=_said(first), requests=sent)
            sent += 1
            second = await _one_token(client, api, prefix + " Second question: which item weighs least?")
        answered = second.outcome is Outcome.OK
        return Usage(api=PATHS[api], streamed_usage=first.prompt_tokens is not None, prompt_tokens=first.prompt_tokens,
                     cached_tokens=second.cached_tokens if answered else None,
                     error="" if answered else _said(second), requests=sent)
    return Usage(api="none", streamed_usage=False, prompt_tokens=None, cached_tokens=None,
                 error="both chat and completions refused a one-token request", requests=sent)


async def _one_token(client: Client, api: str, text: str) -> RequestRecord:
    return await client.send(0, one_token_request(api, text), time.perf_counter_ns(), time.time(), lambda r: None)


def _said(record: RequestRecord) -> str:
    status = f"HTTP {record.status}: " if record.status and record.status != 200 else ""
    return f"{status}{record.outcome}: {' '.join(record.detail.split())[:200]}"


def plan(p: Probe) -> list[str]:
    """What a run against this target will do, and what it cannot judge, given what the probe saw."""
    lines = [f"lengths: counted with {p.tokenize}" if p.tokenize else
             "lengths: no tokenize endpoint answers, so a run calibrates with salted probe requests (at most 64 "
             "requests and 5% of the workload's tokens), or counts locally with --tokenizer PATH"]
    if p.gateway is not None:
        lines.append(p.gateway)
    if p.health.status == 200:
        lines.append(f"engine death: judged from {p.health.path} turning unhealthy while requests fail")
    else:
        lines.append(f"engine death: {p.health.path} answered {p.health.status or 'nothing'} now, so it is not "
                     "used; death is judged from failures, the engine's exit and its log")
    missing = [name for name in SERIES_NAMES.values() if name not in p.series]
    if p.series:
        lines.append(f"metrics: {', '.join(p.series)} watched and plotted" +
                     (f"; no {', '.join(missing)}" if missing else ""))
    elif p.flavour == "llama.cpp" and p.metrics.status != 200:
        lines.append(f"metrics: GET {p.metrics.path} answered {p.metrics.status or 'nothing'}: llama.cpp serves "
                     "them only when started with --metrics (llama-server --metrics); without them KV pressure, "
                     "waiting and running requests are not shown")
    else:
        lines.append(f"metrics: nothing loadrepro recognises at {p.metrics.path}; KV pressure is not shown")
    if p.max_model_len:
        lines.append(f"context: {p.max_model_len:,} tokens a request ("
                     f"{'n_ctx per slot in /props' if p.flavour == 'llama.cpp' else 'max_model_len in /v1/models'}); "
                     "a run says before its load how many of a profile's requests fit, and --fit scales them to it")
    lines.append(_reuse_line(p.usage))
    lines.append(_trace_line(p.tokenize))
    lines.append(f"capacity predictions: from {p.limits}" if p.limits else
                 "capacity predictions: the target publishes no KV limits; give the profile's [engine] keys")
    lines.append(f"answers ([verify]): references computed cold, the prefix cache reset before each with POST "
                 f"{p.cache_reset}" if p.cache_reset else
                 "answers ([verify]): no prefix-cache reset is served (vLLM serves /reset_prefix_cache with "
                 "VLLM_SERVER_DEV_MODE=1; SGLang /flush_cache), so references may meet a warm cache")
    return lines


def _trace_line(tokenize: str | None) -> str:
    if tokenize and ("vLLM" in tokenize or "llama.cpp" in tokenize):
        return (f"traces: a replay's lengths are counted with {tokenize}, and `trace anonymize --base-url` can "
                "tokenize a text trace here (chat template applied, nothing generated)")
    return ("traces: `trace anonymize` needs --tokenizer PATH for this target (no tokenize endpoint that gives "
            "token ids with the chat template)")


def _reuse_line(usage: Usage | None) -> str:
    if usage is None or usage.error and usage.prompt_tokens is None:
        return f"streamed usage: could not be checked ({usage.error if usage else 'no model listed'})"
    if not usage.streamed_usage:
        return ("streamed usage: none in streams, so output tokens are counted from chunks and prefix reuse is not "
                "judged")
    if usage.cached_tokens is None:
        return "prefix reuse: streams carry usage but no cached_tokens, so prefix reuse is not judged (info only)"
    return (f"prefix reuse: judged from cached_tokens ({usage.cached_tokens} of {usage.prompt_tokens} prompt tokens "
            "cached on the second probe request)")
