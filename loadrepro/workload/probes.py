"""Calibration on a target that counts tokens only by answering requests: `usage.prompt_tokens` of one-token
probes (TensorRT-LLM's trtllm-serve and Triton's OpenAI frontend have no tokenize endpoint).

Probes reach the very engine the run tests, so they are kept from changing what it measures:
- no probe carries run text: each starts with a salt no run prompt has, and its records come from a pool drawn
  with another seed, so no probe shares a cached prefix block, or a run prompt's first characters, with the run;
- one at a time: a burst of long prompts could break a fragile engine before the run starts;
- bounded: at most MAX_PROBES requests and MAX_SHARE of the workload's prompt tokens, whichever is smaller.

Every figure comes from differences between probes that share the salt and the template, so the template's own
tokens cancel: A = [salt]; A2 = [salt, newline, salt] gives the salt; two filler lengths give a filler word and a
newline; [system: salt, user: salt] gives a message's overhead; samples of records and of prose give tokens per
character. What the budget does not afford is taken from PRIORS, and the run's own usage then shows how far off
the lengths were (the report's `lengths`).
"""

from __future__ import annotations

import hashlib
from dataclasses import dataclass

import numpy as np

from loadrepro.errors import TargetError
from loadrepro.workload.conversations import QUESTION, SYSTEM_PROMPT
from loadrepro.workload.corpus import KINDS, RecordPool, record_pool
from loadrepro.workload.tokens import FILLER_WORD, Calibration, Messages, TokenCounter, block_lead, plain_words

MAX_PROBES = 64
MAX_SHARE = 0.05
# Figures for what no probe measured: English-like text in a BPE vocabulary of tens of thousands of tokens.
PRIORS = {"per_char": 0.27, "newline": 1.0, "filler": 1.0, "per_message": 4.0, "template": 4.0}
_SPEND_PER_CHAR = 0.5  # what a character may cost when a probe's size is checked against the budget: on the high side
_POOL_SEED_OFFSET = 1_000_003  # the probes' pool: the same kinds of record, none of the run's text
_FILLERS = (16, 48)
_MAX_SAMPLE_TOKENS = 4000
# Prose like the text around the records (framing lines, replies); not a prefix of any prompt, since it follows a salt.
_PROSE = "\n".join((QUESTION, SYSTEM_PROMPT, "Noted for case 12, step 3: I have checked the records so far and will "
                    "continue with the next result.", "Tool result for step 4:", "Case file 9-81: the records."))


@dataclass(frozen=True, slots=True)
class ProbeBudget:
    requests: int
    tokens: int

    @classmethod
    def for_workload(cls, prompt_tokens: int) -> ProbeBudget:
        return cls(MAX_PROBES, int(prompt_tokens * MAX_SHARE))


class _Prober:
    """Sends probes one at a time, the first message of each led by the salt, and keeps to the budget."""

    def __init__(self, counter: TokenCounter, chat: bool, budget: ProbeBudget, seed: int) -> None:
        self.counter, self.chat, self.budget = counter, chat, budget
        # No run prompt starts with it; fixed per seed, so that the same target calibrates to the same payloads.
        self.salt = f"calibration {hashlib.sha256(f'probe salt {seed}'.encode()).hexdigest()[:8]}"
        self.requests = self.tokens = 0
        self.overhead = 24  # a probe's template and salt, until the first probe measures them
        self.per_char = _SPEND_PER_CHAR  # what a character may cost, until a sample measures it

    def affordable(self, chars: int, messages: int = 1) -> bool:
        guess = int(chars * self.per_char) + self.overhead * messages
        return self.requests < self.budget.requests and self.tokens + guess <= self.budget.tokens

    async def count(self, *contents: str) -> int:
        """Prompt tokens of a probe of these message contents (system, user, assistant, user, ...), the first led
        by the salt; completions probes join them as one prompt."""
        roles = ("user",) if len(contents) == 1 else ("system", "user", "assistant", "user")
        messages: Messages = [{"role": role, "content": text} for role, text in zip(roles, contents)]
        messages[0]["content"] = self.salt + messages[0]["content"]
        if self.chat:
            counted = await self.counter.count_chat(messages)
        else:
            counted = await self.counter.count_text("\n\n".join(m["content"] for m in messages))
        self.requests += 1
        self.tokens += counted
        return counted


