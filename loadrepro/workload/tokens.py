"""Token counts in the target's own tokens, and the calibration that sizes text from them.

A TokenCounter asks the target: `POST /tokenize` (vLLM: `prompt` or `messages`), `POST /v1/tokenize` (SGLang),
`POST /tokenize` with `content` (llama.cpp), or, for any engine, `usage.prompt_tokens` of a one-token request.
The simulated engine's tokenizer is also available locally, where counting is free and exact.

Calibration counts the record pool (all of it when counting is local, a sample per record kind otherwise) plus
the chat template's overhead, so that text can be assembled to a token target without asking again.
"""

from __future__ import annotations

import asyncio
import dataclasses
import json
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import numpy as np
import orjson

from loadrepro.errors import TargetError, UsageError, auth_refusal
from loadrepro.sim.tokenizer import render_chat, token_ids, tokenize
from loadrepro.workload.apis import PATHS, chat_form, openai_usage, wire_body
from loadrepro.workload.corpus import KINDS, RecordPool

Messages = list[dict[str, Any]]
SCOPE_BITS = 32  # a local hash-id scope's ids are offset by its trace's number << SCOPE_BITS, so no two traces share
FILLER_WORD = "pad"
LEAD_DIGITS = 8  # a block's lead names its hash id in its scope in this many digits, so leads cost alike
_WORDS = 48  # plain words whose cost is counted, one by one: what ends a trace's block
_WORD_REPEATS = 9
_SAMPLE_PER_KIND = 12
_PROBE_SYSTEM = "You are a careful analyst."
_PROBE_USER = "List the accounts that changed tier this month and say why."
_PROBE_REPLY = "Three accounts changed tier; the details follow."


def block_lead(hash_id: int) -> str:
    """The first line of a trace's hash-id block: its scope (a later trace's local ids are offset by its number
    << SCOPE_BITS, workload/agent_traces.py) and its id within it, zero-padded to a fixed width. Tokenizers that
    split numbers into digits (Llama 3, Qwen) made a later tree's bare id (`[block 4294967297]`) cost three times
    `[block 1]`; at a fixed width, and with every tree's ids counted from its own 1, every tree's leads cost alike,
    and calibration counts one."""
    scope, local = divmod(hash_id, 1 << SCOPE_BITS)
    return f"[block {scope % 100:02d}:{local % 10 ** LEAD_DIGITS:0{LEAD_DIGITS}d}]"


def plain_words(texts: list[str], most: int = _WORDS) -> tuple[str, ...]:
    """The first `most` distinct words of ASCII letters alone in these texts, in their order, punctuation around
    them dropped."""
    found: dict[str, None] = {}
    for text in texts:
        for word in text.split():
            word = word.strip(".,;:!?\"'()[]{}")
            if word.isalpha() and word.isascii():
                found.setdefault(word)
                if len(found) == most:
                    return tuple(found)
    return tuple(found)


class TokenCounter(Protocol):
    source: str
    local: bool  # counting is free, in process: count every record instead of a sample, and count_now works
    probing: bool  # counting sends requests to the engine itself (workload/probes.py plans differently)
    additive: bool  # a text's count is the sum of its parts': what is planned is what is counted

    def count_now(self, text: str) -> int:
        """A text's count at once, without the special tokens count_text adds (a local counter's only)."""

    async def count_text(self, text: str) -> int: ...

    async def count_chat(self, messages: Messages) -> int: ...


class SimTokenCounter:
    """The simulated engine's tokenizer, in process."""

    source = "simulated engine tokenizer (local)"
    local, probing = True, False
    additive = True  # a text's count is the sum of its parts': what is planned is what is counted

    @staticmethod
    def count_now(text: str) -> int:
        return len(tokenize(text))

    async def count_text(self, text: str) -> int:
        return len(tokenize(text))

    async def count_chat(self, messages: Messages) -> int:
        return len(tokenize(render_chat(messages)))

    async def chat_ids(self, messages: Messages) -> list[int]:
        """The prompt's token ids, chat template applied."""
        return token_ids(tokenize(render_chat(messages)))


