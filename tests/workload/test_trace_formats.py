"""Every trace format read into rows: sessions, timestamps, lengths, the format chosen by auto, windows, and bad
input named by file, line (or row) and field, through the command line's exit 2."""

from __future__ import annotations

import dataclasses
import json

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.errors import TraceError
from loadrepro.workload.trace import read_trace
from loadrepro.workload.trace_formats import detect, read_rows
from tests.helpers import cli, report
from tests.trace_files import SUFFIX, WRITERS, make_turns


def _write(tmp_path, fmt, turns=None):
    return WRITERS[fmt](turns or make_turns(), tmp_path / f"t{SUFFIX.get(fmt, '.jsonl')}")


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_auto_finds_each_format_and_reads_every_request(tmp_path, fmt):
    turns = make_turns()
    path = _write(tmp_path, fmt, turns)
    assert detect(path)[0] == fmt
    chosen, rows = read_rows(path)
    rows = list(rows)
    assert chosen == fmt and len(rows) == len(turns)
    if fmt in ("mooncake", "bailian", "openai-log"):  # sessions, in file (time) order
        assert [r.session for r in rows] == [rows[[t.session for t in turns].index(t.session)].session
                                             for t in turns]
        assert len({r.session for r in rows}) == len({t.session for t in turns})
    if fmt in ("azure", "burstgpt"):  # no sessions: every request its own
        assert all(r.session is None for r in rows)
    if fmt != "sharegpt":
        stamps = [r.timestamp_s for r in rows]
        assert [round(s - stamps[0], 3) for s in stamps] == [round(t.t_s - turns[0].t_s, 3) for t in turns]


def test_openai_log_sessions_follow_the_messages(tmp_path):
    turns = make_turns()
    rows = list(read_rows(_write(tmp_path, "openai-log", turns))[1])
    by_session = {}
    for row, turn in zip(rows, turns):
        by_session.setdefault(turn.session, set()).add(row.session)
    assert all(len(keys) == 1 for keys in by_session.values())  # one session key per conversation
    assert len({next(iter(k)) for k in by_session.values()}) == len(by_session)  # and no two share one


def test_burstgpt_failed_rows_are_left_out_and_said(tmp_path):
    spec = load_profile("trace-example", [f"workload.trace='{_write(tmp_path, 'burstgpt')}'"]).workload
    trace = read_trace(spec)
    assert trace.skipped.total == 1
    assert "1 failed requests (no request or response tokens)" in trace.describe()
    assert "burstgpt (detected: a CSV with Request tokens (BurstGPT))" in trace.describe()


def test_windows_speed_and_request_caps(tmp_path):
    turns = make_turns(sessions=5)
    path = _write(tmp_path, "mooncake", turns)
    base = [f"workload.trace='{path}'", "workload.trace_block_tokens=16"]
    whole = read_trace(load_profile("trace-example", base).workload)
    assert len(whole.rows) == len(turns)
    capped = read_trace(load_profile("trace-example", [*base, "workload.trace_max_requests=4"]).workload)
    assert [r.where for r in capped.rows] == [r.where for r in whole.rows[:4]]
    start = 0.8
    window = read_trace(load_profile("trace-example", [*base, f"workload.trace_start_s={start}",
                                                       "workload.trace_duration_s=0.5"]).workload)
    origin = whole.origin_s
    first_turn_in = {r.session for r in whole.rows
                     if start <= r.timestamp_s - origin < start + 0.5 and r.session is not None} - {
        r.session for r in whole.rows if r.timestamp_s - origin < start}
    assert window.rows and {r.session for r in window.rows} == first_turn_in
    assert all(start <= r.timestamp_s - origin < start + 0.5 for r in window.rows)


BAD = [
    ("mooncake", '{"timestamp": 0, "input_length": -5, "output_length": 3}', 2, "input_length: -5 tokens"),
    ("mooncake", '{"timestamp": "soon", "input_length": 5, "output_length": 3}', 2, "timestamp: not a number"),
    ("mooncake", '{"timestamp": 0, "input_length": 5}', 2, "output_length: missing"),
    ("bailian", '{"chat_id": 7, "parent_chat_id": 99, "timestamp": 1, "input_length": 5, "output_length": 3}', 2,
     "parent_chat_id: 99 is not the chat_id of an earlier line"),
    ("openai-log", '{"timestamp": "yesterday", "body": {"messages": [{"role": "user", "content": "hi"}], '
                   '"max_tokens": 3}}', 2, "timestamp: not a timestamp"),
    ("openai-log", '{"timestamp": 1, "body": {"messages": [{"role": "user", "content": "hi"}]}}', 2,
     "response.usage.completion_tokens: missing"),
]
_FIRST = {"mooncake": '{"timestamp": 0, "input_length": 5, "output_length": 3, "hash_ids": [1]}',
          "bailian": '{"chat_id": 1, "parent_chat_id": -1, "timestamp": 0, "input_length": 5, "output_length": 3}',
          "openai-log": '{"timestamp": 0, "body": {"messages": [{"role": "user", "content": "a"}], "max_tokens": 2}}'}


