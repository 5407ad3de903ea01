"""Follows an engine log file from its end and matches each new line against the signature catalog."""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable
from datetime import datetime
from pathlib import Path

from loadrepro.judge.signatures import CATALOG, Signature, SignatureClass, line_time, match
from loadrepro.load.pause import pause
from loadrepro.records import LogMatch

CONTEXT_LINES = 100
_POLL_S = 0.2


def _count_lines(path: Path) -> tuple[int, int]:
    """(newlines, bytes) in the file as it is now."""
    lines = size = 0
    with path.open("rb") as log:
        while chunk := log.read(1 << 20):
            lines += chunk.count(b"\n")
            size += len(chunk)
    return lines, size


class LogWatcher:
    def __init__(self, path: Path, on_match: Callable[[LogMatch], None], from_start: bool = False,
                 signatures: tuple[Signature, ...] = CATALOG,
                 clock: Callable[[], int] = time.perf_counter_ns, replica: int = 0) -> None:
        self.path, self.replica = path, replica
        self._on_match, self._signatures, self._clock = on_match, signatures, clock
        # The clock's reading at one wall-clock instant, to place a line's own timestamp on the run's time axis.
        self._wall_ref, self._clock_ref = time.time(), clock()
        self._offset: int | None = 0 if from_start else None
        self._line_number = 0
        self._partial = b""
        self._recent: deque[str] = deque(maxlen=CONTEXT_LINES)
        self.context: tuple[str, ...] = ()  # the lines before the first fatal match
        self.fatal_seen = False

    @property
    def found(self) -> bool:
        """Whether the log has been found (and followed) at all."""
        return self._offset is not None

    def read_new(self) -> None:
        """Take in what the log gained since the last call (nothing before `start`, for a log followed from its
        end)."""
        if not self.path.exists() or self._offset is None:
            return
        with self.path.open("rb") as log:
            log.seek(self._offset)
            data = log.read()
        self._offset += len(data)
        lines = (self._partial + data).split(b"\n")
        self._partial = lines.pop()
        for raw in lines:
            self._line(raw.decode("utf-8", "replace").rstrip("\r"))

    def _line(self, line: str) -> None:
        self._line_number += 1
        signature = match(line, self._signatures)
        if signature is not None:
            if signature.klass is SignatureClass.FATAL and not self.fatal_seen:
                self.fatal_seen = True
                self.context = tuple(self._recent)
            self._on_match(LogMatch(self._when(line), self._line_number, signature.name, signature.klass.value,
                                    line[:1000], self.replica))
        self._recent.append(line)

    def _when(self, line: str) -> int:
        """The line's own timestamp on the clock when it has a plausible one (not after now), else now."""
        now = self._clock()
        wall = line_time(line, datetime.now().year)
        if wall is None:
            return now
        at = self._clock_ref + int((wall - self._wall_ref) * 1e9)
        return at if at <= now else now

    async def start(self) -> None:
        """Where following starts: the end of what the file holds now, its lines counted in a thread, chunk by
        chunk, so that a large existing log neither holds the event loop nor fills memory."""
        if self._offset is None and self.path.exists():
            self._line_number, self._offset = await asyncio.to_thread(_count_lines, self.path)

    async def run(self, stop: asyncio.Event) -> None:
        while True:
            if self._offset is None:
                await self.start()  # the log appeared after the run began: follow it from there
            self.read_new()
            if stop.is_set():
                return
            await pause(stop, _POLL_S)


def engine_log(configured: str, started: Path | None, on_match: Callable[[LogMatch], None],
               signatures: tuple[Signature, ...], clock: Callable[[], int]) -> LogWatcher | None:
    """The log to follow: the profile's engine_log from its end, else the log of loadrepro's own engine from its
    start (`started`); None when there is neither."""
    if configured:
        path, from_start = Path(configured), False
    elif started is not None:
        path, from_start = started, True
    else:
        return None
    return LogWatcher(path, on_match, from_start, signatures, clock)


def fatal_context(logs: list[LogWatcher | None]) -> tuple[str, ...]:
    """The lines before the first fatal line of the first log that had one, in `logs`' order (the target's before
    the replicas': report.json log_excerpt quotes that log's first fatal line after them)."""
    followed = [w for w in logs if w is not None]
    return next((w.context for w in followed if w.fatal_seen), followed[0].context if followed else ())
