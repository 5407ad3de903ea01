"""The bare aiohttp streaming loop that benchmarks/client_overhead.py holds loadrepro against, run as its own
process so that its whole cost (interpreter, imports, loop) is measured the same way as loadrepro's.

    python benchmarks/bare_loop.py URL REQUESTS CONCURRENCY

Sends REQUESTS streamed chat requests of a 1000-word prompt and 128 tokens at CONCURRENCY, and prints one JSON
list: per request, when it was sent (time.monotonic()), its TTFT and its mean ITL in seconds.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import aiohttp

PROMPT = " ".join(f"word{i % 97}" for i in range(1000))


async def main(url: str, n: int, concurrency: int) -> list[tuple[float, float, float]]:
    body = {"model": "stub", "messages": [{"role": "user", "content": PROMPT}], "max_tokens": 128, "stream": True}
    gate = asyncio.Semaphore(concurrency)
    out = []

    async def one(session: aiohttp.ClientSession) -> None:
        async with gate:
            sent = time.monotonic()
            times = []
            async with session.post(f"{url}/v1/chat/completions", json=body) as response:
                async for line in response.content:
                    if line.startswith(b"data: ") and b'"content"' in line:
                        times.append(time.monotonic())
            gaps = [b - a for a, b in zip(times, times[1:])]
            out.append((sent, times[0] - sent, sum(gaps) / len(gaps) if gaps else 0.0))

    connector = aiohttp.TCPConnector(limit=concurrency)
    async with aiohttp.ClientSession(connector=connector) as session:
        await asyncio.gather(*(one(session) for _ in range(n)))
    return out


if __name__ == "__main__":
    print(json.dumps(asyncio.run(main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3])))))
