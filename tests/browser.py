"""A page opened in headless Chromium (Debian's /usr/bin/chromium), driven over the DevTools protocol with aiohttp's
WebSocket client: what the page's scripts said to the console, what it throws, values a script reads off it, and
the pointer moved to a point of it as a person's would be. Tests using it skip where Chromium is not installed."""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import re
import shutil
import subprocess
import tempfile
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any

import aiohttp

CHROMIUM = shutil.which("chromium") or shutil.which("chromium-browser")
# Without the background-networking flags Chromium's own connections are refused on a closed network, many at a time.
FLAGS = ("--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--window-size=1200,2000", "--remote-debugging-port=0")


@dataclass
class Page:
    ws: aiohttp.ClientWebSocketResponse
    errors: list[str] = field(default_factory=list)  # console errors and exceptions thrown, in order
    _ids: itertools.count[int] = field(default_factory=lambda: itertools.count(1))

    async def call(self, method: str, **params: Any) -> dict[str, Any]:
        """A protocol command's result; the events that come before it are read on the way."""
        ident = next(self._ids)
        await self.ws.send_json({"id": ident, "method": method, "params": params})
        while True:
            message = await self.ws.receive_json(timeout=30)
            if message.get("id") == ident:
                if "error" in message:
                    raise RuntimeError(f"{method}: {message['error']}")
                result: dict[str, Any] = message.get("result", {})
                return result
            self._event(message)

    def _event(self, message: dict[str, Any]) -> None:
        method, params = message.get("method"), message.get("params", {})
        if method == "Runtime.exceptionThrown":
            self.errors.append(params["exceptionDetails"].get("exception", {}).get("description", "exception"))
        elif method == "Runtime.consoleAPICalled" and params.get("type") == "error":
            self.errors.append(" ".join(str(a.get("value", a.get("description"))) for a in params["args"]))
        elif method == "Log.entryAdded" and params["entry"].get("level") == "error":
            self.errors.append(params["entry"].get("text", ""))

    async def evaluate(self, expression: str) -> Any:
        result = await self.call("Runtime.evaluate", expression=expression, returnByValue=True)
        if "exceptionDetails" in result:
            raise RuntimeError(f"{expression}: {result['exceptionDetails']}")
        return result["result"].get("value")

    async def point_at(self, x: float, y: float) -> None:
        """The pointer moved to (x, y) in the viewport, as a mouse moves it."""
        await self.call("Input.dispatchMouseEvent", type="mouseMoved", x=x, y=y)


@contextlib.asynccontextmanager
async def opened(url: str) -> AsyncIterator[Page]:
    """`url` loaded in a fresh headless Chromium (its own profile directory), until its load event."""
    assert CHROMIUM is not None
    with tempfile.TemporaryDirectory(ignore_cleanup_errors=True) as profile:  # Chromium may write as it dies
        browser = subprocess.Popen([CHROMIUM, *FLAGS, f"--user-data-dir={profile}", "about:blank"],
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        try:
            port = await asyncio.wait_for(asyncio.to_thread(_devtools_port, browser), 30)
            async with aiohttp.ClientSession() as http:
                async with http.put(f"http://127.0.0.1:{port}/json/new?about:blank") as made:
                    target = await made.json(content_type=None)
                async with http.ws_connect(target["webSocketDebuggerUrl"], max_msg_size=0) as ws:
                    page = Page(ws)
                    for domain in ("Runtime", "Log", "Page"):
                        await page.call(f"{domain}.enable")
                    await page.call("Page.navigate", url=url)
                    while (await page.evaluate("document.readyState")) != "complete":
                        await asyncio.sleep(0.05)  # polled through the page: bounded by the call's own timeout
                    yield page
        finally:
            browser.kill()  # ours, by its handle
            browser.wait(10)


def _devtools_port(browser: subprocess.Popen[str]) -> int:
    """The port Chromium says it listens on (--remote-debugging-port=0 picks a free one)."""
    assert browser.stderr is not None
    for line in browser.stderr:
        if found := re.search(r"DevTools listening on ws://[^:]+:(\d+)/", line):
            return int(found.group(1))
    raise RuntimeError("Chromium exited before it listened for DevTools")
