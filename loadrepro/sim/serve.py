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
    sock = socket.socket(family, socket.SOCK_STREAM)
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
    logging.getLogger("uvicorn.error").addFilter(_DropConnectionCuts())
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


@contextlib.contextmanager
def sim_in_thread(config: SimConfig, log_path: Path | None = None, host: str = "127.0.0.1",
                  start_timeout_s: float = 10.0) -> Iterator[RunningSim]:
    """Serve on an ephemeral loopback port on a background thread for the duration of the block."""
    sock = _bind(host, 0)
    log = sim_logger(log_path if log_path is not None else None)
    server = _server(config, log)
    url = _url(sock)
    _log_start(log, config, url)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, name="loadrepro-sim", daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if not thread.is_alive() or time.monotonic() > deadline:
            sock.close()
            raise TargetError("the simulated engine did not start")
        time.sleep(0.01)
    try:
        yield RunningSim(url, config, log_path)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
        sock.close()
        for handler in list(log.handlers):
            handler.close()
            log.removeHandler(handler)
