#!/usr/bin/env python3
"""Replay a loadrepro bundle's exact requests against an OpenAI-compatible engine. Standard library only.

    python replay.py --base-url http://127.0.0.1:8000 [--model NAME] [--concurrency N] [--api-key-env VAR]
                     [--no-warmups]
    python replay.py --base-url http://127.0.0.1:8000 --check-answers [--copies N]

Reads workload.jsonl.gz and replay.json beside this file (and check_answers.py for --check-answers). Conversations
run concurrently (at most --concurrency requests in flight), their turns in order; trace requests start at their
recorded offsets; an agent's subagents start once the turn that spawned them answered, and a turn that joins them
waits for them to end. Each request carries the headers the run sent with it (a session header). The warm-ups the
run sent before its load (the engine's, [load] warmup_requests, then a mid-trajectory start's) are sent first, as the
run did, and not judged; --no-warmups leaves them out (does the failure need a cold engine?). /health is checked
before and after. Prints each request's outcome, the first failure and the
post-run health; exits 1 when the engine failed (a 5xx, an error inside a stream, a cut or stalled stream, a fatal
error text, or /health not 200 after the run), 0 otherwise; clean 4xx rejections are not failures. An API key is
read from $OPENAI_API_KEY (or --api-key-env's).

--check-answers re-checks the wrong answers in answers.json (check_answers.py says how).
"""

from __future__ import annotations

import argparse
import asyncio
import gzip
import importlib
import json
import os
import re
import sys
import time
from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

HERE = Path(__file__).resolve().parent
FAILURES = ("server_error", "stream_error", "truncated", "protocol_error", "stalled", "timeout", "unreachable")
PATHS = {"chat": "/v1/chat/completions", "completions": "/v1/completions", "responses": "/v1/responses",
         "messages": "/v1/messages"}


class Target:
    def __init__(self, base_url: str, stall_s: float, timeout_s: float, api_key: str | None = None) -> None:
        parts = urlsplit(base_url)
        if parts.scheme != "http" or not parts.hostname:
            sys.exit(f"--base-url must be an http:// URL, got {base_url!r}")
        self.host, self.port = parts.hostname, parts.port or 80
        self.prefix = parts.path.rstrip("/")
        self.stall_s, self.timeout_s = stall_s, timeout_s
        self.auth = [f"Authorization: Bearer {api_key}"] if api_key else []

    async def open(self, method: str, path: str, body: bytes | None = None, wait_s: float | None = None,
                   extra: list[list[str]] | None = None) -> tuple[
            int, dict[str, str], asyncio.StreamReader, asyncio.StreamWriter]:
        """Send a request with the `extra` headers ([name, value] pairs); (status, headers, reader, writer) once the
        response headers are in, each read waiting at most `wait_s` (default stall_s)."""
        wait_s = wait_s or self.stall_s
        reader, writer = await asyncio.wait_for(asyncio.open_connection(self.host, self.port), 10)
        head = [f"{method} {self.prefix}{path} HTTP/1.1", f"Host: {self.host}:{self.port}", "Connection: close",
                "Accept: text/event-stream, application/json", *self.auth,
                *(f"{name}: {value}" for name, value in extra or ())]
        if body is not None:
            head += ["Content-Type: application/json", f"Content-Length: {len(body)}"]
        writer.write(("\r\n".join(head) + "\r\n\r\n").encode() + (body or b""))
        await writer.drain()
        status_line = await asyncio.wait_for(reader.readline(), wait_s)
        if not status_line:
            raise ConnectionError("the connection closed before a response")
        status = int(status_line.split()[1])
        headers: dict[str, str] = {}
        while True:
            line = await asyncio.wait_for(reader.readline(), wait_s)
            if line in (b"\r\n", b"\n", b""):
                break
            name, _, value = line.decode("latin-1").partition(":")
            headers[name.strip().lower()] = value.strip()
        return status, headers, reader, writer

    async def body(self, headers: dict[str, str], reader: asyncio.StreamReader,
                   wait_s: float | None = None) -> AsyncIterator[bytes]:
        """The response body in pieces, de-chunked; a read that waits `wait_s` (default stall_s) raises
        TimeoutError."""
        wait_s = wait_s or self.stall_s
        if headers.get("transfer-encoding", "").lower() == "chunked":
            while True:
                size_line = await asyncio.wait_for(reader.readline(), wait_s)
                if not size_line:
                    raise ConnectionError("the connection closed inside a chunked body")
                size = int(size_line.split(b";")[0].strip() or b"0", 16)
                if size == 0:
                    return
                data = await asyncio.wait_for(reader.readexactly(size + 2), wait_s)
                yield data[:-2]
        elif "content-length" in headers:
            yield await asyncio.wait_for(reader.readexactly(int(headers["content-length"])), wait_s)
        else:
            while data := await asyncio.wait_for(reader.read(65536), wait_s):
                yield data

    async def get(self, path: str) -> tuple[int | str, bytes]:
        return await self.request("GET", path)

    async def request(self, method: str, path: str) -> tuple[int | str, bytes]:
        """A bodiless request's status and body ("unreachable" when none came)."""
        try:
            status, headers, reader, writer = await self.open(method, path, b"" if method == "POST" else None)
            data = b"".join([piece async for piece in self.body(headers, reader)])
            writer.close()
            return status, data
        except (TimeoutError, OSError, asyncio.IncompleteReadError, ValueError):
            return "unreachable", b""