def probe_pool(seed: int) -> RecordPool:
    return record_pool(seed + _POOL_SEED_OFFSET)


def _sample(pool: RecordPool, kinds: list[int], chars: int) -> list[str]:
    """Records of `kinds` in pool order, taken in turn, until about `chars` characters. Records are passed over
    only until one fits (so that a small budget still gets a sample): passing over long records later would
    favour short ones, which cost more tokens per character."""
    picks: list[str] = []
    # Spread over the whole pool: records carry sequential ids, so the first ones are shorter for their tokens.
    order = np.random.default_rng(pool.seed)
    queues = [iter(order.permutation(np.flatnonzero(pool.kinds == k))[:400]) for k in kinds]
    total = 0
    while queues:
        for queue in list(queues):
            index = next(queue, None)
            if index is None:
                queues.remove(queue)
            elif total + pool.chars[index] <= chars:
                picks.append(pool.texts[index])
                total += int(pool.chars[index]) + 1
            elif picks:
                return picks
    return picks


@dataclass(slots=True)
class _Figures:
    base: int  # A: the template around one message, and the salt
    newline: float = PRIORS["newline"]
    filler: float = PRIORS["filler"]
    salt: float | None = None
    per_message: float = PRIORS["per_message"]


async def calibrate_by_probes(counter: TokenCounter, pool: RecordPool, chat: bool, budget: ProbeBudget,
                              ) -> tuple[Calibration, int, int]:
    """A Calibration measured with salted probes within `budget`; also the probes' requests and tokens."""
    prober = _Prober(counter, chat, budget, pool.seed)
    if not prober.affordable(0):
        return _calibration(counter.source, prober, pool, None, None, None), 0, 0
    figures = _Figures(await prober.count(""))
    prober.overhead = figures.base
    samples: list[_Sample] = []
    await _record_samples(prober, pool, figures, samples, mixed_only=True)
    await _fillers(prober, figures)
    await _salt_and_messages(prober, figures)
    prose = await _prose_ratio(prober, figures)
    await _record_samples(prober, pool, figures, samples, mixed_only=False)
    return _calibration(counter.source, prober, pool, figures, _ratios(samples), prose), prober.requests, \
        prober.tokens


def _calibration(source: str, prober: _Prober, pool: RecordPool, figures: _Figures | None,
                 ratios: np.ndarray | None, prose: float | None) -> Calibration:
    per_char = float(ratios.mean()) if ratios is not None else PRIORS["per_char"]
    ratios = ratios if ratios is not None else np.full(len(KINDS), per_char)
    if figures is None:
        figures = _Figures(base=0)
        salt = len(prober.salt) * per_char
    else:
        salt = figures.salt if figures.salt is not None else len(prober.salt) * per_char
    template = max(0.0, figures.base - salt) if figures.base else PRIORS["template"]
    return Calibration(
        source=f"{source}: {prober.requests} salted probe requests, {prober.tokens} tokens",
        counted_records=0, record_tokens=pool.chars * ratios[pool.kinds], join_tokens=figures.newline,
        filler_tokens=figures.filler, tokens_per_char=prose or per_char,
        chat_base=template + figures.per_message if prober.chat else 0.0,
        chat_per_message=figures.per_message if prober.chat else 0.0,
        text_base=0.0 if prober.chat else template,
        # a block's lead is not probed (each probe is a request): its characters, at the rate of prose
        lead_tokens=len(block_lead(0)) * (prose or per_char), words=(words := plain_words(list(pool.texts[:64]))),
        word_tokens=np.array([(len(w) + 1) * (prose or per_char) for w in words]), counted=np.arange(len(pool)))


