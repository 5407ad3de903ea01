"""A few plain lines about a finished run, for the terminal."""

from __future__ import annotations

from collections import Counter

from loadrepro.records import RunResult


def describe_run(result: RunResult) -> list[str]:
    outcomes = Counter(r.outcome.value for r in result.records)
    lines = [f"{len(result.records)} requests in {(result.end_ns - result.start_ns) / 1e9:.1f} s: "
             + ", ".join(f"{k} {v}" for k, v in sorted(outcomes.items())),
             f"stopped: {result.stop_reason}; /health after the run: "
             f"{result.post_health.status if result.post_health else 'not watched'}"]
    fatal = next((m for m in result.log_matches if m.klass == "F"), None)
    if fatal is not None:
        lines.append(f"first fatal engine log line ({fatal.signature}): {fatal.line}")
    lines.extend(f"note ({n.source}): {n.text}" for n in result.notes)
    return lines
