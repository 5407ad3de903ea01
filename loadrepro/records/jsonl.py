"""requests.jsonl and samples.jsonl: written on a thread of their own as things happen, read back whole.
samples.jsonl holds, besides the watchers' samples, what else the judges read of a run as it happens (a watched
endpoint's samples, each fault on purpose, a replica's exit, how the run ended), so that `loadrepro report` judges a
run as it judged itself."""

from __future__ import annotations

import dataclasses
import json
import queue
import threading
import time
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import orjson

from loadrepro.records.memory import MemorySample
from loadrepro.records.vocabulary import (
    KIND_OF,
    AnswerCheck,
    CanarySample,
    EndpointSample,
    Fault,
    FaultNotCaused,
    HealthSample,
    LogMatch,
    MetricsSample,
    Note,
    NoteSource,
    ProcessExit,
    ReplicaExit,
    RequestRecord,
    RunEnd,
    Sample,
    sample_from_json,
)

_EVENT_KINDS: dict[type, str] = {Fault: "fault", FaultNotCaused: "fault_not_caused", RunEnd: "run_end"}


# Waking for each line cost the event loop's thread a switch of the GIL per request (5,000 context switches in a
# 2,000-request run).
BATCH_S = 0.05  # the writer's wait between batches


class JsonlWriter:
    """Writes a fresh file, one JSON object per line, in a thread of its own: serialising and writing a record
    (a 32,768-token stream's is 0.6 MB of JSON) on the event loop would delay every other stream's chunk times.
    It wakes at most every BATCH_S and writes what was queued meanwhile at once, flushed: a crash loses at most
    what was still queued; `close` waits for the queue."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self._file: IO[bytes] = path.open("wb")
        self._queue: queue.SimpleQueue[Any] = queue.SimpleQueue()
        self._closing = threading.Event()
        self._thread = threading.Thread(target=self._drain, name=f"writer {path.name}", daemon=True)
        self._thread.start()

    def write(self, item: Any) -> None:
        """A dict, or a record or sample dataclass (written with its `kind`)."""
        self._queue.put(item)

    def _drain(self) -> None:
        while True:
            item = self._queue.get()
            while item is not _CLOSE:
                self._file.write(_line(item))
                try:
                    item = self._queue.get_nowait()
                except queue.Empty:
                    break
            self._file.flush()
            if item is _CLOSE:
                return
            self._closing.wait(BATCH_S)

    def close(self) -> None:
        self._closing.set()
        self._queue.put(_CLOSE)
        self._thread.join()
        self._file.close()


_CLOSE = object()


_SLICE = 4096  # chunk times serialised at once: about 0.2 ms of orjson holding the GIL


def _line(item: Any) -> bytes:
    """One JSON line; dataclasses go straight to orjson, which reads their slots without copying them."""
    if isinstance(item, dict):
        return orjson.dumps(item) + b"\n"
    if isinstance(item, EndpointSample):  # its sample with its own kind
        return (b'{"kind":"endpoint","endpoint":' + orjson.dumps(item.endpoint) + b',"sample":'
                + _line(item.sample)[:-1] + b"}\n")
    if isinstance(item, ReplicaExit):
        index = str(item.index).encode()
        return b'{"kind":"replica_exit","index":' + index + b"," + orjson.dumps(item.exit)[1:] + b"\n"
    if (kind := _EVENT_KINDS.get(type(item))) is not None:
        return b'{"kind":"' + kind.encode() + b'",' + orjson.dumps(item)[1:] + b"\n"
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
    endpoints: tuple[EndpointSample, ...] = ()  # watched endpoints', replicas' and the introspection path's
    faults: tuple[Fault, ...] = ()
    not_caused: tuple[FaultNotCaused, ...] = ()
    replica_exits: tuple[ReplicaExit, ...] = ()
    ended: RunEnd | None = None

    @property
    def start_ns(self) -> int | None:
        """When the load started (its RUN note), None when it never did."""
        return next((n.t_ns for n in self.notes if n.source == NoteSource.RUN), None)


def read_run_files(run_dir: Path) -> RunFiles:
    records = tuple(RequestRecord.from_json(d) for d in read_jsonl(run_dir / "requests.jsonl"))
    samples = [_item(d) for d in read_jsonl(run_dir / "samples.jsonl")]

    def kind(of: type[Any]) -> tuple[Any, ...]:
        return tuple(s for s in samples if isinstance(s, of))

    return RunFiles(records, kind(HealthSample), kind(MetricsSample), kind(LogMatch), kind(Note),
                    kind(CanarySample), kind(MemorySample), kind(EndpointSample), kind(Fault), kind(FaultNotCaused),
                    kind(ReplicaExit), next(iter(kind(RunEnd)), None))


def _item(data: dict[str, Any]) -> Sample | EndpointSample | Fault | FaultNotCaused | ReplicaExit | RunEnd:
    """One line of samples.jsonl as what wrote it."""
    match data["kind"]:
        case "endpoint":
            sample = sample_from_json(data["sample"])
            assert isinstance(sample, HealthSample | MetricsSample), data
            return EndpointSample(data["endpoint"], sample)
        case "replica_exit":
            return ReplicaExit(data["index"], ProcessExit(data["t_ns"], data["code"], data["how"]))
        case "fault":
            fields = {k: v for k, v in data.items() if k != "kind"}
            return Fault(**fields | {"unrefused": tuple(fields.get("unrefused", ()))})
        case "fault_not_caused":
            return FaultNotCaused(data["action"], data["at_s"], data["why"])
        case "run_end":
            post = data["post_health"]
            return RunEnd(data["end_ns"], HealthSample(**post) if post else None, data["progress_ns"],
                          data["stopped_ns"], data["engine_running"], data["worker_crash"])
    return sample_from_json(data)


ANSWERS_FILE = "answers.jsonl"  # each [verify] check of a run, written once they are done


def write_lines(path: Path, items: Iterable[Any]) -> None:
    """A whole file of lines as JsonlWriter writes them, at once: for what is written once it is all known (no
    thread to keep the event loop's clocks, as nothing is timed meanwhile)."""
    path.write_bytes(b"".join(_line(item) for item in items))


def write_checks(run_dir: Path, checks: Iterable[AnswerCheck]) -> None:
    """The run's answer checks, one per line."""
    write_lines(run_dir / ANSWERS_FILE, (dataclasses.asdict(check) for check in checks))


def read_checks(run_dir: Path) -> tuple[AnswerCheck, ...]:
    """The answer checks a run wrote; none when it checked none (or was stopped before they were done)."""
    path = run_dir / ANSWERS_FILE
    return tuple(AnswerCheck(**d) for d in read_jsonl(path)) if path.exists() else ()