async def _fillers(prober: _Prober, f: _Figures) -> None:
    """Two lengths of filler words after a newline: the cost of a word, and of the newline."""
    short, long_ = (" ".join([FILLER_WORD] * n) for n in _FILLERS)
    if not prober.affordable(len(short) + len(long_), messages=2):
        return
    one = await prober.count("\n" + short) - f.base
    two = await prober.count("\n" + long_) - f.base
    f.filler = max(0.25, (two - one) / (_FILLERS[1] - _FILLERS[0]))
    f.newline = max(0.0, one - _FILLERS[0] * f.filler)


async def _salt_and_messages(prober: _Prober, f: _Figures) -> None:
    """[salt, newline, salt] gives the salt's tokens; [system: salt, user: salt] then a message's overhead."""
    if not prober.affordable(2 * len(prober.salt), messages=3):
        return
    f.salt = max(0.0, await prober.count("\n" + prober.salt) - f.base - f.newline)
    if prober.chat:
        two = await prober.count("", prober.salt)
        f.per_message = max(0.0, two - f.base - f.salt)


async def _prose_ratio(prober: _Prober, f: _Figures) -> float | None:
    if not prober.affordable(len(_PROSE) + 1):
        return None
    return max(1e-3, (await prober.count("\n" + _PROSE) - f.base - f.newline) / len(_PROSE))


@dataclass(frozen=True, slots=True)
class _Sample:
    kinds: tuple[int, ...]
    chars: int  # of the records, without the newlines between them
    tokens: float  # of the records, without those newlines


# A kind's own ratio counts in proportion to its sample: with fewer tokens than this it leans on all the samples'
# ratio (a few records of one kind say little: their cost per character varies by a tenth from record to record).
_SHRINK_TOKENS = 800.0


def _ratios(samples: list[_Sample]) -> np.ndarray | None:
    """Tokens per character for each kind of record: its own samples' ratio, shrunk toward that of all samples."""
    if not samples:
        return None
    pooled = sum(s.tokens for s in samples) / sum(s.chars for s in samples)
    ratios = np.full(len(KINDS), pooled)
    for k in range(len(KINDS)):
        own = [s for s in samples if s.kinds == (k,)]
        tokens, chars = sum(s.tokens for s in own), sum(s.chars for s in own)
        if chars:
            ratios[k] = (tokens + _SHRINK_TOKENS * pooled) / (chars + _SHRINK_TOKENS)
    floored: np.ndarray = np.maximum(ratios, 1e-3)
    return floored


async def _record_samples(prober: _Prober, pool: RecordPool, f: _Figures, samples: list[_Sample],
                          mixed_only: bool) -> None:
    """Samples of records: of all kinds in one probe (`mixed_only`, first, so that even a small budget measures
    them), else of each kind in its own probe with what the budget has left."""
    kinds = [tuple(range(len(KINDS)))] if mixed_only else [(k,) for k in range(len(KINDS))]
    left = prober.budget.tokens - prober.tokens
    # The mixed sample leaves room for the small probes and, with a larger budget, the per-kind ones.
    share = (left * (0.8 if left < 400 else 0.5 if left < 1000 else 0.25) if mixed_only else left / len(kinds)) \
        - prober.overhead
    if prober.budget.requests - prober.requests < len(kinds):
        return
    for group in kinds:
        records = _sample(pool, list(group), int(min(share, _MAX_SAMPLE_TOKENS) / prober.per_char))
        text = "\n".join(records)
        if not records or not prober.affordable(len(text) + 1):
            return
        counted = await prober.count("\n" + text)
        if counted <= f.base:
            raise TargetError(f"the target's token counts ({prober.counter.source}) do not grow with the text: "
                              f"{f.base} tokens for the salt alone, {counted} with {len(text)} more characters")
        chars = sum(len(r) for r in records)
        samples.append(_Sample(group, chars, max(1.0, counted - f.base - f.newline * len(records))))
        # Size later probes by what characters really cost, with a margin for kinds that cost more.
        prober.per_char = 1.3 * max(s.tokens / s.chars for s in samples)
