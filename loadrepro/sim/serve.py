"""Serving the simulated engine over a real socket: in the foreground (the `sim` command) or on a thread."""

from __future__ import annotations

import contextlib
import logging
import socket
import sys
import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

import uvicorn

from loadrepro.errors import TargetError
from loadrepro.sim.app import ConnectionCut, create_app
from loadrepro.sim.config import SimConfig
from loadrepro.sim.runtime import SimRuntime

_LOG_FORMAT = "%(asctime)s.%(msecs)03d %(levelname)s %(message)s"
_instances = iter(range(1, 1 << 30))


class _DropConnectionCuts(logging.Filter):
    """A scripted mid-stream cut is the sim's intended behaviour, not a server error worth a traceback."""

    def filter(self, record: logging.LogRecord) -> bool:
        exc = record.exc_info[1] if record.exc_info else None
        return not isinstance(exc, ConnectionCut)


_DROP_CUTS = _DropConnectionCuts()  # one filter, however many engines this process serves (a filter is kept once)


def sim_logger(sink: Path | TextIO | None) -> logging.Logger:
    """A private logger writing timestamped engine lines to a file or stream (default: stderr)."""
    log = logging.getLogger(f"loadrepro.sim.{next(_instances)}")
    log.setLevel(logging.INFO)
    log.propagate = False
    handler = (logging.FileHandler(sink, encoding="utf-8") if isinstance(sink, Path)
               else logging.StreamHandler(sink or sys.stderr))
    handler.setFormatter(logging.Formatter(_LOG_FORMAT, "%Y-%m-%d %H:%M:%S"))
    log.addHandler(handler)
    return log


def _bind(host: str, port: int) -> socket.socket:
    family = socket.AF_INET6 if ":" in host else socket.AF_INET
    # IPPROTO_TCP named, not left 0: asyncio sets TCP_NODELAY only on connections of such a socket, and without it
    # a token written while the last is unacknowledged waits for the client's delayed ACK (40 ms on Linux).
    sock = socket.socket(family, socket.SOCK_STREAM, socket.IPPROTO_TCP)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    try:
        sock.bind((host, port))
    except OSError as exc:
        sock.close()
        raise TargetError(f"cannot listen on {host}:{port}: {exc.strerror}") from exc
    sock.listen(2048)
    return sock


def _url(sock: socket.socket) -> str:
    host, port = sock.getsockname()[:2]
    return f"http://[{host}]:{port}" if ":" in host else f"http://{host}:{port}"


def _server(config: SimConfig, log: logging.Logger) -> uvicorn.Server:
    logging.getLogger("uvicorn.error").addFilter(_DROP_CUTS)
    app = create_app(SimRuntime(config, log))
    return uvicorn.Server(uvicorn.Config(app, log_level="warning", access_log=False, lifespan="on",
                                         timeout_keep_alive=30, timeout_graceful_shutdown=2))


def _log_start(log: logging.Logger, config: SimConfig, url: str) -> None:
    log.info("Simulated engine %s (%s policy) serving %s at %s", config.scenario, config.policy, config.model, url)
    log.info("KV pools: primary %d blocks x %d tokens, draft %d blocks, beam width %d, max_model_len %d",
             config.primary_blocks, config.block_size, config.draft_blocks, config.beam_width,
             config.max_model_len)


def serve_forever(config: SimConfig, host: str, port: int, log_sink: Path | None,
                  on_ready: Callable[[str], None]) -> None:
    """Serve until SIGINT/SIGTERM; `on_ready` gets the URL once the socket listens."""
    sock = _bind(host, port)
    log = sim_logger(log_sink)
    url = _url(sock)
    server = _server(config, log)
    _log_start(log, config, url)
    on_ready(url)
    # uvicorn shuts down gracefully on the first SIGINT/SIGTERM, then re-raises it: that is the normal way out.
    with contextlib.closing(sock), contextlib.suppress(KeyboardInterrupt):
        server.run(sockets=[sock])
    log.info("Simulated engine stopped")


@dataclass(frozen=True, slots=True)
class RunningSim:
    url: str
    config: SimConfig
    log_path: Path | None


class SimThread:
    """The simulated engine served on a thread of this process, on an ephemeral loopback port: what `loadrepro sim`
    serves as a process of its own, up in milliseconds (no interpreter to start, nothing imported again), but
    sharing this interpreter, and so its CPU, with whatever else runs here."""

    def __init__(self, config: SimConfig, log_path: Path | None = None, host: str = "127.0.0.1") -> None:
        self.config, self.log_path = config, log_path
        self._sock = _bind(host, 0)
        self.url = _url(self._sock)
        self._log = sim_logger(log_path)
        self._server = _server(config, self._log)
        self._thread = threading.Thread(target=self._server.run, kwargs={"sockets": [self._sock]},
                                        name="loadrepro-sim", daemon=True)
        self._stopped = False

    def start(self, timeout_s: float = 10.0) -> str:
        """Serve; the URL once it answers, TargetError when it did not start within `timeout_s`."""
        _log_start(self._log, self.config, self.url)
        self._thread.start()
        deadline = time.monotonic() + timeout_s
        while not self._server.started:
            if not self._thread.is_alive() or time.monotonic() > deadline:
                self.stop()
                raise TargetError("the simulated engine did not start")
            time.sleep(0.005)  # uvicorn says it has started by a flag only; it takes a few ms
        return self.url

    def exit_code(self) -> int | None:
        """None while it serves; 1 when its server ended by itself (it never does unless it failed)."""
        return None if self._stopped or self._thread.is_alive() or not self._thread.ident else 1

    def stop(self) -> None:
        """Stop serving (open streams get up to uvicorn's graceful shutdown) and close its log. Safe to call twice."""
        if self._stopped:
            return
        self._stopped = True
        self._server.should_exit = True
        if self._thread.ident is not None:
            self._thread.join(timeout=10)
        self._sock.close()
        self._log.info("Simulated engine stopped")
        for handler in list(self._log.handlers):
            handler.close()
            self._log.removeHandler(handler)


@contextlib.contextmanager
def sim_in_thread(config: SimConfig, log_path: Path | None = None, host: str = "127.0.0.1",
                  start_timeout_s: float = 10.0) -> Iterator[RunningSim]:
    """Serve on an ephemeral loopback port on a background thread for the duration of the block."""
    sim = SimThread(config, log_path, host)
    sim.start(start_timeout_s)
    try:
        yield RunningSim(sim.url, config, log_path)
    finally:
        sim.stop()
