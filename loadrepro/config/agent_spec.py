"""[workload.agents]: agent sessions generated from the seed (`[workload] kind = "agents"`), for users without an
agent trace. Each agent shares one tools and system prompt with every other, gives a task, then calls a tool after
each answer and sends its result back; subagents start fresh from the same prompt, and the agent waits for them."""

from __future__ import annotations

from pydantic import Field, model_validator

from loadrepro.config.section import Section


class AgentSpec(Section):
    agents: int = Field(4, ge=1, description="Agents (each with the subagents it spawns: a tree).")
    turns: int = Field(6, ge=1, description="Requests per agent: its task, then one per tool result.")
    block_tokens: int = Field(64, ge=16, description="Tokens per block of text: prompts are whole blocks, and a "
                              "block is one text wherever it appears.")
    system_tokens: int = Field(2048, ge=0, description="The tools and system prompt every agent and subagent "
                               "begins with.")
    task_tokens: int = Field(512, ge=1, description="Each agent's (and subagent's) task: its first user message.")
    tool_result_tokens: int = Field(600, ge=1, description="A tool result's tokens, the median.")
    tool_result_tokens_p95: int = Field(0, ge=0, description="A tool result's tokens, the 95th percentile: lognormal "
                                        "between the two (0: every result is tool_result_tokens).")
    reply_tokens: int = Field(128, ge=1, description="Each answer's tokens (max_tokens), and its recorded length in "
                              "the next request's history.")
    tool_latency_s: float = Field(0.2, ge=0, description="Seconds a tool runs: from an answer to the next request.")
    subagent_probability: float = Field(0.0, ge=0, le=1, description="The chance an agent spawns subagents after "
                                        "an answer (not after its last).")
    subagent_fanout: int = Field(2, ge=1, description="Subagents spawned at once, run in parallel; the agent's next "
                                 "request waits for them.")
    subagent_turns: int = Field(3, ge=1, description="Requests per subagent.")
    context_limit_tokens: int = Field(0, ge=0, description="> 0: a request that would be longer is compacted "
                                      "instead: the system prompt, the task and a summary (0: never).")
    summary_tokens: int = Field(512, ge=1, description="A compaction's summary, in tokens.")

    @model_validator(mode="after")
    def _consistent(self) -> AgentSpec:
        if self.tool_result_tokens_p95 and self.tool_result_tokens_p95 <= self.tool_result_tokens:
            raise ValueError("tool_result_tokens_p95 must be greater than tool_result_tokens (the median), or 0")
        least = self.system_tokens + self.task_tokens + self.summary_tokens + self.block_tokens
        if self.context_limit_tokens and self.context_limit_tokens < least:
            raise ValueError(f"context_limit_tokens must leave room for the system prompt, the task and a summary "
                             f"and one block ({least} tokens)")
        return self