class LocalTokenizerCounter:
    """A Hugging Face tokenizer on disk (a tokenizer.json, or a model folder holding one with its chat template),
    for planning offline in a model's own tokens: counted like vLLM's /tokenize counts them."""

    local, probing, additive = True, False, False

    def __init__(self, path: Path) -> None:
        try:
            from jinja2.sandbox import ImmutableSandboxedEnvironment
            from tokenizers import Tokenizer
        except ImportError as exc:
            raise UsageError("--tokenizer needs the tokenizer extra: pip install 'loadrepro[tokenizer]'") from exc
        folder = path if path.is_dir() else path.parent
        file = path / "tokenizer.json" if path.is_dir() else path
        if not file.is_file():
            raise UsageError(f"--tokenizer: no tokenizer.json at {path}")
        self._tokenizer = Tokenizer.from_file(str(file))
        config = json.loads((folder / "tokenizer_config.json").read_text()) if (
            folder / "tokenizer_config.json").is_file() else {}
        template = config.get("chat_template")
        if template is None and (folder / "chat_template.jinja").is_file():
            template = (folder / "chat_template.jinja").read_text()
        self._template = ImmutableSandboxedEnvironment().from_string(template) if template else None
        self._specials = {k: config.get(k) for k in ("bos_token", "eos_token")}
        self.source = f"local tokenizer {file}"

    def count_now(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=False).ids)

    async def count_text(self, text: str) -> int:
        return len(self._tokenizer.encode(text, add_special_tokens=True).ids)

    async def count_chat(self, messages: Messages) -> int:
        return len(await self.chat_ids(messages))

    async def chat_ids(self, messages: Messages) -> list[int]:
        """The prompt's token ids, chat template applied."""
        if self._template is None:
            raise UsageError(f"{self.source} has no chat template; use a completions profile (api = 'completions')")
        rendered = self._template.render(messages=messages, add_generation_prompt=True, **self._specials)
        return list(self._tokenizer.encode(rendered, add_special_tokens=False).ids)


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    body: bytes
    content_type: str

    def json(self) -> Any:
        return orjson.loads(self.body)

    @property
    def text(self) -> str:
        return self.body.decode("utf-8", "replace")


class Poster(Protocol):
    """POSTs JSON to the target; a failure to get any answer is a TargetError."""

    async def answer(self, path: str, body: dict[str, Any]) -> Answer: ...


class HttpTokenCounter:
    """Counts with the target's tokenize endpoint, falling back to one-token probe requests for what it lacks."""

    local, additive = False, False

    def __init__(self, client: Poster, flavour: str, model: str, api: str = "chat") -> None:
        """`api`: the run's API, which probe requests for chat-form prompts go through (a gateway may serve no
        other)."""
        self._client, self._flavour, self._model = client, flavour, model
        self._chat_api = api if chat_form(api) else "chat"
        self.probing = flavour == "probe"  # counting sends requests to the engine itself: see workload/probes.py
        self.source = {"vllm": "POST /tokenize (vLLM)", "sglang": "POST /v1/tokenize (SGLang)",
                       "llamacpp": "POST /tokenize (llama.cpp)", "probe": "usage.prompt_tokens of probes"}[flavour]

    async def _post(self, path: str, body: dict[str, Any]) -> dict[str, Any]:
        response = await self._client.answer(path, body)
        if response.status in (401, 403):
            raise auth_refusal(f"to count tokens with {path}", response.status, response.text)
        if response.status != 200:
            raise TargetError(f"counting tokens with {path} failed: HTTP {response.status} "
                              f"{response.text[:300]}")
        try:
            data = response.json()
        except ValueError as exc:  # an answer that is not JSON (an SSE stream to a request that asked for none)
            raise TargetError(f"counting tokens with {path} failed: the answer is not JSON "
                              f"({response.content_type or 'no content type'}: "
                              f"{response.text[:120]!r})") from exc
        if not isinstance(data, dict):
            raise TargetError(f"counting tokens with {path} failed: the answer is not a JSON object "
                              f"({response.text[:120]!r})")
        return data

    def count_now(self, text: str) -> int:
        raise TypeError("counting with the target is not local: it needs a request")

    async def _probe(self, api: str, body: dict[str, Any]) -> int:
        data = await self._post(PATHS[api], wire_body(api, {**body, "max_tokens": 1, "stream": False}, self._model))
        return int(openai_usage(api, data.get("usage"))["prompt_tokens"])

    async def count_text(self, text: str) -> int:
        match self._flavour:
            case "vllm":
                return int((await self._post("/tokenize", {"model": self._model, "prompt": text}))["count"])
            case "sglang":
                return int((await self._post("/v1/tokenize", {"model": self._model, "prompt": text}))["count"])
            case "llamacpp":
                return len((await self._post("/tokenize", {"content": text, "add_special": True}))["tokens"])
            case _:
                return await self._probe("completions", {"prompt": text})

    async def count_chat(self, messages: Messages) -> int:
        if self._flavour == "vllm":
            return int((await self._post("/tokenize", {"model": self._model, "messages": messages}))["count"])
        if self._flavour == "llamacpp":
            rendered = await self._post("/apply-template", {"messages": messages})
            return await self.count_text(rendered["prompt"])
        return await self._probe(self._chat_api, {"messages": messages})

    async def chat_ids(self, messages: Messages) -> list[int]:
        """The prompt's token ids, chat template applied, from the target's tokenize endpoint."""
        if self._flavour == "vllm":
            data = await self._post("/tokenize", {"model": self._model, "messages": messages})
        elif self._flavour == "llamacpp":
            rendered = await self._post("/apply-template", {"messages": messages})
            data = await self._post("/tokenize", {"content": rendered["prompt"], "add_special": True})
        else:
            raise UsageError(f"token ids need a /tokenize endpoint that applies the chat template (vLLM, llama.cpp); "
                             f"this target counts with {self.source}: give --tokenizer instead")
        tokens = data.get("tokens")
        if not isinstance(tokens, list):
            raise TargetError(f"the target's tokenize endpoint gave no token ids: {str(data)[:200]}")
        return [int(t["id"]) if isinstance(t, dict) else int(t) for t in tokens]


