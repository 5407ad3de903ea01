"""Benchmark: loadrepro's client against a bare aiohttp streaming loop, in one invocation. Asserts nothing.

    .venv/bin/python benchmarks/client_overhead.py [--requests 2000]

Against a zero-delay stub (its own process): 2000 requests of ~1000 input / 128 output tokens at concurrency 64
and 256, printing client CPU-ms per request, requests/s, tokens/s and the server-side average in flight (Little's
law: it should equal the concurrency when the client keeps every slot busy). Then against a stub with 200 ms TTFT
and 10 ms ITL, printing each client's median TTFT and mean ITL error: against the nominal delays, and against
what the stub measured it really produced (the client's own share of the error).
"""

from __future__ import annotations

import argparse
import asyncio
import statistics
import subprocess
import sys
import time
from pathlib import Path

import aiohttp
import httpx

from loadrepro.drive.client import Client, ClientConfig
from loadrepro.workload.model import PlannedRequest

PROMPT = " ".join(f"word{i % 97}" for i in range(1000))
TOKENS = 128


async def bare_aiohttp(url: str, n: int, concurrency: int) -> list[tuple[float, float, int]]:
    """The bare loop: (ttft_s, mean_itl_s, chunks) per request."""
    body = {"model": "stub", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": TOKENS,
            "stream": True}
    gate = asyncio.Semaphore(concurrency)
    out = []

    async def one(session: aiohttp.ClientSession) -> None:
        async with gate:
            sent = time.perf_counter()
            times = []
            async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                async for line in response.content:
                    if line.startswith(b"data: ") and b'"content"' in line:
                        times.append(time.perf_counter())
            gaps = [b - a for a, b in zip(times, times[1:])]
            out.append((times[0] - sent, sum(gaps) / len(gaps) if gaps else 0.0, len(times)))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session) for _ in range(n)))
    return out


async def loadrepro_client(url: str, n: int, concurrency: int) -> list[tuple[float, float, int]]:
    body = {"messages": [{"role": "user", "content": PROMPT}], "max_tokens": TOKENS, "max_completion_tokens": TOKENS,
            "ignore_eos": True, "stream": True, "stream_options": {"include_usage": True}}
    planned = PlannedRequest(0, 1, body, TOKENS, 1000, 0)
    gate = asyncio.Semaphore(concurrency)
    records = []
    config = ClientConfig(url, "chat", "stub", concurrency, 600, 60)
    async with Client(config) as client:
        async def one(i: int) -> None:
            queued = time.perf_counter_ns()
            async with gate:
                await client.send(i, planned, queued, time.time(), records.append)

        await asyncio.gather(*(one(i) for i in range(n)))
    out = []
    for r in records:
        gaps = [b - a for a, b in zip(r.chunk_ns, r.chunk_ns[1:])]
        out.append(((r.first_token_ns - r.sent_ns) / 1e9, sum(gaps) / len(gaps) / 1e9 if gaps else 0.0,
                    len(r.chunk_ns)))
        assert r.outcome == "ok", r.detail
    return out


def start_stub(ttft_ms: float, itl_ms: float) -> tuple[subprocess.Popen, str]:
    stub = Path(__file__).with_name("stub_engine.py")
    process = subprocess.Popen([sys.executable, str(stub), "--tokens", str(TOKENS), "--ttft-ms", str(ttft_ms),
                                "--itl-ms", str(itl_ms)], stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def measure(name: str, fn, url: str, n: int, concurrency: int) -> list[tuple[float, float, int]]:
    httpx.get(f"{url}/stats")  # reset the server-side counters
    cpu, wall = time.process_time(), time.perf_counter()
    results = asyncio.run(fn(url, n, concurrency))
    cpu, wall = time.process_time() - cpu, time.perf_counter() - wall
    stats = httpx.get(f"{url}/stats").json()
    in_flight = stats["in_flight_avg"]
    tokens = sum(r[2] for r in results)
    print(f"  {name:16} c={concurrency:<4} {cpu / n * 1000:6.2f} CPU-ms/req  {n / wall:7.0f} req/s  "
          f"{tokens / wall:9.0f} tok/s  server in flight {in_flight:6.1f} ({in_flight / concurrency:.0%})")
    return results, stats


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    n = parser.parse_args().requests
    clients = {"bare aiohttp": bare_aiohttp, "loadrepro client": loadrepro_client}
    for ttft_ms, itl_ms in ((0.0, 0.0), (200.0, 10.0)):
        process, url = start_stub(ttft_ms, itl_ms)
        try:
            print(f"\nstub: {TOKENS} tokens, TTFT {ttft_ms:.0f} ms, ITL {itl_ms:.0f} ms; {n} requests")
            for concurrency in (64, 256):
                for name, fn in clients.items():
                    results, stats = measure(name, fn, url, n, concurrency)
                    if ttft_ms:
                        ttft = statistics.median(r[0] for r in results) * 1000
                        itl = statistics.mean(r[1] for r in results) * 1000
                        print(f"  {'':16} {'':6} TTFT error {ttft - ttft_ms:+6.2f} ms nominal, "
                              f"{ttft - stats['ttft_median_s'] * 1000:+6.2f} ms vs the stub's own; "
                              f"ITL error {itl - itl_ms:+5.2f} ms nominal, "
                              f"{itl - stats['itl_mean_s'] * 1000:+5.2f} ms vs the stub's own")
        finally:
            process.terminate()
            process.wait()


if __name__ == "__main__":
    main()
