"""Faults on purpose: an abort burst cancels streams in flight mid-answer, and an engine that keeps the aborted
requests running afterwards fails (rule zombie_requests), while one that frees them, at once or a moment later,
passes. Against servers written for it and the simulated engine's abort defect."""

from __future__ import annotations

import asyncio
import contextlib
import json
from collections.abc import Iterator
from dataclasses import dataclass, field

import pytest
from aiohttp import web

import loadrepro
from loadrepro.config.options import RunArguments
from loadrepro.errors import UsageError
from tests.helpers import facts, fired, rebuilt_alike
from tests.stub_server import chat_app, chunk_event, serving


@dataclass
class AbortServer:
    """Streams of `tokens` tokens every `delay_s`; /metrics' running count holds every stream being written, and
    a stream whose client left: never freed ("leaks"; "leaks_running": only once its answer began), freed
    `linger_s` later ("lingers"), or at once ("frees");
    or freed from the running count at once, but its KV blocks (10% each) never ("holds_kv"). KV usage: 2% per
    stream being written, plus what is held."""

    mode: str = "frees"
    tokens: int = 60
    delay_s: float = 0.05
    linger_s: float = 1.5
    streaming: int = 0
    zombies: int = 0
    disconnects: int = 0
    held_kv: float = 0.0
    url: str = ""
    slow_every: int = 0  # every n-th request (the 2nd, the (n+2)th, ...) waits slow_s before its first token
    slow_s: float = 2.0
    stagger_s: float = 0.0  # the n-th request waits n x stagger_s before its first token
    last_token_s: float = 0.0  # how long an answer whose tokens are all written takes to finish
    count: int = 0
    cancelled: list[int] = field(default_factory=list)  # which requests (1 = the first to arrive) left mid-answer

    async def chat(self, request: web.Request) -> web.StreamResponse:
        tokens = min(self.tokens, (await request.json()).get("max_tokens") or self.tokens)
        response = web.StreamResponse(headers={"content-type": "text/event-stream"})
        await response.prepare(request)
        self.streaming += 1
        self.count += 1
        number, written = self.count, 0
        try:
            if self.slow_every and self.count % self.slow_every == 0:
                await asyncio.sleep(self.slow_s)
            await asyncio.sleep(self.stagger_s * number)
            for _ in range(tokens):
                await asyncio.sleep(self.delay_s)
                await response.write(_event({"choices": [{"index": 0, "delta": {"content": " t"},
                                                          "finish_reason": None}]}))
                written += 1
            await asyncio.sleep(self.last_token_s)
            await response.write(_event({"choices": [{"index": 0, "delta": {}, "finish_reason": "length"}]}))
            await response.write(b"data: [DONE]\n\n")
        except (ConnectionResetError, asyncio.CancelledError):
            self.disconnects += 1
            mid_answer = 0 < written < tokens  # a client that leaves after the last token leaves nothing
            if mid_answer:
                self.cancelled.append(number)
            if self.mode == "holds_kv":
                self.held_kv += 0.1
            elif self.mode != "frees" and (mid_answer or self.mode != "leaks_running"):
                self.zombies += 1
                if self.mode == "lingers":
                    asyncio.get_running_loop().call_later(self.linger_s, self._free_one)
            raise
        finally:
            self.streaming -= 1
        return response

    def _free_one(self) -> None:
        self.zombies -= 1

    async def metrics(self, request: web.Request) -> web.Response:
        return web.Response(text=f"vllm:num_requests_running {self.streaming + self.zombies}\n"
                                 "vllm:num_requests_waiting 0\n"
                                 f"vllm:kv_cache_usage_perc {0.02 * self.streaming + self.held_kv}\n")

    @contextlib.contextmanager
    def running(self) -> Iterator[AbortServer]:
        app = chat_app("a", self.chat, web.get("/metrics", self.metrics),
                       handler_args={"handler_cancellation": True})
        with serving(app) as self.url:
            yield self


def _event(payload: dict) -> bytes:
    return chunk_event(payload, "a")


PROFILE = """
name = "abort"
api = "chat"
[workload]
seed = 3
conversations = 8
turns = 1
prefix_tokens = 200
max_tokens = 60
[load]
concurrency = 6
duration_s = 4
stall_timeout_s = 10
[watch]
metrics_interval_s = 0.25
[[chaos.events]]
at_s = 1
action = "abort_burst"
count = 4
"""