def classify_status(status: int, text: str, fatal: list[re.Pattern[str]]) -> str:
    if status == 429 or status == 503 and "retry" in text.lower():
        return "throttled"
    if 400 <= status < 500:
        return "server_error" if any(p.search(text) for p in fatal) else "rejected"
    return "server_error" if status >= 500 else "protocol_error"


async def send(target: Target, path: str, body: dict[str, Any], fatal: list[re.Pattern[str]],
               answer: dict[str, Any] | None = None, headers: list[list[str]] | None = None) -> tuple[str, str]:
    """One request, with the headers the run sent it with: (outcome, detail); its text and logprobs go into `answer`
    when given."""
    content = json.dumps(body).encode()
    deadline = asyncio.timeout(target.timeout_s)
    answered = False
    try:
        async with deadline:
            # A whole answer (stream false) says nothing until it is made: only the request's timeout bounds it.
            wait_s = None if body.get("stream", False) else target.timeout_s
            status, got, reader, writer = await target.open("POST", path, content, wait_s, headers)
            answered = True
            try:
                if status != 200:
                    text = b"".join([p async for p in target.body(got, reader)]).decode(errors="replace")
                    return classify_status(status, text, fatal), text[:2000]
                if "text/event-stream" not in got.get("content-type", ""):
                    data = json.loads(b"".join([p async for p in target.body(got, reader, wait_s)]))
                    error = error_of(data)
                    if error:
                        return "stream_error", error
                    whole = data.get("choices") or data.get("object") == "response" or data.get("type") == "message"
                    return ("ok", "") if whole else ("protocol_error", "no answer in the response")
                return await read_stream(target, got, reader, answer)
            finally:
                writer.close()
    except TimeoutError:
        if deadline.expired():
            return "timeout", "the request exceeded its timeout"
        return "stalled", "no byte within the stall timeout"
    except asyncio.IncompleteReadError as exc:
        return "truncated", f"the connection closed early: {exc}"
    except ConnectionRefusedError as exc:
        return "unreachable", str(exc)
    except OSError as exc:
        return ("truncated" if answered else "unreachable"), str(exc)
    except (json.JSONDecodeError, ValueError, KeyError) as exc:
        return "protocol_error", str(exc)


def error_of(event: dict[str, Any]) -> str | None:
    """An error object in any engine's or API's shape: {"error": ...}, {"object": "error"}, {"type": "error"}."""
    if event.get("error"):
        return json.dumps(event["error"])[:2000]
    if event.get("object") == "error" or event.get("type") == "error":
        return json.dumps(event)[:2000]
    if event.get("type") == "response.failed":
        return json.dumps((event.get("response") or {}).get("error") or event)[:2000]
    return None


def finish_of(event: dict[str, Any]) -> str | None:
    """The finish reason an event carries: chat and completions choices, a Responses response's end, a Messages
    stop_reason."""
    for choice in event.get("choices") or []:
        if choice.get("finish_reason"):
            return str(choice["finish_reason"])
    if event.get("type") in ("response.completed", "response.incomplete"):
        return (event.get("response") or {}).get("status") or "completed"
    if event.get("type") == "message_delta":
        return (event.get("delta") or {}).get("stop_reason")
    return None


END_EVENTS = ("response.completed", "response.incomplete", "response.failed", "message_stop")


def take_answer(event: dict[str, Any], answer: dict[str, Any]) -> None:
    """Content text and per-position logprobs (token, its logprob, the best other's) of chat, completions and
    Responses events (loadrepro's load/answer_text.py reads them the same way; this file stands alone)."""
    entries = []
    for choice in event.get("choices") or []:
        text = (choice.get("delta") or {}).get("content") if "delta" in choice else choice.get("text")
        answer["text"] += text if isinstance(text, str) else ""
        listed = choice.get("logprobs") or {}
        if isinstance(listed.get("content"), list):
            entries += listed["content"]
        elif listed.get("tokens"):
            tops = listed.get("top_logprobs") or []
            entries += [{"token": t, "logprob": v, "top_logprobs": [{"token": k, "logprob": x} for k, x in
                                                                    (tops[i] if i < len(tops) else {}).items()]}
                        for i, (t, v) in enumerate(zip(listed["tokens"], listed.get("token_logprobs") or []))]
    if event.get("type") == "response.output_text.delta":
        answer["text"] += event.get("delta") or ""
        entries += event.get("logprobs") or []
    for entry in entries:
        others = [(o.get("token"), o.get("logprob")) for o in entry.get("top_logprobs") or []]
        if (entry.get("token"), entry.get("logprob")) in others:
            others.remove((entry.get("token"), entry.get("logprob")))
        answer["tokens"].append(entry.get("token"))
        answer["logprobs"].append(entry.get("logprob"))
        answer["runner_up"].append(max((v for _, v in others if v is not None), default=None))


