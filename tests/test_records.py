"""JSONL records: written in a thread with orjson, read back identical, nothing lost on close."""

import dataclasses
import time

from loadrepro.records import (
    Answer,
    CanarySample,
    HealthSample,
    JsonlWriter,
    LogMatch,
    MetricsSample,
    Note,
    Outcome,
    RequestRecord,
    read_jsonl,
    sample_from_json,
)
from tests.helpers import until


def record(i: int, chunks: int) -> RequestRecord:
    start = time.perf_counter_ns()
    times = tuple(start + k * 1000 for k in range(chunks))
    return RequestRecord(id=i, conversation=i, turn=1, outcome=Outcome.OK, detail="", status=200, wall_time=1.5,
                         queued_ns=start, sent_ns=start, first_byte_ns=start,
                         first_token_ns=times[0] if times else None,
                         end_ns=start + 1, chunk_ns=times, finish_reason="length", prompt_tokens=10,
                         completion_tokens=chunks, cached_tokens=None, expected_prompt_tokens=10,
                         shared_prefix_tokens=0, max_tokens=chunks, reconnects=1)


def test_records_and_samples_round_trip_through_the_writer(tmp_path):
    records = [record(1, 0), record(2, 5), record(3, 32_768), record(4, 4097)]  # long ones are written in slices
    evidence = Answer(" a \ufffd", 4, (" a", " \ufffd"), (-0.1, -0.2), (-4.1, None), (" b", ""))
    records.append(dataclasses.replace(record(5, 2), answer=evidence))
    samples = [HealthSample(1, 200, 5), HealthSample(2, "unreachable", 7), MetricsSample(3, {"a{b=\"c\"}": 0.5}),
               LogMatch(4, 9, "sig", "F", "a line"), Note(5, "run", "text"),
               CanarySample(6, 8, "stalled", None, "no token", 5, None), CanarySample(7, 9, "ok", 2, "", 9)]
    writer = JsonlWriter(tmp_path / "requests.jsonl")
    for item in records:
        writer.write(item)
    writer.close()
    assert [RequestRecord.from_json(d) for d in read_jsonl(tmp_path / "requests.jsonl")] == records
    writer = JsonlWriter(tmp_path / "samples.jsonl")
    for item in samples:
        writer.write(item)
    writer.write({"kind": "note", "t_ns": 6, "source": "x", "text": "a dict"})
    writer.close()
    assert [sample_from_json(d) for d in read_jsonl(tmp_path / "samples.jsonl")] == [*samples, Note(6, "x", "a dict")]


def test_the_writer_puts_lines_on_disk_while_open_in_order_across_batches(tmp_path):
    """Lines written in bursts reach the file within about BATCH_S, before `close`, in the order written: a run
    killed with SIGKILL leaves what was written up to then."""
    path = tmp_path / "requests.jsonl"
    writer = JsonlWriter(path)
    try:
        for burst in range(3):
            for k in range(4):
                writer.write({"kind": "note", "t_ns": burst * 4 + k, "source": "x", "text": "t"})
            until(lambda n=(burst + 1) * 4: len(path.read_bytes().splitlines()) >= n, 10, "the burst on disk")
            assert [d["t_ns"] for d in read_jsonl(path)] == list(range((burst + 1) * 4))
    finally:
        writer.close()


def test_what_a_rebuilt_report_judges_besides_the_samples_round_trips_through_samples_jsonl(tmp_path):
    """A watched endpoint's samples, the faults on purpose (one not caused), a replica's exit and how the run ended
    are written beside the watchers' samples and read back as they were (runs/rebuild.py judges them)."""
    from loadrepro.records import (
        EndpointSample,
        Fault,
        FaultNotCaused,
        ProcessExit,
        ReplicaExit,
        RunEnd,
        read_run_files,
    )

    JsonlWriter(tmp_path / "requests.jsonl").close()
    events = [EndpointSample("decode-0", HealthSample(1, 503, 4)),
              EndpointSample("introspection", HealthSample(2, 200, 3)),
              EndpointSample("replica-1", MetricsSample(3, {"kv_usage": 0.5})),
              Fault("malformed", 4, 5, None, 2.0, "1 malformed requests", False, "bad_json: HTTP 500",
                    ("bad_json: HTTP 500",)), FaultNotCaused("kill", 9.0, "the load ended at 8.0 s"),
              ReplicaExit(1, ProcessExit(6, -11, "killed by SIGSEGV")),
              RunEnd(7, HealthSample(7, "unreachable", 2), 5, 6, False, None)]
    writer = JsonlWriter(tmp_path / "samples.jsonl")
    for item in [Note(0, "run", "start"), *events]:
        writer.write(item)
    writer.close()
    files = read_run_files(tmp_path)
    assert files.endpoints == tuple(events[:3])
    assert files.faults == (events[3],) and files.not_caused == (events[4],)
    assert files.replica_exits == (events[5],) and files.ended == events[6] and files.start_ns == 0


def test_fault_spans_say_what_was_a_faults_doing():
    """One answer for the runner (live, a fault still going on), the health rules (outages only) and the windows
    (any fault): a span meets what overlaps it, ends included; one not over yet meets everything after it."""
    from loadrepro.records import Fault, FaultSpan, FaultSpans

    spans = FaultSpans([FaultSpan("kill", 100, 200), FaultSpan("abort_burst", 300, 400), FaultSpan("pause", 500)])
    assert spans.overlaps(50, 100) and spans.overlaps(200, 250) and not spans.overlaps(201, 299)
    assert not spans.overlaps(300, 400) and spans.overlaps(300, 400, outages_only=False)
    assert spans.overlaps(10_000, 20_000)  # the pause is not over
    assert [s.action for s in spans.going_on()] == ["pause"]
    done = Fault("restart", at_ns=100, done_ns=150, back_ns=None, recover_within_s=1.0, detail="")
    assert FaultSpans.of([done]).spans == [FaultSpan("restart", 100, 150 + 1_000_000_000)]


def test_a_record_sent_where_its_prefix_never_was_expects_none_of_it_its_trees_share_included():
    # own_prefix_tokens is a part of shared_prefix_tokens: the report's own_tokens must not pass possible_tokens
    later = dataclasses.replace(record(2, 4), turn=2, shared_prefix_tokens=500)
    tree = dataclasses.replace(later, own_prefix_tokens=300).expecting_no_cache()
    plain = later.expecting_no_cache()
    assert (tree.shared_prefix_tokens, tree.own_prefix_tokens) == (0, 0)
    assert (plain.shared_prefix_tokens, plain.own_prefix_tokens) == (0, None)
