"""A managed engine process: start a command on a free loopback port, capture its log, wait until healthy, stop.

The command is one command line, split like a shell would (`NAME=value` words before the program set its
environment; pipes and `&&` need an explicit `sh -c '...'`); `{port}` and `{host}` are replaced by the port
loadrepro chose and 127.0.0.1. The program itself is the process loadrepro watches, so its exit is seen at once.
It runs in a process group of its own, but not a session of its own: Linux schedules each session as one group,
and an engine in its own takes half the CPU from the load generator however few threads that has. Its stdout and
stderr go to a fresh log file; it is asked to die with loadrepro (Linux: the parent-death signal). Stopping sends
SIGTERM to the group, waits, then SIGKILL.

Faults on purpose ([[chaos.events]]): `kill` and `terminate` end it while `down` says the exit is planned (no
one reads it as the engine dying), `restart` starts the same command on the same port with the log continuing in
the same file after a marked line, and `pause`/`resume` stop and continue its whole process group.
"""

from __future__ import annotations

import asyncio
import errno
import http.client
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadrepro.config.defaults import ENGINE_START_TIMEOUT_S
from loadrepro.errors import TargetError, UsageError
from loadrepro.load.transport import credentials

_PR_SET_PDEATHSIG = 1
LOG_TAIL_LINES = 30
PORT_TRIES = 3  # starts on a fresh port when another process took the one chosen before the engine could bind it
_ASSIGNMENT = re.compile(r"[A-Za-z_][A-Za-z0-9_]*=")


def split_command(command: str) -> tuple[dict[str, str], list[str]]:
    """Leading NAME=value words (the environment) and the argument vector."""
    try:
        words = shlex.split(command)
    except ValueError as exc:
        raise UsageError(f"cannot read the engine command {command!r}: {exc}") from exc
    env: dict[str, str] = {}
    while words and _ASSIGNMENT.match(words[0]):
        name, _, value = words.pop(0).partition("=")
        env[name] = value
    if not words:
        raise UsageError(f"the engine command {command!r} names no program")
    return env, words


def as_template(command: str, url: str) -> str | None:
    """The template of a command that was started on `url`'s port: that port put back as {port}, so that it starts
    again on a fresh one (a run directory written before runs kept the template). None when the command does not
    name the port as a number of its own."""
    if "{port}" in command:
        return command
    port = url.rsplit(":", 1)[-1].split("/", 1)[0]
    pattern = re.compile(rf"(?<![0-9]){re.escape(port)}(?![0-9])")
    return pattern.sub("{port}", command) if port.isdigit() and pattern.search(command) else None


def free_port(host: str = "127.0.0.1") -> int:
    with socket.socket() as sock:
        sock.bind((host, 0))
        port: int = sock.getsockname()[1]
        return port


def port_taken(host: str, port: int) -> bool:
    """Whether another process listens on (or holds) the port: binding it, as the engine would, fails."""
    with socket.socket() as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((host, port))
        except OSError as exc:
            return exc.errno == errno.EADDRINUSE
    return False


# The engine is started through a fresh interpreter that asks to be sent SIGTERM when loadrepro dies (Linux's
# PR_SET_PDEATHSIG; elsewhere stop() still ends it), then execs the engine in its place: same process, same group.
# Not a preexec_fn: Python code run between fork and exec in a process with threads can wait on a lock another
# thread held at the fork, and it once held a run's event loop (health polls, the load) for 18 s.
_LAUNCHER = f"""
import ctypes, os, signal, sys
try:
    ctypes.CDLL(None).prctl({_PR_SET_PDEATHSIG}, signal.SIGTERM)
except (OSError, AttributeError):
    pass
if os.getppid() != int(sys.argv[1]):  # loadrepro died before the request took effect
    sys.exit(1)
os.execvp(sys.argv[2], sys.argv[2:])
"""


def _launch(argv: list[str], env: dict[str, str]) -> list[str]:
    """The command line that starts `argv` through _LAUNCHER; TargetError when its program cannot be found."""
    if shutil.which(argv[0], path=env.get("PATH")) is None:
        raise TargetError(f"cannot start the engine {argv[0]!r}: no such executable")
    return [sys.executable, "-c", _LAUNCHER, str(os.getpid()), *argv]


def log_tail(path: Path, lines: int = LOG_TAIL_LINES) -> str:
    if not path.exists():
        return "(no log)"
    return "\n".join(path.read_text(errors="replace").splitlines()[-lines:]) or "(empty log)"


