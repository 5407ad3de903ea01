"""The simulated engine's scheduler: admission, chunked prefill, decode and the scenario's failure. Pure.

One `step()` is one engine iteration: admit waiting requests (first come, first served, stopping at the first
that must wait), spend the prefill token budget on admitted prompts, and give every decoding request one token.
No clock: the runtime calls `step()` every `step_s`, and tests call it in a loop.

Policies:
- stock admits the way the seed engines did: on the primary pool's free blocks only (blocks-exhausted: not at
  all), grows allocations token by token, preempts under primary pressure, and dies when a pool or the
  page-index table the admission ignored cannot grow.
- patched reserves prompt + max_tokens (x beam) in every pool at admission, waits while that does not fit, and
  rejects at submission a request that could never fit.
- race (any scenario, stock, [sim] race_probability): on that share of starts (the draw seeded by race_seed), the
  engine dies at the N-th admission, N drawn too: a flaky failure; patched never.
- prefix-corruption, stock: a cached block taken for new work stays findable under its old hash, so a later turn
  that shares the old prefix reads the new owner's content and answers from it (sim/replies.py); patched: the
  block leaves the index when it is taken.
"""

from __future__ import annotations

import hashlib
import random
from collections import deque

from loadrepro.sim.config import Policy, Scenario, SimConfig
from loadrepro.sim.kvcache import BlockPool, block_hashes, blocks_for, clamped_seq_len, page_index_width
from loadrepro.sim.replies import choose, continue_chain, tag_in
from loadrepro.sim.steps import (
    Finished,
    Rejection,
    SchedulerStats,
    ScriptedDeath,
    SimRequest,
    State,
    StepOutput,
)
from loadrepro.sim.tokenizer import natural_length

RACE_AT = (4, 24)  # the admissions among which the race strikes


def race_point(config: SimConfig) -> int | None:
    """The admission at which the scheduler race kills the engine on this start, or None (patched; or the draw
    spared it)."""
    if config.policy is not Policy.STOCK or not config.race_probability:
        return None
    draw = random.Random(config.race_seed)
    if draw.random() >= config.race_probability:
        return None
    return draw.randint(*RACE_AT)


