"""The reproducer bundle's README, written for the engine's maintainer: what failed, in a title of the run's own
(not the profile's), the engine command and its flags as given, the model and the tokenizer the lengths are counted
in and how to get one like it, and the engine log's last lines and most repeated warnings."""

from __future__ import annotations

import json
import re
import shlex
from dataclasses import dataclass
from pathlib import Path
from urllib.parse import urlsplit

from loadrepro.judge.diagnose import LogDigest
from loadrepro.records import FAILED
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.export import DEFERRED_BODIES_WRITTEN, DEFERRED_PROMPT_TOKENS_WRITTEN

# What an engine command names, by a word in it: the engine a maintainer of which reads the bundle.
_ENGINES = (("llama-server", "llama.cpp"), ("llamacpp", "llama.cpp"), ("llama_cpp", "llama.cpp"),
            ("loadrepro sim", "simulated engine"), ("loadrepro.sim", "simulated engine"), ("vllm", "vLLM"),
            ("sglang", "SGLang"), ("trtllm", "TensorRT-LLM"), ("tensorrt_llm", "TensorRT-LLM"))
_COUNTED_BY = re.compile(r"\((vLLM|SGLang|llama\.cpp)\)")  # workload/tokens.py's words: "POST /tokenize (vLLM)"
_MODEL_FLAGS = ("-m", "--model", "-hf", "--hf-repo", "--model-path", "--model_path")
_TINY_GGUF = re.compile(r"loadrepro-engines/models/gguf-([\w]+)-[0-9a-f]+/")
_TITLE_CHARS = 120
ENGINE_LOG_TAIL = 200  # lines of the engine log the bundle ships
README_LOG_LINES = 30  # of those, the README shows the last


def engine_of(report: RunReport) -> str:
    """The engine the run met: the one its signatures are of, else the one its command names, else the one whose
    tokenize endpoint counted its lengths (a target loadrepro did not start); "" when unknown."""
    if report.diagnosis is not None and report.diagnosis.engine:
        return report.diagnosis.engine
    command = (report.target.engine_cmd or "").lower()
    named = next((name for word, name in _ENGINES if word in command), "")
    counted = _COUNTED_BY.search(report.workload.calibration_source)
    return named or (counted.group(1) if counted else "")


def _error_message(detail: str) -> str:
    """An error body's own message (`{"error": {"message": ...}}`), else its first words."""
    try:
        body = json.loads(detail)
    except (ValueError, TypeError):
        return " ".join(detail.split())[:80]
    error = body.get("error", body) if isinstance(body, dict) else body
    message = error.get("message") if isinstance(error, dict) else error
    return " ".join(str(message).split())[:80]


def _failed_outcomes(report: RunReport) -> list[tuple[str, int]]:
    """Every failed outcome of the run with its count, the most first: the judge's own failures (FAILED)."""
    counted = [(o.value, report.requests.by_outcome.get(o.value, 0)) for o in FAILED]
    return sorted(((o, n) for o, n in counted if n), key=lambda kv: (-kv[1], kv[0]))


def default_title(report: RunReport) -> str:
    """The run in one line: the engine, how many requests failed and with which outcomes, and the first failure's
    message, else the first reason; a pass says so."""
    engine = engine_of(report) or "engine"
    if report.verdict == "pass":
        return f"{engine}: passed ({report.profile['name']}, {report.requests.total:,} requests)"
    first = report.first_failure
    if first is None:
        return f"{engine}: {report.reasons[0] if report.reasons else 'failed'}"[:_TITLE_CHARS]
    outcomes = _failed_outcomes(report) or [(first.outcome, 1)]
    failed = sum(n for _, n in outcomes)
    named = outcomes[0][0] if len(outcomes) == 1 else ", ".join(f"{o} {n:,}" for o, n in outcomes)
    # a stream's error came in a 200; a status is said only when it is every failure's outcome
    status = f"HTTP {first.status} " if first.status and first.status >= 400 and len(outcomes) == 1 else ""
    words = (f"{engine}: {failed:,} of {report.requests.total:,} requests failed ({named}), "
             f"{status}\"{_error_message(first.detail)}\"")
    return words if len(words) <= _TITLE_CHARS else words[:_TITLE_CHARS - 1] + "…"


