"""What a run observed, kept as it happens: every request record and watcher sample, in memory for the report and
in the run directory's JSONL files (written by threads, see records.JsonlWriter), so that a crash loses only what
was still in flight."""

from __future__ import annotations

from pathlib import Path

from loadrepro.records import (
    HealthSample,
    JsonlWriter,
    LogMatch,
    MetricsSample,
    Note,
    RequestRecord,
    Sample,
)


class Recorder:
    def __init__(self, out_dir: Path) -> None:
        self.records: list[RequestRecord] = []
        self.health: list[HealthSample] = []
        self.metrics: list[MetricsSample] = []
        self.matches: list[LogMatch] = []
        self.notes: list[Note] = []
        self._requests_out = JsonlWriter(out_dir / "requests.jsonl")
        self._samples_out = JsonlWriter(out_dir / "samples.jsonl")

    def record(self, record: RequestRecord) -> None:
        self.records.append(record)
        self._requests_out.write(record)

    def sample(self, sample: Sample) -> None:
        self._samples_out.write(sample)
        match sample:
            case HealthSample():
                self.health.append(sample)
            case MetricsSample():
                self.metrics.append(sample)
            case LogMatch():
                self.matches.append(sample)
            case Note():
                self.notes.append(sample)

    def close(self) -> None:
        """Waits for the writers to finish their files."""
        self._requests_out.close()
        self._samples_out.close()