async def detect_counter(client: Poster, model: str, api: str = "chat") -> HttpTokenCounter:
    """The best way this target offers to count tokens; `client` has the target's base URL. A target that refuses
    for authentication is a TargetRefused, not a reason to count some other way."""
    attempts = (("vllm", "/tokenize", {"model": model, "prompt": "hello world"}, "count"),
                ("sglang", "/v1/tokenize", {"model": model, "prompt": "hello world"}, "count"),
                ("llamacpp", "/tokenize", {"content": "hello world"}, "tokens"))
    for flavour, path, body, key in attempts:
        try:
            response = await client.answer(path, body)
            if response.status in (401, 403):
                raise auth_refusal(f"to count tokens with {path}", response.status, response.text)
            if response.status == 200 and key in response.json():
                return HttpTokenCounter(client, flavour, model, api)
        except (TargetError, ValueError, TypeError):
            continue
    return HttpTokenCounter(client, "probe", model, api)


@dataclass(frozen=True, slots=True)
class Calibration:
    """How many target tokens each piece of assembled text costs."""

    source: str
    counted_records: int  # records the target counted (the whole pool when counting is local)
    record_tokens: np.ndarray  # per pool record, without special tokens
    join_tokens: float  # added by the newline between two records
    filler_tokens: float  # per filler word
    tokens_per_char: float  # for other text (headers, replies)
    chat_base: float  # tokens the chat template adds around a system + user exchange
    chat_per_message: float  # and per further message
    text_base: float  # tokens added to a bare completions prompt (BOS and the like)
    lead_tokens: float  # a hash-id block's lead line (block_lead), without the newline after it
    # plain words of the pool (plain_words) and what each costs after a space: counted, not estimated, so that the
    # end of a trace's block costs what was planned; a filler word makes up the rest
    words: tuple[str, ...]
    word_tokens: np.ndarray
    # the records whose cost was counted, not estimated (all of them when counting is local): the text of a trace's
    # blocks, which must each cost what was planned, is read from these
    counted: np.ndarray
    exact_count: Callable[[str], int] | None = None  # where counting is local, any text is counted exactly

    def estimate(self, text: str) -> float:
        if self.exact_count is not None:
            return float(self.exact_count(text))
        return len(text) * self.tokens_per_char

    def scaled(self, factor: float) -> Calibration:
        """The same calibration with every text cost multiplied by `factor` (a measured correction)."""
        return dataclasses.replace(
            self, record_tokens=self.record_tokens * factor, join_tokens=self.join_tokens * factor,
            filler_tokens=self.filler_tokens * factor, tokens_per_char=self.tokens_per_char * factor,
            lead_tokens=self.lead_tokens * factor, word_tokens=self.word_tokens * factor, exact_count=None)