# What an engine's log says when its port was taken at its bind (uvicorn: "[Errno 98] ... address already in use";
# llama.cpp: "couldn't bind"): the other process may have let the port go by the time it is checked (LiteLLM's
# proxy lost its port to a short-lived one so), so its own words count as a taken port too.
_BIND_REFUSED = re.compile(r"address already in use|errno 98\b|couldn't bind", re.IGNORECASE)


def describe_exit(code: int) -> str:
    if code < 0:
        try:
            return f"killed by {signal.Signals(-code).name}"
        except ValueError:
            return f"killed by signal {-code}"
    return f"exited with code {code}"


@dataclass(frozen=True, slots=True)
class EngineEnd:
    code: int | None
    how: str  # "exited with code 1", "stopped by SIGTERM", "killed by SIGKILL after the grace period", ...


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is answered as it is (HTTPError: not healthy): urllib would follow it with the key, anywhere."""

    def redirect_request(self, *args: Any, **kwargs: Any) -> None:
        return None


# Startup polls go straight to the loopback engine, whatever proxy the environment names, and nowhere else.
_NO_PROXY = urllib.request.build_opener(urllib.request.ProxyHandler({}), _NoRedirect())


class ManagedEngine:
    def __init__(self, command: str, log: Path, host: str = "127.0.0.1", health_path: str = "/health",
                 api_key: str | None = None) -> None:
        """`api_key`: what the engine (a gateway, say) wants on every request, its health checks included."""
        self.template, self.log, self.host, self.health_path = command, log, host, health_path
        self._on_port(free_port(host))
        self._auth = credentials(self.url, api_key)[1]
        self._process: subprocess.Popen[bytes] | None = None
        self.ended: EngineEnd | None = None
        self.down = False  # ended on purpose and not yet started again: its exit is not the engine dying
        self.starts = 0
        self.ready_ns: int | None = None  # perf_counter_ns of its last start's first /health 200

    def _on_port(self, port: int) -> None:
        self.port = port
        self.command = self.template.replace("{port}", str(port)).replace("{host}", self.host)
        self.url = f"http://{self.host}:{port}"

    @property
    def pid(self) -> int | None:
        return self._process.pid if self._process else None

    def start(self, timeout_s: float = ENGINE_START_TIMEOUT_S) -> str:
        """`astart` for callers without an event loop of their own (tests, scripts)."""
        return asyncio.run(self.astart(timeout_s))

    def _spawn(self, why: str | None = None) -> None:
        """A fresh log for the first start (an earlier run's lines would mislead); a start again continues it
        after a line saying `why`."""
        env, argv = split_command(self.command)
        env = {**os.environ, **env}
        launch = _launch(argv, env)
        self.log.parent.mkdir(parents=True, exist_ok=True)
        with self.log.open("ab" if why else "wb") as sink:
            if why:
                sink.write(f"\n===== loadrepro: {why} =====\n".encode())
                sink.flush()
            try:
                self._process = subprocess.Popen(launch, env=env, stdin=subprocess.DEVNULL, stdout=sink,
                                                 stderr=subprocess.STDOUT, process_group=0)
            except OSError as exc:
                raise TargetError(f"cannot start the engine {argv[0]!r}: {exc.strerror}") from exc
        self.starts += 1

    def _exited_early(self) -> bool:
        """True when it exited because another process took its port first (the port is free only between
        free_port and the engine's own bind): it can start again on another. TargetError when it exited otherwise."""
        code = self._process.poll() if self._process else None
        if code is None:
            return False
        if port_taken(self.host, self.port) or _BIND_REFUSED.search(log_tail(self.log)):
            return True
        raise TargetError(f"the engine {describe_exit(code)} before it was healthy: {self.command}\n"
                          f"last lines of {self.log}:\n{log_tail(self.log)}")

    async def astart(self, timeout_s: float = ENGINE_START_TIMEOUT_S) -> str:
        """Start and wait for /health 200, without holding the event loop (the polls run in a thread); TargetError
        with the log's last lines if it exits or never comes up. An engine whose port another process took
        before it could listen there is started again on a fresh port (PORT_TRIES starts in all)."""
        self._spawn()
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            if self._exited_early():
                if self.starts >= PORT_TRIES:
                    raise TargetError(f"the engine could not listen: another process took each of the {PORT_TRIES} "
                                      f"ports chosen for it, the last {self.port}: {self.command}")
                taken = self.port
                self._on_port(free_port(self.host))
                self._spawn(f"port {taken} was taken by another process before the engine listened on it; "
                            f"started again on port {self.port}")
                continue
            if await asyncio.to_thread(self._healthy):
                self.ready_ns = time.perf_counter_ns()
                return self.url
            await asyncio.sleep(0.25)
        await asyncio.to_thread(self.stop)
        raise TargetError(f"the engine was not healthy within {timeout_s:.0f} s: {self.command}\n"
                          f"last lines of {self.log}:\n{log_tail(self.log)}")

    def _healthy(self) -> bool:
        request = urllib.request.Request(self.url + self.health_path, headers=self._auth)
        try:
            with _NO_PROXY.open(request, timeout=2.0) as response:
                return bool(response.status == 200)
        except (OSError, ValueError, http.client.HTTPException):
            # refused, reset, timed out, a status other than 2xx (HTTPError), or not HTTP at all: another program
            # on the port before the engine listens there
            return False

    def exit_code(self) -> int | None:
        """The engine's exit code; None while it runs, or while it is down on purpose (a planned kill/restart)."""
        if self.down:
            return None
        return self._process.poll() if self._process else None

    # -- faults on purpose ------------------------------------------------------------------------------------

    async def kill(self) -> str:
        """SIGKILL the whole group at once, as a crash or the OOM killer would; how it ended."""
        self.down = True
        self._kill_group(signal.SIGKILL)
        return describe_exit(await asyncio.to_thread(self._reap))

    async def terminate(self, grace_s: float = 30.0) -> str:
        """SIGTERM the group, wait up to `grace_s` for it to exit (then SIGKILL); how it ended."""
        self.down = True
        self._kill_group(signal.SIGTERM)
        deadline = time.monotonic() + grace_s
        while await asyncio.to_thread(self._group_alive) and time.monotonic() < deadline:
            await asyncio.sleep(0.05)
        if self._group_alive():
            self._kill_group(signal.SIGKILL)
            return f"{describe_exit(await asyncio.to_thread(self._reap))} after {grace_s:g} s of SIGTERM"
        return describe_exit(await asyncio.to_thread(self._reap))

    def _reap(self) -> int:
        code = self._process.wait()  # type: ignore[union-attr]
        while self._group_alive():  # children of the group it may have left
            time.sleep(0.05)
        return code

    def restart(self, why: str) -> str | None:
        """Start the same command again on the same port, the log continuing after a line saying `why`; None, or
        why it could not be started. Either way it is no longer down: from here its exit is the engine's (whether
        it comes back is for /health to say)."""
        try:
            self._spawn(why)
        except TargetError as exc:
            return str(exc)
        finally:
            self.down = False
        return None

    def pause(self) -> None:
        """SIGSTOP the whole group: a GPU hang, a long GC pause, a frozen node."""
        self._kill_group(signal.SIGSTOP)

    def resume(self) -> None:
        self._kill_group(signal.SIGCONT)

    def stop(self, grace_s: float = 10.0) -> EngineEnd:
        """End the whole process group; says how it ended. Safe to call twice."""
        if self.ended is not None:
            return self.ended
        process = self._process
        if process is None:
            self.ended = EngineEnd(None, "never started")
        elif (code := process.poll()) is not None:
            self.ended = EngineEnd(code, describe_exit(code) + " by itself")
            self._kill_group(signal.SIGKILL)  # children it may have left
        else:
            self._kill_group(signal.SIGCONT)  # a paused engine cannot act on SIGTERM
            self._kill_group(signal.SIGTERM)
            deadline = time.monotonic() + grace_s
            while self._group_alive() and time.monotonic() < deadline:
                time.sleep(0.05)
            if self._group_alive():
                self._kill_group(signal.SIGKILL)
                self.ended = EngineEnd(process.wait(), "killed by SIGKILL after the grace period")
            else:
                self.ended = EngineEnd(process.wait(), "stopped by SIGTERM")
        return self.ended

    def _group_alive(self) -> bool:
        assert self._process is not None, "a group is alive only once started"
        self._process.poll()  # reap the leader so a zombie does not count
        try:
            os.killpg(self._process.pid, 0)
        except ProcessLookupError:
            return False
        return True

    def _kill_group(self, signum: int) -> None:
        try:
            os.killpg(self._process.pid, signum)  # type: ignore[union-attr]
        except ProcessLookupError:
            pass