async def read_stream(target: Target, headers: dict[str, Any], reader: asyncio.StreamReader,
                      answer: dict[str, Any] | None = None) -> tuple[str, str]:
    buffer, data_lines, finish, error = b"", [], None, None
    try:
        async for piece in target.body(headers, reader):
            buffer += piece
            *lines, buffer = buffer.split(b"\n")
            for raw in lines:
                line = raw.rstrip(b"\r")
                if line.startswith(b"data:"):
                    data_lines.append(line[5:].strip())
                    continue
                if line or not data_lines:
                    continue
                data, data_lines = b"\n".join(data_lines), []
                if data == b"[DONE]":
                    return ("stream_error", error) if error else (("ok", "") if finish else
                                                                 ("truncated", "no finish reason"))
                event = json.loads(data)
                if answer is not None:
                    take_answer(event, answer)
                error = error_of(event) or error
                finish = finish_of(event) or finish
                if event.get("type") in END_EVENTS:  # Responses and Messages streams end so, without [DONE]
                    return ("stream_error", error) if error else (("ok", "") if finish else
                                                                 ("truncated", "no finish reason"))
    except TimeoutError:  # an OSError too: a read that waited stall_s is a stall, not a cut (send() says so)
        raise
    except (asyncio.IncompleteReadError, OSError) as exc:
        return ("stream_error", error) if error else ("truncated", f"the stream was cut: {exc}")
    if error:
        return "stream_error", error
    return ("ok", "no [DONE]") if finish else ("truncated", "the stream ended before a finish reason")


def read_requests(kind: str = "request") -> list[dict[str, Any]]:
    """The requests that carry their body (a long trace's run writes the first ones' only: the rest are
    rebuilt from its profile and trace by `loadrepro run --profile profile.toml`); kind "warmup": the warm-ups."""
    with gzip.open(HERE / "workload.jsonl.gz", "rt") as lines:
        rows = [r for r in map(json.loads, lines) if r.get("type") == kind]
    requests = [r for r in rows if "body" in r]
    if len(requests) < len(rows):
        print(f"{len(requests)} of the workload's {len(rows)} requests carry their body and are replayed; the rest "
              "are rebuilt from the trace by `loadrepro run --profile profile.toml`")
    return requests


WARMUPS = (("engine_warmup", "the engine's warm-ups ([load] warmup_requests)"),
           ("warmup", "a mid-trajectory start's warm-ups (each session's history, one token asked)"))


async def warm_up(target: Target, path: str, model: str, fatal: list[re.Pattern[str]], concurrency: int) -> None:
    """The warm-ups the run sent before its load, in its order (the engine's, then a mid-trajectory start's), before
    the requests; their outcomes are printed, not judged."""
    gate = asyncio.Semaphore(concurrency)

    async def one(warmup: dict[str, Any]) -> str:
        async with gate:
            return (await send(target, path, {**warmup["body"], "model": model}, fatal, None,
                               warmup.get("headers")))[0]

    for kind, what in WARMUPS:
        warmups = read_requests(kind)
        if warmups:
            outcomes = await asyncio.gather(*(one(w) for w in warmups))
            print(f"{what}: {len(warmups)} sent first, not judged: "
                  f"{', '.join(f'{o} {outcomes.count(o)}' for o in sorted(set(outcomes)))}", flush=True)