def burst(mode: str, tmp_path, tokenizer_dir):
    path = tmp_path / "abort.toml"
    path.write_text(PROFILE)
    with AbortServer(mode).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    return report, server


@pytest.mark.slow
def test_an_engine_that_keeps_aborted_requests_running_fails_with_zombie_requests(tmp_path, tokenizer_dir):
    report, server = burst("leaks", tmp_path, tokenizer_dir)
    assert server.disconnects >= 4 and server.zombies >= 4
    assert not report.passed
    words = fired(report).get("zombie_requests")
    assert words and words.startswith(f"the engine still reported {server.zombies} requests running")
    assert facts(report, "zombie_requests")["cancelled_mid_stream"] > 0, words
    assert any(n.startswith("chaos: abort burst at 1 s: cancelled 4 of the requests in flight, 4 of them mid-answer "
                            "(asked for 4); /health 200") for n in report.notes), report.notes


@pytest.mark.slow
def test_an_abort_burst_cancels_answers_under_way_not_requests_still_waiting(tmp_path, tokenizer_dir):
    """An engine whose abort defect shows only for a request it is already answering (a waiting one is freed
    cleanly, as the simulated engine's stock policy and real engines do): half of the first requests wait 2 s
    for their first token, and the burst at 1 s must cancel answers under way. Cancelling the oldest requests
    in flight instead would take two waiting ones, and the defect would show by chance."""
    path = tmp_path / "abort.toml"
    path.write_text(PROFILE)
    with AbortServer("leaks_running", slow_every=2).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert server.zombies == 4, server
    assert fired(report).get("zombie_requests")


@pytest.mark.slow
def test_an_abort_burst_cancels_the_answers_that_began_last(tmp_path, tokenizer_dir):
    """Six answers of 3 s begin 0.1 s apart; a burst of two at 1 s cancels the two that began last, which have
    the most of their answers to come (the oldest may end before the engine sees its client leave)."""
    path = tmp_path / "abort.toml"
    path.write_text(PROFILE.replace("count = 4", "count = 2").replace("conversations = 8", "conversations = 6"))
    with AbortServer("leaks_running", stagger_s=0.1).running() as server:
        loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert sorted(server.cancelled) == [5, 6], server


@pytest.mark.slow
def test_an_abort_burst_does_not_take_a_one_token_answer_for_one_under_way(tmp_path, tokenizer_dir):
    """Each conversation's first turn asks for one token (it warms the prefix), which this engine writes at once
    and then takes 2 s to finish: its client leaving then cancels nothing the engine still had to do. The burst
    at 0.5 s must wait for the second turns' answers and cancel those (cancelling the first turns finds no
    defect: 0 zombies, measured by taking every answer begun as under way)."""
    path = tmp_path / "abort.toml"
    profile = PROFILE.replace("turns = 1", "turns = 2").replace("at_s = 1", "at_s = 0.5")
    path.write_text(profile.replace("conversations = 8", "conversations = 6")
                    .replace("duration_s = 4", "duration_s = 6"))
    with AbortServer("leaks_running", last_token_s=2.0).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert server.zombies == 4 and len(server.cancelled) == 4, server
    assert fired(report).get("zombie_requests")


@pytest.mark.parametrize("mode", ["frees", "lingers"])
def test_an_engine_that_frees_aborted_requests_at_once_or_a_moment_later_passes(mode, tmp_path, tokenizer_dir):
    report, server = burst(mode, tmp_path, tokenizer_dir)
    assert server.disconnects >= 4
    assert report.passed, report
    assert report.requests.by_outcome.get("cancelled", 0) >= 4
    [row] = report.chaos
    assert row.before_kv_usage == 0.0 and row.after_kv_usage == 0.0 and row.kv_s is not None, row


def test_an_engine_that_frees_aborted_requests_but_not_their_blocks_fails_no_recovery(tmp_path, tokenizer_dir):
    report, server = burst("holds_kv", tmp_path, tokenizer_dir)
    assert server.disconnects >= 4 and server.held_kv >= 0.35
    words = fired(report).get("no_recovery")
    assert words and words.startswith("abort burst at 1.0 s its KV blocks not freed"), words
    assert facts(report, "no_recovery")["kv"] == "held", words
    assert fired(report).get("zombie_requests") is None  # its running count was freed: only the blocks tell
    [row] = report.chaos
    assert not row.recovered and row.before_kv_usage == 0.0 and row.after_kv_usage >= 0.35
    rebuilt_alike(tmp_path / "run")


