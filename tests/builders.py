"""Hand-built RunResults for testing rules and reports without a run."""

from __future__ import annotations

from loadrepro.judge.measurements import measure
from loadrepro.judge.signatures import CATALOG
from loadrepro.load.watch.metrics_scrapes import canonical
from loadrepro.records import HealthSample, LogMatch, MetricsSample, Note, Outcome, RequestRecord, RunResult, StopReason

S = 1_000_000_000  # one second in ns
START = 100 * S


def record(id: int, outcome: Outcome = Outcome.OK, end_s: float = 1.0, turn: int = 1, conversation: int = 0,
           detail: str = "", status: int | None = 200, cached: int | None = None, shared: int = 0,
           signature: str | None = None, retries: int = 0, tokens: int = 4,
           signature_class: str | None = None) -> RequestRecord:
    """`signature_class` defaults to the built-in catalog's class of `signature`."""
    sent = START + int((end_s - 0.5) * S)
    first = sent + int(0.1 * S) if outcome is Outcome.OK else None
    chunks = tuple(first + i * int(0.01 * S) for i in range(tokens)) if first else ()
    return RequestRecord(
        id=id, conversation=conversation, turn=turn, outcome=outcome, detail=detail, status=status,
        wall_time=1_800_000_000.0 + end_s, queued_ns=sent - int(0.05 * S), sent_ns=sent, first_byte_ns=sent + 1000,
        first_token_ns=first, end_ns=START + int(end_s * S), chunk_ns=chunks,
        finish_reason="length" if outcome is Outcome.OK else None, prompt_tokens=1000,
        completion_tokens=tokens if outcome is Outcome.OK else None, cached_tokens=cached,
        expected_prompt_tokens=1000, shared_prefix_tokens=shared, max_tokens=tokens, retries=retries,
        first_content_ns=first, signature=signature, signature_class=signature_class or next(
            (s.klass.value for s in CATALOG if s.name == signature), None))


def health(*statuses: int | str, every_s: float = 1.0, start_s: float = 0.0) -> tuple[HealthSample, ...]:
    return tuple(HealthSample(START + int((start_s + i * every_s) * S), s, 1000) for i, s in enumerate(statuses))


def result(records=(), health_samples=None, post: int | str | None = 200, metrics=(), log_matches=(),
           log_context=(), notes=(), interrupted: bool = False, duration_s: float = 5.0) -> RunResult:
    samples = health(200, 200, 200, 200, 200) if health_samples is None else health_samples
    return RunResult(
        label="stock", base_url="http://127.0.0.1:8000", model="tiny", engine_cmd=None, seed=7,
        started_at="2026-11-30T00:00:00+00:00", start_ns=START, end_ns=START + int(duration_s * S),
        records=tuple(records), health=samples,
        post_health=HealthSample(START + int(duration_s * S), post, 1000) if post is not None else None,
        metrics=tuple(metrics), log_matches=tuple(log_matches), log_context=tuple(log_context), notes=tuple(notes),
        stop_reason=StopReason.INTERRUPTED if interrupted else StopReason.DONE, interrupted=interrupted)


def metrics(t_s: float, **values: float) -> MetricsSample:
    """A scrape of an engine's own series (`vllm__num_requests_waiting=2`), mapped as a scrape maps them."""
    return MetricsSample(START + int(t_s * S), canonical({k.replace("__", ":"): v for k, v in values.items()}))


def log_match(t_s: float, line: str, signature: str, klass: str = "F", number: int = 10) -> LogMatch:
    return LogMatch(START + int(t_s * S), number, signature, klass, line)


def note(t_s: float, source: str, text: str) -> Note:
    return Note(START + int(t_s * S), source, text)


def ruled(rule, run: RunResult, spec):
    """What a rule that reads the judgement's measurements finds of `run`, given them as the judge would."""
    return rule(run, spec, measure(run, spec))