async def replay(args: argparse.Namespace) -> int:
    config = json.loads((HERE / "replay.json").read_text())
    fatal = [re.compile(p) for p in config["fatal_patterns"]]
    target = Target(args.base_url, config["stall_timeout_s"], config["request_timeout_s"],
                    os.environ.get(args.api_key_env) or None)
    requests = read_requests()
    path = PATHS[config["api"]]
    model = args.model or config.get("model")
    status, data = await target.get("/v1/models")
    if not args.model and status == 200:
        model = json.loads(data)["data"][0]["id"]
    before, _ = await target.get(config.get("health_path", "/health"))
    print(f"/health before: {before}; {len(requests)} requests, model {model}, concurrency {args.concurrency}")
    if args.no_warmups:
        print("warm-ups left out (--no-warmups): the requests meet the engine as it is")
    else:
        await warm_up(target, path, model, fatal, args.concurrency)
    conversations: dict[int, list[dict[str, Any]]] = {}
    for r in requests:
        conversations.setdefault(r["conversation"], []).append(r)
    # Agent trees: a subagent starts once the turn that spawned it answered ([conversation, turn]; turn 0: with its
    # agent), and a turn that joins subagents waits until each has ended.
    spawned: dict[tuple[int, int], list[int]] = {}
    for index, turns in conversations.items():
        if "spawned_by" in turns[0]:
            spawned.setdefault((turns[0]["spawned_by"][0], turns[0]["spawned_by"][1]), []).append(index)
    ended = {index: asyncio.Event() for index in conversations}
    gate = asyncio.Semaphore(args.concurrency)
    results: list[tuple[float, dict[str, Any], str, str]] = []
    started = time.monotonic()

    async def conversation(index: int, tasks: asyncio.TaskGroup) -> None:
        # Each turn once the one before it answered, after its think time, and not before its recorded arrival.
        spawns = [(index, 0)]
        try:
            for turn in sorted(conversations[index], key=lambda t: t["turn"]):
                for child in (c for at in spawns for c in spawned.pop(at, ())):
                    tasks.create_task(conversation(child, tasks))
                spawns = []
                for joined in turn.get("joins", ()):
                    if joined in ended:  # (a subagent whose requests carry no body is not replayed)
                        await ended[joined].wait()
                if turn["turn"] > 1 and turn.get("delay_s"):
                    await asyncio.sleep(turn["delay_s"])
                offset = turn.get("arrival_s")
                if offset:
                    await asyncio.sleep(max(0.0, offset - (time.monotonic() - started)))
                async with gate:
                    outcome, detail = await send(target, path, {**turn["body"], "model": model}, fatal, None,
                                                 turn.get("headers"))
                results.append((time.monotonic() - started, turn, outcome, detail))
                print(f"{time.monotonic() - started:7.2f}s conversation {turn['conversation']} turn {turn['turn']}: "
                      f"{outcome}" + (f": {' '.join(detail.split())[:160]}" if detail else ""), flush=True)
                if outcome != "ok":
                    return
                spawns.append((index, turn["turn"]))
            for child in (c for at in spawns for c in spawned.pop(at, ())):
                tasks.create_task(conversation(child, tasks))
        finally:  # its turns' joins go on; so do those of subagents it will never spawn now
            ended[index].set()
            for at in [at for at in spawned if at[0] == index]:
                for child in spawned.pop(at):
                    ended[child].set()

    async with asyncio.TaskGroup() as tasks:
        children = {c for waiting in spawned.values() for c in waiting}
        for index in conversations:
            if index not in children:
                tasks.create_task(conversation(index, tasks))
    after, _ = await target.get(config.get("health_path", "/health"))
    failures = [r for r in results if r[2] in FAILURES]
    counts: dict[str, int] = {}
    for _, _, outcome, _ in results:
        counts[outcome] = counts.get(outcome, 0) + 1
    print("outcomes: " + ", ".join(f"{k} {v}" for k, v in sorted(counts.items())))
    if failures:
        t, turn, outcome, detail = min(failures, key=lambda r: r[0])
        print(f"first failure at {t:.2f}s: conversation {turn['conversation']} turn {turn['turn']}: {outcome}: "
              f"{' '.join(detail.split())[:500]}")
    print(f"/health after: {after}")
    failed = bool(failures) or after != 200
    print("ENGINE FAILED" if failed else "engine passed")
    return 1 if failed else 0


def new_answer() -> dict[str, Any]:
    return {"text": "", "tokens": [], "logprobs": [], "runner_up": []}


def main() -> None:
    config = json.loads((HERE / "replay.json").read_text())
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--base-url", required=True)
    parser.add_argument("--model", default=None)
    parser.add_argument("--concurrency", type=int, default=config["concurrency"])
    parser.add_argument("--api-key-env", default="OPENAI_API_KEY", help="the variable holding the target's API key")
    parser.add_argument("--no-warmups", action="store_true", help="leave out the warm-ups the run sent first")
    parser.add_argument("--check-answers", action="store_true", help="re-check the wrong answers in answers.json")
    parser.add_argument("--copies", type=int, default=1, help="--check-answers: copies of the traffic at once")
    args = parser.parse_args()
    if args.check_answers:  # its own file beside this one (the bundle holds both)
        sys.path.insert(0, str(HERE))
        checker = importlib.import_module("check_answers")
        sys.exit(asyncio.run(checker.check_answers(args, sys.modules[__name__])))
    sys.exit(asyncio.run(replay(args)))


if __name__ == "__main__":
    main()
