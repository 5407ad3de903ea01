"""What a run observed, kept as it happens: every request record and watcher sample goes to the run directory's
JSONL files (written by threads, see records.JsonlWriter), so that a crash loses only what was still in flight.
In memory: the records up to `keep` completed ones plus up to `keep` others (failures are what rules look at one
by one), and every sample, except that metrics scrapes past MAX_METRICS are coarsened (pairs merged, each series
at its highest); every record and every scrape, kept or not, is counted in the Tally, which the windows read."""

from __future__ import annotations

from pathlib import Path

from loadrepro.records import (
    CanarySample,
    HealthSample,
    JsonlWriter,
    LogMatch,
    MetricsSample,
    Note,
    Outcome,
    RequestRecord,
    Sample,
    Tally,
)

MAX_METRICS = 20_000  # scrapes kept in memory: ~20 MB; a 12-hour soak scraping every 0.5 s makes 86,400


class Recorder:
    def __init__(self, out_dir: Path, window_s: float = 60.0, keep: int = 20_000) -> None:
        self.records: list[RequestRecord] = []
        self.tally = Tally(window_s)
        self.last: RequestRecord | None = None
        self._keep = keep
        self._kept = {True: 0, False: 0}  # completed, other
        self.health: list[HealthSample] = []
        self.metrics: list[MetricsSample] = []
        self.matches: list[LogMatch] = []
        self.notes: list[Note] = []
        self.canaries: list[CanarySample] = []
        self._requests_out = JsonlWriter(out_dir / "requests.jsonl")
        self._samples_out = JsonlWriter(out_dir / "samples.jsonl")

    def started(self, start_ns: int) -> None:
        """The load's time zero, from which windows are counted."""
        self.tally.start_ns = start_ns

    def record(self, record: RequestRecord) -> None:
        self._requests_out.write(record)
        self.tally.add(record)
        self.last = record
        ok = record.outcome is Outcome.OK
        if self._kept[ok] >= self._keep:
            self.tally.dropped += 1
            return
        self._kept[ok] += 1
        self.records.append(record)

    def sample(self, sample: Sample) -> None:
        self._samples_out.write(sample)
        match sample:
            case HealthSample():
                self.health.append(sample)
            case MetricsSample():
                self.tally.scraped(sample)
                self.metrics.append(sample)
                if len(self.metrics) > MAX_METRICS:
                    self.metrics = coarsened(self.metrics)
            case LogMatch():
                self.matches.append(sample)
            case Note():
                self.notes.append(sample)
            case CanarySample():
                self.canaries.append(sample)

    def close(self) -> None:
        """Waits for the writers to finish their files."""
        self._requests_out.close()
        self._samples_out.close()


def coarsened(samples: list[MetricsSample]) -> list[MetricsSample]:
    """About half as many scrapes: the first and the last as they are, the others merged in pairs, each at the
    later time with every series at its higher value (peaks, and counters' latest values, survive; what only a
    low point would show, KV usage at quiet moments, the tally has counted)."""
    first, middle, last = samples[0], samples[1:-1], samples[-1]
    merged = [MetricsSample(b.t_ns, {k: max(x.values[k] for x in (a, b) if k in x.values)
                                     for k in a.values.keys() | b.values.keys()})
              for a, b in zip(middle[::2], middle[1::2], strict=False)]
    if len(middle) % 2:
        merged.append(middle[-1])
    return [first, *merged, last]