@dataclass(frozen=True, slots=True)
class Model:
    """The model an engine command serves, as given, and how a maintainer gets one like it."""

    given: str
    how: str


def _model_given(command: str) -> str:
    try:
        words = shlex.split(command)
    except ValueError:
        words = command.split()
    given = ""
    for i, word in enumerate(words[:-1]):  # the last one given: `python -m MODULE ... -m MODEL` serves MODEL
        if word in _MODEL_FLAGS or (word == "serve" and not words[i + 1].startswith("-")):  # `vllm serve MODEL`
            given = words[i + 1]
    return given or next((w for w in words if w.endswith(".gguf")), "")


def model_of(report: RunReport) -> Model | None:
    given = _model_given(report.target.engine_cmd or "")
    if not given:
        return None
    tiny = _TINY_GGUF.search(given)
    if tiny:
        how = (f"a random-weight GGUF loadrepro makes for its tests: `scripts/engines/gguf.sh {tiny.group(1)}` in "
               "loadrepro's repository writes the same file")
    elif given.endswith(".gguf"):
        how = (f"the GGUF file `{Path(given).name}`: the same file, or one of the same model and quantisation "
               "(its tokenizer is the one the lengths are counted in)")
    elif "/" in given and not given.startswith(("/", ".", "~")):
        how = f"from the Hugging Face Hub: `huggingface-cli download {given}`"
    else:
        how = f"the model folder `{Path(given).name}` (its config.json and tokenizer files)"
    return Model(given, how)


def _engine_section(report: RunReport, template: str | None) -> list[str]:
    lines = ["## The engine", ""]
    engine = engine_of(report)
    if report.target.engine_cmd and template:
        port = urlsplit(report.target.base_url).port
        lines += [f"{engine or 'The engine'}, started by loadrepro with this command, its flags as given (put the port "
                  "to serve on where `{port}` is, and the address where `{host}` is, if there):", "",
                  "```bash", _one_flag_a_line(template), "```", "",
                  f"This run's engine had port {port}: `{report.target.engine_cmd}`.", ""]
    elif report.target.engine_cmd:
        lines += [f"{engine or 'The engine'}, started by loadrepro with this command (its flags as given):", "",
                  "```bash", _one_flag_a_line(report.target.engine_cmd), "```", ""]
    else:
        lines += [f"{engine or 'The engine'} at {report.target.base_url}, started outside loadrepro: its command "
                  "is not known to this bundle; add it.", ""]
    model = model_of(report)
    lines.append(f"- model asked for: `{report.target.model}`"
                 + (f", served from `{model.given}`; to get one like it: {model.how}" if model else ""))
    lines.append(f"- the workload's lengths are in that model's own tokens, counted by "
                 f"{report.workload.calibration_source}; prompts planned p50 {report.workload.prompt_tokens.p50:,} "
                 f"/ max {report.workload.prompt_tokens.max:,} tokens")
    if report.diagnosis is not None:
        lines.append(f"- next step: {report.diagnosis.next_step}")
    return lines + [""]


def _one_flag_a_line(command: str) -> str:
    """The command as given, broken before each flag so that each reads on a line of its own."""
    return re.sub(r" (?=--?[A-Za-z])", " \\\n  ", command)


def _log_section(digest: LogDigest | None) -> list[str]:
    if digest is None:
        return ["## The engine log", "", "loadrepro did not start the engine, so it kept no log of it.", ""]
    lines = ["## The engine log", "", f"{digest.lines:,} lines; `engine-log-tail.txt` holds its last "
             f"{min(digest.lines, ENGINE_LOG_TAIL):,}.", ""]
    if digest.repeated:
        lines += ["Its most repeated warnings and errors (numbers made N):", "", "| times | line |", "|---:|---|"]
        lines += [f"| {n:,} | `{text.replace('|', '/').replace('`', chr(39))}` |" for text, n in digest.repeated]
        lines.append("")
    shown = digest.tail[-README_LOG_LINES:]
    return lines + [f"Its last {len(shown)} lines:", "", "```text", *shown, "```", ""]