class Scheduler:
    def __init__(self, config: SimConfig) -> None:
        self.config = config
        self.primary = BlockPool(config.primary_blocks, reuse=config.scenario != Scenario.BLOCKS_EXHAUSTED,
                                 stale_index=config.scenario is Scenario.PREFIX_CORRUPTION
                                 and config.policy is Policy.STOCK)
        self.draft = BlockPool(config.draft_blocks, reuse=False) if config.draft_blocks else None
        self.table_width = (
            page_index_width(clamped_seq_len(config.index_pool_bytes, config.kv_bytes_per_token,
                                             config.max_model_len), config.block_size)
            if config.index_pool_bytes else None
        )
        self.death: ScriptedDeath | None = None
        self._requests: dict[int, SimRequest] = {}
        self._waiting: deque[SimRequest] = deque()
        self._running: list[SimRequest] = []
        self._next_id = 1
        self._zombies: set[int] = set()  # aborted requests the defect never freed: running, holding blocks
        self._preemptions = self._queried_tokens = self._hit_tokens = self._rejected = 0
        self._admitted = 0
        self._race_at = race_point(config)

    # -- submission -------------------------------------------------------------------------------------------

    def submit(self, tokens: list[str], max_tokens: int, ignore_eos: bool) -> int | Rejection:
        """Queue a request; its id, or why it is refused. Not to be called once the engine is dead."""
        rejection = self._validate(len(tokens), max_tokens)
        if rejection is None and self.config.policy is Policy.PATCHED:
            rejection = self._never_fits(len(tokens), max_tokens)
        if rejection is not None:
            self._rejected += 1
            return rejection
        output_len = max_tokens if ignore_eos else min(max_tokens, natural_length(
            tokens, self.config.natural_output_tokens))
        request = SimRequest(self._next_id, tokens, block_hashes(tokens, self.config.block_size), max_tokens,
                             output_len, tag=tag_in(tokens))
        self._next_id += 1
        self._requests[request.id] = request
        self._waiting.append(request)
        return request.id

    def _validate(self, prompt_len: int, max_tokens: int) -> Rejection | None:
        limit = self.config.max_model_len
        if prompt_len == 0:
            return Rejection(400, "The decoder prompt cannot be empty", "invalid_prompt")
        if prompt_len > limit:
            return Rejection(400, f"This model's maximum context length is {limit} tokens. However, your request "
                                  f"has {prompt_len} input tokens. Please reduce the length of the input messages.")
        if prompt_len + max_tokens > limit:
            return Rejection(400, f"'max_tokens' or 'max_completion_tokens' is too large: {max_tokens}. This "
                                  f"model's maximum context length is {limit} tokens and your request has "
                                  f"{prompt_len} input tokens ({max_tokens} > {limit} - {prompt_len}).")
        return None

    def _never_fits(self, prompt_len: int, max_tokens: int) -> Rejection | None:
        per_seq = blocks_for(prompt_len + max_tokens, self.config.block_size)
        primary = per_seq * self.config.beam_width
        if primary > self.primary.num_blocks:
            return Rejection(400, f"Request requires {primary} KV cache blocks to complete, which exceeds the "
                                  f"total capacity of {self.primary.num_blocks} blocks", "kv_capacity_exceeded")
        if self.draft is not None and per_seq > self.draft.num_blocks:
            return Rejection(400, f"Request requires {per_seq} draft KV cache blocks to complete, which exceeds "
                                  f"the draft pool capacity of {self.draft.num_blocks} blocks",
                             "kv_capacity_exceeded")
        if self.table_width is not None and per_seq > self.table_width:
            return Rejection(400, f"Request requires {per_seq} page-index entries to complete, which exceeds the "
                                  f"page-index table of {self.table_width} entries "
                                  f"({self.table_width * self.config.block_size} tokens)", "kv_capacity_exceeded")
        return None

    def abort(self, request_id: int) -> None:
        """Drop a request (its client went away) and free whatever it holds; with the abort defect (stock,
        leak_on_abort) a running one stays running, holding its blocks, and never makes progress again."""
        request = self._requests.pop(request_id, None)
        if request is None or request.state is State.DONE:
            return
        if self.config.leak_on_abort and self.config.policy is Policy.STOCK and request.state is State.RUNNING:
            self._zombies.add(request.id)
            return
        if request.state is State.RUNNING:
            self._running.remove(request)
        else:
            self._waiting.remove(request)
        self._free(request)
        request.state = State.DONE

    # -- one engine iteration ---------------------------------------------------------------------------------

    @property
    def idle(self) -> bool:
        return len(self._running) == len(self._zombies) and not self._waiting

    def step(self) -> StepOutput:
        out = StepOutput()
        if self.death is not None:
            return out
        decoding = [r for r in self._running if r.computed >= r.target and r.id not in self._zombies]
        for phase in (self._admit, lambda o: self._decode(decoding, o), self._prefill):
            phase(out)
            if self.death is not None:
                out.death = self.death
                break
        return out

    def _admit(self, out: StepOutput) -> None:
        while self._waiting and self.death is None:
            request = self._waiting[0]
            admitted = (self._admit_reserved(request) if self.config.policy is Policy.PATCHED
                        else self._admit_stock(request))
            if not admitted:
                return
            self._waiting.popleft()
            request.state = State.RUNNING
            self._running.append(request)
            self._admitted += 1
            if self._admitted == self._race_at:
                self._die(f"Scheduler race: the KV blocks of request {request.id} were freed twice", request)

    def _admit_stock(self, request: SimRequest) -> bool:
        target = request.prompt_len + request.generated
        per_seq = blocks_for(target, self.config.block_size)
        if self.config.scenario is Scenario.BLOCKS_EXHAUSTED:
            wanted = per_seq * self.config.beam_width
            request.blocks = self.primary.allocate_upto(wanted)
            if len(request.blocks) < wanted:
                return self._die("Available blocks exhausted", request)
            self._start(request, target, [], request.blocks)
            return True
        hits = self._hits(request)
        if self.primary.free_besides(hits) < per_seq - len(hits):
            return False
        if self.table_width is not None and per_seq > self.table_width:
            return self._die(self._page_index_message(request, target), request)
        if self.draft is not None and request.preempted:
            # A resumed request gets its whole draft context back at once; a new one grows it chunk by chunk.
            draft = self.draft.allocate(per_seq)
            if draft is None:
                return self._die(f"Failed to resume draft KV cache for request {request.id}", request)
            request.draft = draft
        self.primary.take_cached(hits)
        self._start(request, target, hits, self.primary.allocate(per_seq - len(hits)) or [])
        return True

    def _admit_reserved(self, request: SimRequest) -> bool:
        per_seq = blocks_for(request.prompt_len + request.max_tokens, self.config.block_size)
        hits = self._hits(request)
        need = per_seq * self.config.beam_width - len(hits)
        if self.primary.free_besides(hits) < need:
            return False
        if self.draft is not None and self.draft.num_free < per_seq:
            return False
        if self.draft is not None:
            request.draft = self.draft.allocate(per_seq) or []
        self.primary.take_cached(hits)
        self._start(request, request.prompt_len + request.generated, hits, self.primary.allocate(need) or [])
        return True

    def _hits(self, request: SimRequest) -> list[int]:
        # At least the prompt's last token is always computed, as engines do to produce the first logits.
        usable = (request.prompt_len - 1) // self.config.block_size
        return self.primary.cached_prefix(request.hashes[:usable])

    def _start(self, request: SimRequest, target: int, hits: list[int], fresh: list[int]) -> None:
        self._read_context(request, hits)
        request.blocks = hits + fresh
        request.target = target
        request.registered = len(hits)
        request.computed = len(hits) * self.config.block_size
        self._queried_tokens += request.prompt_len
        self._hit_tokens += request.computed
        if request.cached_tokens < 0:
            request.cached_tokens = request.computed

    def _read_context(self, request: SimRequest, hits: list[int]) -> None:
        """What the request will answer from: its cache hits as the blocks hold them, then its own tokens. A hit
        that does not hold what its hash says (a stale index) makes another context, and its tag another tag."""
        size = self.config.block_size
        held = [self.primary.read(b) for b in hits]
        wrong = [h for i, h in enumerate(held) if h is None or h[0] != request.hashes[i]]
        own_tag = request.tag[0] if request.tag else None
        if not wrong:
            previous = request.hashes[len(hits) - 1] if hits else b""
            request.context_tag = own_tag
        else:
            previous = hashlib.blake2b(b"".join(h[0] if h else b"?" for h in held), digest_size=16).digest()
            request.context_tag = next((h[1] for h in reversed(wrong) if h is not None and h[1]), None)
            if request.tag is not None and request.tag[1] >= len(hits) * size:  # its own tag is computed anew
                request.context_tag = own_tag
        request.fingerprint = continue_chain(previous, request.tokens[len(hits) * size:], size)

    def _prefill(self, out: StepOutput) -> None:
        budget = self.config.prefill_tokens_per_step
        for request in list(self._running):
            if budget <= 0 or self.death is not None:
                return
            if request.state is not State.RUNNING or request.computed >= request.target or request.id in self._zombies:
                continue
            chunk = min(budget, request.target - request.computed)
            request.computed += chunk
            budget -= chunk
            if not self._grow_draft(request, request.computed):
                return
            self._register(request)
            if request.computed >= request.target:
                self._generate(request, out)

    def _register(self, request: SimRequest) -> None:
        full = min(request.computed, request.prompt_len) // self.config.block_size
        size, tag = self.config.block_size, request.tag
        for i in range(request.registered, full):
            self.primary.register(request.blocks[i], request.hashes[i],
                                  tag[0] if tag is not None and tag[1] < (i + 1) * size else None)
        request.registered = max(request.registered, full)

    def _decode(self, decoding: list[SimRequest], out: StepOutput) -> None:
        for request in decoding:
            if self.death is not None:
                return
            if request.state is State.RUNNING:
                self._generate(request, out)

    def _generate(self, request: SimRequest, out: StepOutput) -> None:
        if not self._grow(request, request.prompt_len + request.generated + 1, out):
            return
        choice = choose(request.fingerprint, request.generated, request.previous, len(self._running),
                        request.context_tag)
        request.previous = choice.text
        request.generated += 1
        request.computed += 1
        request.target += 1
        out.tokens.append((request.id, choice))
        if request.generated >= request.output_len:
            self._finish(request, out)

    def _grow(self, request: SimRequest, length: int, out: StepOutput) -> bool:
        """Make room for a context of `length` tokens; False when the request was preempted or the engine died."""
        if self.config.policy is Policy.PATCHED:
            return True  # reserved at admission
        per_seq = blocks_for(length, self.config.block_size)
        if self.table_width is not None and per_seq > self.table_width:
            return self._die(self._page_index_message(request, length), request)
        extra = per_seq * self.config.beam_width - len(request.blocks)
        if extra > 0:
            if self.config.scenario is Scenario.BLOCKS_EXHAUSTED and self.primary.num_free < extra:
                request.blocks += self.primary.allocate_upto(extra)
                return self._die("Available blocks exhausted", request)
            while self.primary.num_free < extra:
                victim = next(r for r in reversed(self._running) if r.id not in self._zombies)
                self._preempt(victim, out)
                if victim is request:
                    return False
            request.blocks += self.primary.allocate(extra) or []
        return self._grow_draft(request, length)

    def _grow_draft(self, request: SimRequest, length: int) -> bool:
        """Stock: the mirror pool follows every token; False (and the engine dead) when it cannot grow."""
        if self.draft is None or self.config.policy is Policy.PATCHED:
            return True
        per_seq = blocks_for(length, self.config.block_size)
        if per_seq > len(request.draft):
            wanted = per_seq - len(request.draft)
            request.draft += self.draft.allocate_upto(wanted)
            if len(request.draft) < per_seq:
                return self._die(self._resize_message(request, length), request)
        return True

    def _preempt(self, request: SimRequest, out: StepOutput) -> None:
        self._running.remove(request)
        self._free(request)
        request.state = State.WAITING
        request.preempted = True
        self._waiting.appendleft(request)
        self._preemptions += 1
        out.preempted.append(request.id)

    def _finish(self, request: SimRequest, out: StepOutput) -> None:
        self._running.remove(request)
        self._free(request)
        request.state = State.DONE
        del self._requests[request.id]
        reason = "length" if request.generated >= request.max_tokens else "stop"
        out.finished.append(Finished(request.id, reason, request.prompt_len, request.generated,
                                     max(request.cached_tokens, 0)))

    def _free(self, request: SimRequest) -> None:
        self.primary.release(request.blocks)
        if self.draft is not None:
            self.draft.release(request.draft)
        request.blocks, request.draft = [], []
        request.computed = request.registered = 0

    def _die(self, message: str, request: SimRequest) -> bool:
        self.death = ScriptedDeath(message, request.id, len(self._running) + len(self._waiting))
        return False

    def _resize_message(self, request: SimRequest, length: int) -> str:
        return f"Draft KV cache context resize failed for request {request.id}: could not resize to {length} tokens"

    def _page_index_message(self, request: SimRequest, length: int) -> str:
        needed = blocks_for(length, self.config.block_size)
        return (f"User-provided base page indices is too short: request {request.id} needs {needed} pages for "
                f"{length} tokens, the page-index table holds {self.table_width}")

    def stats(self) -> SchedulerStats:
        return SchedulerStats(
            running=len(self._running), waiting=len(self._waiting), preemptions=self._preemptions,
            prefix_queries=self._queried_tokens, prefix_hits=self._hit_tokens, rejected=self._rejected,
            primary_total=self.primary.num_blocks, primary_used=self.primary.num_used,
            primary_cached_free=self.primary.num_cached_free,
            draft_total=self.draft.num_blocks if self.draft else 0,
            draft_used=self.draft.num_used if self.draft else 0, dead=self.death is not None,
        )
