"""`trace inspect` and `trace anonymize`: a trace's numbers, and a copy of a text trace without its text, with
lengths counted in the target's tokens (a local tokenizer, the target's tokenize endpoint) or, given neither,
the simulated engine's."""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator, Callable
from pathlib import Path

from loadrepro.errors import UsageError
from loadrepro.load.target import check_base_url, discover_model
from loadrepro.load.transport import Transport
from loadrepro.workload.anonymize import Anonymized, Output, anonymize
from loadrepro.workload.tokens import HttpTokenCounter, LocalTokenizerCounter, SimTokenCounter, detect_counter
from loadrepro.workload.trace_stats import TraceStats, inspect_trace

Counter = SimTokenCounter | LocalTokenizerCounter | HttpTokenCounter


@contextlib.asynccontextmanager
async def _counter(tokenizer: Path | None, base_url: str | None, api_key: str | None, model: str | None,
                   target_is_isolated: bool) -> AsyncIterator[Counter]:
    if tokenizer is not None and base_url is not None:
        raise UsageError("give --tokenizer or --base-url, not both")
    if tokenizer is not None:
        yield LocalTokenizerCounter(tokenizer)
        return
    if base_url is None:
        yield SimTokenCounter()
        return
    async with Transport(check_base_url(base_url, target_is_isolated), api_key) as http:
        yield await detect_counter(http, model or await discover_model(http))


async def inspect_command(path: Path, trace_format: str, block_tokens: int, tokenizer: Path | None = None,
                          base_url: str | None = None, api_key: str | None = None, model: str | None = None,
                          target_is_isolated: bool = False) -> TraceStats:
    async with _counter(tokenizer, base_url, api_key, model, target_is_isolated) as counter:
        return await inspect_trace(path, trace_format, block_tokens, counter)


async def anonymize_command(path: Path, output: Path, trace_format: str, block_tokens: int,
                            tokenizer: Path | None = None, base_url: str | None = None, api_key: str | None = None,
                            model: str | None = None, target_is_isolated: bool = False,
                            progress: Callable[[int], None] | None = None, to: str = "auto") -> Anonymized:
    if output.resolve() == path.resolve():
        raise UsageError("-o must not be the input trace")
    async with _counter(tokenizer, base_url, api_key, model, target_is_isolated) as counter:
        written: Output = "weka" if to == "weka" else "mooncake" if to == "mooncake" else "auto"
        return await anonymize(path, output, trace_format, counter, block_tokens, progress, written)
