"""The profile's [workload] section: what traffic a run sends (seeded conversations or a trace), and the
structured answers it asks for."""

from __future__ import annotations

import re
from typing import Literal

from pydantic import Field, model_validator

from loadrepro.config.agent_spec import AgentSpec
from loadrepro.config.section import Section

# What a structured request asks for: JSON (response_format), vLLM's structured_outputs (a choice, a regex, a
# grammar), or a call of a tool it defines (tools, with tool_choice naming it). Answers to a grammar are counted,
# not checked: checking them needs the engine's grammar parser; nor are those to a structured_outputs kind loadrepro
# does not know (a trace's, named "other").
StructuredFormat = Literal["json_schema", "json_object", "choice", "regex", "grammar", "tools"]
UNCHECKED_FORMATS = frozenset({"grammar", "other"})
# The trace formats workload/trace_formats.py reads.
TraceFormat = Literal["mooncake", "bailian", "azure", "burstgpt", "sharegpt", "openai-log", "weka", "dag"]


class WorkloadSpec(Section):
    kind: Literal["conversations", "trace", "agents"] = Field(
        "conversations",
        description=("conversations: seeded prefix-shared multi-turn conversations; trace: replay a trace file "
                     "(trace_format), sessions as sessions; agents: agent sessions from the seed ([workload.agents])."))
    trace: str = Field("", description="The trace file (kind = 'trace').")
    trace_format: Literal["auto", TraceFormat] = Field(
        "auto", description="The trace's format: mooncake, bailian, azure, burstgpt, sharegpt, openai-log, weka or "
        "dag (agent traces); auto decides from its content and says what it chose.")
    trace_block_tokens: int = Field(
        0, ge=0, description="Tokens per hash id of the trace (its block size); 0: the format's own (mooncake "
        "512, bailian 16, weka the file's block_size).")
    trace_speed: float = Field(1.0, gt=0, description="> 1 replays the trace's timestamps (and think times) that "
                               "many times faster; < 1 slower.")
    trace_start_s: float = Field(0.0, ge=0, description="Replay the trace from this many seconds after its first "
                                 "timestamp (a session is replayed when its first turn is in the window).")
    trace_duration_s: float = Field(0.0, ge=0, description="> 0: replay this many seconds of the trace from "
                                    "trace_start_s; 0: to its end.")
    trace_max_requests: int = Field(0, ge=0, description="> 0: replay at most this many of the trace's requests.")
    trace_idle_cap_s: float = Field(
        0.0, ge=0, description="> 0: every gap between the trace's request starts, and every think time, longer than "
        "this many seconds (after trace_speed) is cut to it; 0: as recorded.")
    trace_pacing: Literal["recorded", "end_to_start", "think_only"] = Field(
        "recorded", description="When a session's later turn is sent. recorded: at its recorded time, and no sooner "
        "than its think time after the turn before answered; end_to_start: the recorded gap after the turn before "
        "answered, from that answer's recorded end (its start plus its recorded duration, WEKA's api_time; the "
        "start alone where the trace gives none) to this turn's start; think_only: its recorded think time after "
        "the turn before answered, nothing more. A session's first turn keeps its recorded time in every mode.")
    trace_max_sessions: int = Field(
        0, ge=0, description="> 0: replay at most this many of the trace's sessions, the first to begin (a request "
        "of no session counts as one).")
    trace_length_percent: int = Field(
        100, ge=1, le=1000, description="Token-count traces: prompt and output lengths, and the block size with "
        "them (at least 16 tokens) so the same blocks are still shared, at this percent of the trace's.")
    trace_history: Literal["recorded", "live"] = Field(
        "recorded", description="Text traces (sharegpt, openai-log), chat-form APIs: recorded: a later turn's "
        "history holds the recorded answers, so every run sends the same bytes, stock and patched alike; live: the "
        "engine's own answers, as an agent would see them (its prompt lengths then are not checked).")
    session_header: str = Field(
        "", pattern=r"^[A-Za-z0-9!#$%&'*+.^_`|~-]*$", description="A header name (e.g. x-session-id) sent with every "
        "request, its value the request's session: a trace's session (an agent's or subagent's), or "
        "conversation-N; for routers that keep a session on one replica. Empty: no header.")
    cache_bust: Literal["none", "tree"] = Field(
        "none", description="tree: a marker unique to the run and the tree ([rid:...]) starts the first message of "
        "every request of a tree (an agent and its subagents, or a conversation), so that a run meets no prefix "
        "cache an earlier run (a trial, a sweep level) warmed; the tree's own requests still share theirs.")
    trace_tool_messages: Literal["tool", "user"] = Field(
        "tool", description="Agent traces (weka): a tool result after a reply that stopped for a tool is sent as a "
        "`tool` message answering the assistant's tool call (tool), or as plain user text (user).")
    trajectory_start: tuple[float, float] = Field(
        (0.0, 0.0), description="Agent traces and agent sessions: a mid-trajectory start. Each tree (an agent and "
        "its subagents) starts at a point drawn from the seed uniformly between these two fractions of its recorded "
        "span (its times; else its requests' order). Its requests before the point are not sent, except the last "
        "one of each session that goes on past it: that one is a warm-up, sent with its whole history and "
        "max_tokens 1 before the load and not judged. The tree's later requests keep their gaps, from the tree's "
        "start. [0, 0]: every tree from its beginning.")
    agents: AgentSpec = Field(AgentSpec(), description="kind = 'agents': the agents, their tools and subagents.")
    seed: int = Field(7, description="Seeds every random choice: the same seed, the same workload.")
    conversations: int = Field(12, ge=1, description="Conversations in the plan (a soak repeats the plan).")
    groups: int = Field(
        0, ge=0, description="> 0: conversations share one of this many group documents besides the common prefix.")
    group_prefix_tokens: int = Field(
        0, ge=0, description="groups > 0: tokens of the shared group document (0: half the prefix).")
    turns: int = Field(
        2, ge=1, description="Turns per conversation: a warm-up, then the follow-ups that reuse its prefix.")
    prefix_tokens: int = Field(
        81000, ge=64,
        description="Tokens of the prefix a conversation's turns share (the p50 when prefix_tokens_p95 is set).")
    prefix_tokens_p95: int = Field(
        0, ge=0, description="> prefix_tokens: prefix lengths spread log-normally with this p95 (0: all alike).")
    turn_tokens: int = Field(600, ge=1, description="Tokens each later turn adds.")
    max_tokens: int = Field(32768, ge=1, description="Output tokens asked of each follow-up turn.")
    warm_max_tokens: int = Field(1, ge=1, description="Output tokens asked of each warm-up (first) turn.")
    ignore_eos: bool = Field(
        True, description="Ask the engine to ignore end-of-sequence, so every answer is max_tokens long.")
    stream: float = Field(
        1.0, ge=0, le=1,
        description="Whether requests stream their answers: true (every request), false (none), or the share that "
        "do, drawn per request from the seed. A request that does not stream has no time to first token (its end "
        "to end latency is kept), is judged by request_timeout_s alone (its silence is its answer being made), and "
        "is never taken for an answer under way (cancel_fraction cancels streams; an abort burst takes whole answers "
        "only to make up its count, as clients that leave before the answer came).")
    structured_share: float = Field(
        0.0, ge=0, le=1, description="The share of chat requests (of 16 output tokens or more) that ask for a "
        "structured answer (response_format), drawn per request from the seed; each such answer that completes must "
        "parse as JSON (rule structured_output).")
    structured_format: StructuredFormat | list[StructuredFormat] = Field(
        "json_schema", description="What they ask for: json_schema (an object of one boolean, strict), json_object "
        "(both as response_format), or vLLM's structured_outputs: choice (one of structured_choices), regex "
        "(structured_regex) or grammar (structured_grammar); or tools: one tool defined, tool_choice naming it, "
        "whose arguments are the JSON object of json_schema. A list: each structured request asks for one of them, "
        "drawn from the seed. Answers must parse as JSON (a tool call's arguments included), be one of the choices, "
        "or match the regex; answers to a grammar are counted, not checked.")
    structured_choices: list[str] = Field(
        ["yes", "no"], min_length=1, description="The choices a `choice` request offers; its answer must be one.")
    structured_regex: str = Field(
        r"(yes|no), case [0-9]{1,3}", description="The regular expression a `regex` request asks the answer to "
        "match; checked whole with Python's re (so it must compile there too).")
    structured_grammar: str = Field(
        'root ::= ("yes" | "no") ", case " [0-9] [0-9]?', description="The grammar a `grammar` request sends "
        "(EBNF as vLLM's structured_outputs takes it; the engine's backend must accept it).")

    @property
    def structured_formats(self) -> list[StructuredFormat]:
        f = self.structured_format
        return list(f) if isinstance(f, list) else [f]

    @model_validator(mode="after")
    def _consistent(self) -> WorkloadSpec:
        if self.kind == "trace" and not self.trace:
            raise ValueError("kind = 'trace' needs workload.trace, the path of a trace file")
        if self.prefix_tokens_p95 and self.prefix_tokens_p95 <= self.prefix_tokens:
            raise ValueError("prefix_tokens_p95 must be greater than prefix_tokens (the p50), or 0")
        if self.groups > self.conversations:
            raise ValueError("groups cannot exceed conversations")
        if self.group_prefix_tokens >= self.prefix_tokens:
            raise ValueError("group_prefix_tokens must be smaller than prefix_tokens")
        low, high = self.trajectory_start
        if not 0 <= low <= high <= 1:
            raise ValueError("trajectory_start: two fractions of a tree's span, 0 <= first <= second <= 1")
        if high and self.kind == "conversations":
            raise ValueError("trajectory_start: for agent traces and agent sessions (kind = 'trace' or 'agents')")
        if isinstance(self.structured_format, list) and not self.structured_format:
            raise ValueError("structured_format: name at least one format")
        try:
            re.compile(self.structured_regex)
        except re.error as exc:
            raise ValueError(f"structured_regex does not compile ({exc}); answers are checked against it") from exc
        return self