@pytest.mark.slow
def test_ab_confirms_the_simulated_engines_abort_fix(tmp_path):
    comparison = loadrepro.ab("zombie-on-abort", out=tmp_path)
    # the stock report whole on a failure: what the run saw is the only evidence of why the defect did not show
    assert comparison.fix_confirmed, (comparison.detail, (tmp_path / "stock" / "report.md").read_text()[:6000])
    # how many the burst caught mid-stream is the machine's timing; that the engine held some of those is the defect
    stock = facts(json.loads((tmp_path / "stock" / "report.json").read_text()), "zombie_requests")
    assert stock["running"] > 0 and stock["cancelled_mid_stream"] > 0, stock


def test_abort_bursts_need_the_load_in_this_process():
    from loadrepro.api import run_options

    with pytest.raises(UsageError, match="run them without --workers and --ray"):
        run_options(RunArguments(profile="zombie-on-abort", workers=2))


def test_an_abort_burst_on_whole_answers_cancels_at_its_time(tmp_path, tokenizer_dir):
    """[workload] stream = false: no answer ever begins, so the burst does not wait ABORT_WAIT_S for one: it
    cancels the oldest requests in flight at once, as clients that leave before their answer came."""
    from tests.stub_server import StubServer

    path = tmp_path / "abort.toml"
    profile = PROFILE.replace("max_tokens = 60", "max_tokens = 60\nstream = false").replace("at_s = 1", "at_s = 0.5")
    path.write_text(profile.replace("count = 4", "count = 2"))
    with StubServer("ok", first_token_delay_s=3.0).running() as server:
        report = loadrepro.run(path, base_url=server.url, tokenizer=tokenizer_dir, out=tmp_path / "run")
    assert report.requests.by_outcome.get("cancelled") == 2, report.requests
    assert server.stats.disconnects == 2, server.stats  # the clients left: the server saw their connections close
    note = next(n for n in report.notes if n.startswith("chaos: abort burst"))
    assert "cancelled 2 of the requests in flight, 0 of them mid-answer" in note, note
    [row] = report.chaos
    assert row.at_s < 1.5, row  # at its time, not ABORT_WAIT_S later


def _waiting_fault(gone=lambda: False):
    """A fault (an oversize request) whose request never answers and whose engine never says /health 200 again,
    with 10 minutes to recover: what a fault on a dead or hung engine waits for."""
    import time

    from loadrepro.config.profile import ChaosEvent
    from loadrepro.load.chaos import ChaosTools, Oversize
    from loadrepro.load.faults import FaultsOnPurpose

    sent = asyncio.Event()

    async def send(planned):
        sent.set()
        await asyncio.Event().wait()

    async def healthy() -> bool:
        return False

    async def abort(count: int) -> tuple[int, int]:
        return 0, 0

    faults = FaultsOnPurpose([ChaosEvent(at_s=0.001, action="oversize", recover_within_s=600)],
                             time.perf_counter_ns, asyncio.Event(), lambda *_: None)
    faults.schedule(ChaosTools(None, abort, send, healthy, oversize=Oversize(10, "a test's"), gone=gone))
    return faults, sent


async def test_a_fault_waiting_on_the_engine_ends_when_the_run_is_interrupted():
    """SIGTERM after the load ended while a fault still waited (the engine dead, its recovery 60 s per malformed
    request) was not honoured for minutes: an interrupt ends the faults going on, whatever they wait for."""
    faults, sent = _waiting_fault()
    await asyncio.wait_for(sent.wait(), 10)
    waiting = asyncio.create_task(faults.done(interrupted=False))
    await asyncio.sleep(0)  # one turn of the loop: it waits on the fault
    assert not waiting.done()
    faults.interrupt()
    await asyncio.wait_for(waiting, 10)


async def test_a_faults_wait_for_health_ends_once_the_engine_is_gone():
    from loadrepro.load.chaos import ChaosTools, _back

    gone = False
    polls = 0

    async def healthy() -> bool:
        nonlocal gone, polls
        polls += 1
        gone = polls >= 3  # the engine's process exited meanwhile
        return False

    tools = ChaosTools(None, None, None, healthy, gone=lambda: gone)  # type: ignore[arg-type]
    assert await asyncio.wait_for(_back(tools, tools.clock() + int(600e9)), 10) is None and polls == 3