@pytest.mark.parametrize("fmt,line,number,words", BAD)
def test_bad_rows_name_the_file_line_and_field(tmp_path, fmt, line, number, words):
    path = tmp_path / "bad.jsonl"
    path.write_text(_FIRST[fmt] + "\n" + line + "\n")
    with pytest.raises(TraceError, match=f"bad.jsonl:{number}: {words}"):
        list(read_rows(path)[1])


def test_bad_input_is_exit_2_before_anything_is_sent(tmp_path):
    bad_csv = tmp_path / "azure.csv"
    bad_csv.write_text("TIMESTAMP,ContextTokens,GeneratedTokens\n2024-05-10 00:00:00.0000000,12,4\n"
                       "not a time,12,4\n")
    missing = tmp_path / "burst.csv"
    missing.write_text("Timestamp,Model,Request tokens\n1,ChatGPT,12\n")
    for path, words in ((bad_csv, "azure.csv:3: TIMESTAMP: not a timestamp"),
                        (missing, "burst.csv:1: Response tokens: missing column")):
        done = cli("trace", "inspect", str(path))
        assert done.returncode == 2 and words in done.stderr, done.stderr
        run_dir = tmp_path / f"run-{path.stem}"
        done = cli("run", "--profile", "trace-example", "--set", f"workload.trace='{path}'", "--out", str(run_dir),
                    "--quiet")
        assert done.returncode == 2 and words in done.stderr, done.stderr
        assert not (run_dir / "requests.jsonl").exists()


def test_a_missing_trace_and_an_unknown_format_are_exit_2(tmp_path):
    done = cli("trace", "inspect", str(tmp_path / "nope.jsonl"))
    assert done.returncode == 2 and "trace file not found" in done.stderr
    odd = tmp_path / "odd.jsonl"
    odd.write_text(json.dumps({"when": 1, "tokens": 3}) + "\n")
    done = cli("trace", "inspect", str(odd))
    assert done.returncode == 2 and "odd.jsonl:1: not a trace format loadrepro knows" in done.stderr


def test_sessions_cap_and_lengths_percent(tmp_path):
    turns = make_turns(sessions=5)
    path = _write(tmp_path, "mooncake", turns)
    base = [f"workload.trace='{path}'", "workload.trace_block_tokens=64"]
    whole = read_trace(load_profile("trace-example", base).workload)
    two = read_trace(load_profile("trace-example", [*base, "workload.trace_max_sessions=2"]).workload)
    first_two = list(dict.fromkeys(r.session for r in whole.rows))[:2]
    assert [r.where for r in two.rows] == [r.where for r in whole.rows if r.session in first_two]
    half = read_trace(load_profile("trace-example", [*base, "workload.trace_length_percent=50"]).workload)
    assert half.block_tokens == 32
    assert [r.input_length for r in half.rows] == [max(1, round(r.input_length / 2)) for r in whole.rows]
    assert [r.hash_ids for r in half.rows] == [r.hash_ids for r in whole.rows]
    tiny = read_trace(load_profile("trace-example", [*base, "workload.trace_length_percent=1"]).workload)
    assert tiny.block_tokens == 16  # a block keeps room for its own text


