"""requests.jsonl and samples.jsonl: written on a thread of their own as things happen, read back whole."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from loadrepro.records.memory import MemorySample
from loadrepro.records.vocabulary import (
    KIND_OF,
    CanarySample,
    HealthSample,
    LogMatch,
    MetricsSample,
    Note,
    NoteSource,
    RequestRecord,
    sample_from_json,
)


class JsonlWriter:
    """Writes a fresh file, one JSON object per line, in a thread of its own: serialising and writing a record
    (a 32,768-token stream's is 0.6 MB of JSON) on the event loop would delay every other stream's chunk times.
    Each line is flushed as it is written, so a crash loses at most what was still queued; `close` waits for
    the queue."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] = path.open("wb")
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._drain, name=f"writer {path.name}", daemon=True)
        self._thread.start()

    def write(self, item: Any) -> None:
        """A dict, or a record or sample dataclass (written with its `kind`)."""
        self._queue.put(item)

    def _drain(self) -> None:
        while (item := self._queue.get()) is not _CLOSE:
            self._file.write(_line(item))
            self._file.flush()

    def close(self) -> None:
        self._queue.put(_CLOSE)
        self._thread.join()
        self._file.close()


_CLOSE = object()


_SLICE = 4096  # chunk times serialised at once: about 0.2 ms of orjson holding the GIL


def _line(item: Any) -> bytes:
    """One JSON line; dataclasses go straight to orjson, which reads their slots without copying them."""
    if isinstance(item, dict):
        return orjson.dumps(item) + b"\n"
    if not isinstance(item, RequestRecord):
        return b'{"kind":"' + KIND_OF[type(item)].encode() + b'",' + orjson.dumps(item)[1:] + b"\n"
    if len(item.chunk_ns) <= _SLICE:
        return b'{"kind":"request",' + orjson.dumps(item)[1:] + b"\n"
    # orjson holds the GIL for a whole call (1.5 ms for 32,768 chunk times), and the event loop waits that long
    # for it: serialise the chunk times in slices, letting the loop run between them.
    parts = []
    for start in range(0, len(item.chunk_ns), _SLICE):
        parts.append(orjson.dumps(item.chunk_ns[start:start + _SLICE])[1:-1])
        time.sleep(0)
    rest = orjson.dumps(dataclasses.replace(item, chunk_ns=()))
    head, tail = rest.split(b'"chunk_ns":[]', 1)
    return b'{"kind":"request",' + head[1:] + b'"chunk_ns":[' + b",".join(parts) + b"]" + tail + b"\n"


def read_jsonl(path: Path) -> Iterator[dict[str, Any]]:
    """The complete lines of a JSONL file; a last line cut short by a crash is skipped."""
    with path.open(encoding="utf-8") as lines:
        for line in lines:
            try:
                yield json.loads(line)
            except json.JSONDecodeError:
                continue


@dataclass(frozen=True, slots=True)
class RunFiles:
    """What a run directory's requests.jsonl and samples.jsonl hold, by kind (every complete line)."""

    records: tuple[RequestRecord, ...]
    health: tuple[HealthSample, ...]
    metrics: tuple[MetricsSample, ...]
    matches: tuple[LogMatch, ...]
    notes: tuple[Note, ...]  # the load's start (source RUN) included
    canaries: tuple[CanarySample, ...]
    memory: tuple[MemorySample, ...]

    @property
    def start_ns(self) -> int | None:
        """When the load started (its RUN note), None when it never did."""
        return next((n.t_ns for n in self.notes if n.source == NoteSource.RUN), None)


def read_run_files(run_dir: Path) -> RunFiles:
    records = tuple(RequestRecord.from_json(d) for d in read_jsonl(run_dir / "requests.jsonl"))
    samples = [sample_from_json(d) for d in read_jsonl(run_dir / "samples.jsonl")]

    def kind(of: type[Any]) -> tuple[Any, ...]:
        return tuple(s for s in samples if isinstance(s, of))

    return RunFiles(records, kind(HealthSample), kind(MetricsSample), kind(LogMatch), kind(Note),
                    kind(CanarySample), kind(MemorySample))