def readme(report: RunReport, title: str, digest: LogDigest | None, engine_template: str | None = None) -> str:
    """The README; `engine_template`: the engine command as the user gave it ({port} unfilled), shown rather than
    the command the run filled in, when known."""
    profile = report.profile
    lines = [f"# {title}", "", f"Verdict: **{report.verdict.upper()}** ({report.label}, {report.requests.total:,} "
             "requests: " + ", ".join(f"{k} {v:,}" for k, v in report.requests.by_outcome.items()) + ")", "",
             "## What happened", ""]
    lines += [f"- {reason}" for reason in report.reasons] or ["- no rule fired"]
    if report.first_failure:
        f = report.first_failure
        lines += ["", f"First failure: request {f.request} (conversation {f.conversation}, turn {f.turn}) at "
                      f"{f.t_s:.1f} s, `{f.outcome}`: {' '.join(f.detail.split())[:300]}"]
    if report.signatures:
        lines += ["", "| error text | class | requests (failed) | log lines |", "|---|---|---:|---:|"]
        lines += [f"| {s.name} | {s.class_} | {s.requests} ({s.failed_requests}) | {s.log_lines} |"
                  for s in report.signatures]
    lines += ["", *_engine_section(report, engine_template), *_log_section(digest),
              "## What was run", "", f"- command: `{report.command}`",
              f"- target: {report.target.base_url} (model `{report.target.model}`)",
              f"- workload: loadrepro's profile `{profile['name']}`"
              + (f" ({profile['description']})" if profile.get("description") else ""),
              f"- loadrepro {report.environment.loadrepro_version}, Python {report.environment.python}",
              "", "## Reproduce", "",
              "With loadrepro installed, from this folder:", "", "```bash",
              "loadrepro run --profile profile.toml --base-url http://HOST:PORT", "```", "",
              "Without it (Python 3.11 or newer, standard library only), replaying the exact payloads:", "",
              "```bash", "python3 replay.py --base-url http://HOST:PORT", "```", "",
              "`replay.py` exits 1 when the engine failed and 0 when it passed.", *_sent_as_the_run_did(report),
              *_answers_readme(report),
              "", "## Files", "",
              "- `report.md`, `report.json`: the full report", "- `profile.toml`: the resolved profile",
              "- `workload.jsonl.gz`: the request bodies and their schedule (a long trace's run: the first "
              f"{DEFERRED_BODIES_WRITTEN:,} requests' bodies, at most {DEFERRED_PROMPT_TOKENS_WRITTEN:,} prompt "
              "tokens of them; `profile.toml` and the trace rebuild the rest)",
              "- `requests.jsonl`: what each request did",
              "- `timeline.png`, `latency.png`: the run's pictures; `report.html`: its charts, to zoom into",
              "- `answers.json`: the wrong answers, when the run found any",
              "- `engine-log-tail.txt`: the engine log's last lines (when loadrepro started the engine)",
              "- `engine-log-excerpt.txt`: the engine log up to its first fatal line (when there is one)",
              "- `replay.py`, `replay.json`: the standalone replay (`check_answers.py`: its --check-answers)", ""]
    return "\n".join(lines)


def _sent_as_the_run_did(report: RunReport) -> list[str]:
    """What replay.py sends besides the requests' bodies, as the run did: the warm-ups before the load, the session
    header with each request."""
    load, workload = report.profile.get("load", {}), report.profile.get("workload", {})
    lines = []
    if warmups := load.get("warmup_requests", 0):
        lines.append(f"- The run sent {warmups} warm-up requests before its load (`[load] warmup_requests`, not "
                     "judged): `replay.py` sends them first too, as the run did; `--no-warmups` leaves them out, to "
                     "see whether the failure needs a cold engine.")
    if header := workload.get("session_header", ""):
        lines.append(f"- Each request carries the `{header}` header the run sent it with (`[workload] "
                     "session_header`), for a router that keeps a session on one replica.")
    return ["", *lines] if lines else []


def _answers_readme(report: RunReport) -> list[str]:
    if report.outputs is None or not report.outputs.worst:
        return []
    return ["", f"Wrong answers: `answers.json` holds the {len(report.outputs.worst)} the run found, each with its "
            "request body and both answers (under load, and the same request alone) with their logprobs. To check "
            "them again (each request alone, then under the run's traffic; exit 1 when a wrong answer comes back):",
            "", "```bash", "python3 replay.py --base-url http://HOST:PORT --check-answers", "```"]