def test_inspect_counts_what_the_trace_holds(tmp_path):
    turns = make_turns(sessions=5, block=16)
    path = _write(tmp_path, "bailian", turns)
    done = cli("trace", "inspect", str(path), "--json")
    assert done.returncode == 0, done.stderr
    stats = json.loads(done.stdout)
    inputs = sorted(t.input_tokens for t in turns)
    seen, cacheable = set(), 0
    for t in turns:  # the blocks an earlier request started with, as a perfect prefix cache holds them
        k = 0
        while k < len(t.blocks) and t.blocks[:k + 1] in seen:
            k += 1
        cacheable += min(k * 16, t.input_tokens)
        seen.update(t.blocks[:i] for i in range(1, len(t.blocks) + 1))
    multi = [s for s in {t.session for t in turns} if sum(t.session == s for t in turns) > 1]
    assert stats["format"] == "bailian" and stats["requests"] == len(turns)
    assert stats["sessions"] == len(multi)
    assert stats["span_s"] == pytest.approx(turns[-1].t_s - turns[0].t_s, abs=1e-3)
    assert stats["input_tokens"]["max"] == inputs[-1] and stats["input_tokens_total"] == sum(inputs)
    assert stats["input_tokens"]["p50"] == inputs[(len(inputs) - 1) // 2]
    assert stats["cacheable_tokens"] == cacheable > 0
    text = cli("trace", "inspect", str(path)).stdout
    assert f"requests   {len(turns)}," in text and "a perfect prefix cache could serve" in text


def test_a_row_stamped_before_the_first_is_sent_at_the_start_and_said(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text("".join(json.dumps({"timestamp": t, "input_length": 20, "output_length": 2, "hash_ids": [i]})
                            + "\n" for i, t in enumerate((100, 50, 300))))
    trace = read_trace(load_profile("trace-example", [f"workload.trace='{path}'"]).workload)
    assert len(trace.rows) == 3 and trace.origin_s == 0.1
    assert "1 stamped before the first row (not in time order), sent at the start" in trace.describe()


def _gzip(path, keep: float = 1.0):
    """The file as a .gz archive beside it; `keep` < 1 cuts the archive there (a download that stopped)."""
    import gzip

    packed = gzip.compress(path.read_bytes())
    out = path.with_name(path.name + ".gz")
    out.write_bytes(packed[:int(len(packed) * keep)])
    return out


@pytest.mark.parametrize("fmt", sorted(WRITERS))
def test_a_gzip_compressed_trace_reads_as_its_text_does_and_says_so(tmp_path, fmt):
    path = _write(tmp_path, fmt)
    packed = _gzip(path)
    assert detect(packed) == (detect(path)[0], f"{detect(path)[1]}, gzip-compressed")
    def named_as_unpacked(row):  # where it is read from (and an openai-log session's key, made from that) aside
        return dataclasses.replace(row, where=row.where.replace(".gz", ""),
                                   session=row.session and row.session.replace(".gz", ""))

    assert [named_as_unpacked(r) for r in read_rows(packed)[1]] == list(read_rows(path)[1])  # every field, the same


def test_a_truncated_or_corrupt_archive_and_bytes_that_are_not_text_are_exit_2_naming_the_file(tmp_path):
    turns = make_turns(sessions=40)  # an archive long enough that a cut one is still detected from its start
    cut = _gzip(_write(tmp_path, "mooncake", turns), keep=0.6)
    done = cli("trace", "inspect", str(cut))
    assert done.returncode == 2 and f"{cut}: a truncated or corrupt gzip archive" in done.stderr, done.stderr
    with pytest.raises(TraceError, match="truncated or corrupt gzip archive"):
        list(read_rows(cut)[1])
    corrupt = tmp_path / "corrupt.jsonl.gz"
    corrupt.write_bytes(b"\x1f\x8b" + b"\x00" * 64)
    assert cli("trace", "inspect", str(corrupt)).returncode == 2
    latin = tmp_path / "latin.jsonl"
    latin.write_bytes('{"timestamp": 0, "input_length": 5, "output_length": 3, "note": "caf\xe9"}\n'.encode("latin-1"))
    done = cli("trace", "inspect", str(latin))
    assert done.returncode == 2 and f"{latin}: not UTF-8 text" in done.stderr, done.stderr


def test_a_gzip_compressed_mooncake_trace_is_inspected_and_replayed(tmp_path):
    packed = _gzip(_write(tmp_path, "mooncake"))
    inspected = cli("trace", "inspect", str(packed))
    assert inspected.returncode == 0 and "gzip-compressed" in inspected.stdout, inspected.stderr
    done = cli("run", "--profile", "trace-example", "--set", f"workload.trace='{packed}'", "--set",
               "workload.trace_block_tokens=16", "--out", str(tmp_path / "run"), "--quiet")
    data = report(tmp_path / "run")
    assert done.returncode == 0 and data["requests"]["by_outcome"] == {"ok": len(make_turns())}, done.stderr
    assert any("gzip-compressed" in note for note in data["notes"]), data["notes"]