async def gather_limited(calls: list[Awaitable[int]], limit: int = 8) -> list[int]:
    gate = asyncio.Semaphore(limit)

    async def run(call: Awaitable[int]) -> int:
        async with gate:
            return await call

    return list(await asyncio.gather(*(run(c) for c in calls)))


async def calibrate(counter: TokenCounter, pool: RecordPool) -> Calibration:
    """Measure the pool's record costs and the template overheads on the target."""
    # Special tokens (BOS and the like) added to every count, from two counts so no empty prompt is needed.
    one, two = await counter.count_text(FILLER_WORD), await counter.count_text(f"{FILLER_WORD} {FILLER_WORD}")
    base = 2 * one - two
    if counter.local:
        sample = np.arange(len(pool))
    else:
        sample = np.concatenate([np.flatnonzero(pool.kinds == k)[:_SAMPLE_PER_KIND] for k in range(len(KINDS))])
    if counter.local:  # counted at once: a coroutine per record cost more than its counting (2,048 records)
        counts = np.array([counter.count_now(pool.texts[i]) for i in sample], float)
    else:
        counts = np.array(await gather_limited([counter.count_text(pool.texts[i]) for i in sample]), float) - base
    if counter.local:
        record_tokens = counts
    else:
        ratios = np.array([counts[pool.kinds[sample] == k].sum() / pool.chars[sample][pool.kinds[sample] == k].sum()
                           for k in range(len(KINDS))])
        record_tokens = pool.chars * ratios[pool.kinds]
        record_tokens[sample] = counts  # those counted cost what was counted
    joined = sample[:24]
    join_count = await counter.count_text("\n".join(pool.texts[i] for i in joined)) - base
    join_tokens = max(0.0, (join_count - record_tokens[joined].sum()) / (len(joined) - 1))
    filler_tokens = (await counter.count_text(" ".join([FILLER_WORD] * 256)) - base) / 256
    lead_tokens = float(await counter.count_text(block_lead(0)) - base)
    words = plain_words([pool.texts[i] for i in sample])
    word_tokens = await _word_costs(counter, words)
    tokens_per_char = float(counts.sum() / pool.chars[sample].sum())
    chat_base, chat_per_message = await _chat_overheads(counter, base)
    if filler_tokens <= 0 or tokens_per_char <= 0 or not np.all(record_tokens > 0):
        raise TargetError(f"the target's token counts ({counter.source}) do not grow with the text: it counted "
                          f"{one} tokens for one word and {two} for two")
    return Calibration(counter.source, len(sample), record_tokens, join_tokens, filler_tokens, tokens_per_char,
                       chat_base, chat_per_message, float(base), lead_tokens, words, word_tokens, sample,
                       counter.count_now if counter.local else None)


async def _word_costs(counter: TokenCounter, words: tuple[str, ...]) -> np.ndarray:
    """Each word's cost after a space: the difference of the word alone and repeated (special tokens cancel)."""
    def texts(word: str) -> tuple[str, str]:
        return word, " ".join([word] * _WORD_REPEATS)

    if counter.local:
        counts = [counter.count_now(t) for w in words for t in texts(w)]
    else:
        counts = await gather_limited([counter.count_text(t) for w in words for t in texts(w)])
    pairs = np.array(counts, float).reshape(-1, 2)
    return np.asarray((pairs[:, 1] - pairs[:, 0]) / (_WORD_REPEATS - 1))


async def _chat_overheads(counter: TokenCounter, base: int) -> tuple[float, float]:
    texts = (_PROBE_SYSTEM, _PROBE_USER, _PROBE_REPLY, _PROBE_USER)
    alone = [await counter.count_text(t) - base for t in texts]
    two = [{"role": "system", "content": texts[0]}, {"role": "user", "content": texts[1]}]
    four = two + [{"role": "assistant", "content": texts[2]}, {"role": "user", "content": texts[3]}]
    two_count, four_count = await counter.count_chat(two), await counter.count_chat(four)
    chat_base = two_count - sum(alone[:2])
    return float(chat_base), float((four_count - two_count - sum(alone[2:])) / 2)
