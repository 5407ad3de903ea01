"""`--workers N`: the same workload from N processes gives the same requests, outcomes and report as from one;
a stop (Ctrl-C, engine death) reaches every worker and loses no record."""

from __future__ import annotations

import hashlib
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.errors import UsageError
from loadrepro.load.backend.processes import split
from loadrepro.workload.export import WORKLOAD_FILE, open_workload
from loadrepro.workload.plan import plan_workload
from loadrepro.workload.tokens import SimTokenCounter
from tests.helpers import cli, until

ROOT = Path(__file__).resolve().parents[1]


def run(out: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "loadrepro", "run", "--out", str(out), "--quiet", *args], cwd=ROOT,
                          capture_output=True, text=True, timeout=240)


def requests_of(run_dir: Path) -> list[dict]:
    return [r for r in map(json.loads, (run_dir / "requests.jsonl").read_text().splitlines())
            if r.get("kind") == "request"]


def payloads(run_dir: Path) -> dict[tuple[int, int], str]:
    """(conversation, turn) -> SHA-256 of the request body, from the workload file."""
    with open_workload(run_dir / WORKLOAD_FILE) as lines:
        rows = [json.loads(line) for line in lines][1:]
    return {(r["conversation"], r["turn"]): hashlib.sha256(json.dumps(r["body"], sort_keys=True).encode()).hexdigest()
            for r in rows}


async def test_conversations_split_by_index_and_the_load_adds_up():
    profile = load_profile("healthy", ["workload.conversations=7", "load.concurrency=5", "load.max_rps=9"])
    workload = (await plan_workload(profile, SimTokenCounter())).workload
    shares = split(profile.load, workload, 3)
    assert [[c.index for c in s.workload.conversations] for s in shares] == [[0, 3, 6], [1, 4], [2, 5]]
    assert [s.load.concurrency for s in shares] == [2, 2, 1]
    assert [s.load.max_rps for s in shares] == [9, 9, 9]  # one schedule for them all (SharedStarts), not 9 / 3
    assert split(profile.load, workload, 3) == shares  # the same seed, the same split
    with pytest.raises(UsageError, match="concurrency"):
        split(profile.load, workload, 6)
    with pytest.raises(UsageError, match="at least 1"):
        split(profile.load, workload, 0)


# The stock draft-pool engine dies when the second turns of several conversations run at once. With answers of 64
# tokens each lasted ~0.1 s: a Ray actor starved of CPU on a busy machine answered its first turns ~0.2 s late,
# its second turns then missed the other actor's, and the engine passed. Answers of 512 tokens overlap for seconds.
LONGER = {"draft-pool": ("--set", "workload.max_tokens=512")}


def sent_and_report(out: Path, profile: str, *flags: str) -> tuple[tuple, dict]:
    """What a run sent (payloads by conversation and turn; what completed, with the engine's prompt count) and
    its report, checking that no record was lost or shares an id."""
    done = run(out, "--profile", profile, *LONGER.get(profile, ()), *flags)
    assert done.returncode == (0 if profile == "healthy" else 1), done.stderr
    assert "Token authentication" not in done.stderr and "SIGTERM handler" not in done.stderr  # Ray's own noise
    assert "layout not applied" not in done.stderr
    report = json.loads((out / "report.json").read_text())
    records = requests_of(out)
    assert len({r["id"] for r in records}) == len(records)  # no two workers reuse an id
    assert len(records) == report["requests"]["total"]  # nothing lost, also when the engine died
    completed = {(r["conversation"], r["turn"], r["prompt_tokens"]) for r in records if r["outcome"] == "ok"}
    return (payloads(out), completed), report


def judged_alike(one: dict, other: dict, profile: str) -> None:
    if profile == "healthy":
        assert one["requests"]["by_outcome"] == other["requests"]["by_outcome"] == {"ok": 12}
        assert one["verdict"] == other["verdict"] == "pass"
    else:
        assert one["verdict"] == other["verdict"] == "fail"
        assert one["signatures"][0]["name"] == other["signatures"][0]["name"] == "trtllm-draft-resize-failed"


@pytest.mark.parametrize("profile", ["healthy", "draft-pool"])
@pytest.mark.slow
def test_one_and_two_workers_send_the_same_requests_and_judge_alike(tmp_path, profile):
    sent_one, one = sent_and_report(tmp_path / "w1", profile, "--workers", "1")
    sent_two, two = sent_and_report(tmp_path / "w2", profile, "--workers", "2")
    assert one["workers"] == {"count": 1, "backend": "in-process"}
    assert two["workers"] == {"count": 2, "backend": "processes"}
    assert sent_one == sent_two
    judged_alike(one, two, profile)


@pytest.mark.parametrize("profile", ["healthy", "draft-pool"])
@pytest.mark.slow
def test_two_ray_actors_send_the_same_requests_and_judge_alike(tmp_path, profile):
    import ray  # noqa: F401 - the Ray tests run wherever the suite runs: a missing Ray fails here, not skips

    sent_one, one = sent_and_report(tmp_path / "w1", profile)
    sent_ray, on_ray = sent_and_report(tmp_path / "ray", profile, "--ray")
    assert on_ray["workers"] == {"count": 2, "backend": "ray"}
    assert any("2 Ray actors on 1 node(s)" in n for n in on_ray["notes"])
    assert sent_one == sent_ray
    judged_alike(one, on_ray, profile)


def test_a_record_from_another_node_is_moved_onto_the_driver_clock():
    from loadrepro.load.backend.ray_actors import _shifted
    from loadrepro.records import Outcome, RequestRecord

    record = RequestRecord(1, 0, 1, Outcome.OK, "", 200, 0.0, 1_000, 1_100, 1_200, 1_300, 1_900, (1_300, 1_600),
                           "length", 10, 2, None, 10, 0, 2)
    moved = _shifted(record, 1_000)
    assert (moved.queued_ns, moved.sent_ns, moved.first_byte_ns, moved.first_token_ns, moved.end_ns,
            moved.chunk_ns) == (0, 100, 200, 300, 900, (300, 600))
    assert _shifted(record, 0) is record


def children(pid: int) -> set[int]:
    found = set()
    for stat in Path("/proc").glob("[0-9]*/stat"):
        try:
            fields = stat.read_text().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if int(fields[1]) == pid:
            found.add(int(stat.parent.name))
    return found


@pytest.mark.parametrize("backend", [("--workers", "2"), ("--ray",)], ids=["processes", "ray"])
@pytest.mark.slow
def test_ctrl_c_reaches_every_worker_and_loses_no_record(tmp_path, backend):
    out = tmp_path / "soak"
    process = subprocess.Popen(
        [sys.executable, "-m", "loadrepro", "run", "--profile", "healthy", *backend, "--out", str(out),
         "--quiet", "--set", "load.duration_s=60", "--set", "load.concurrency=4"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        wait_for_records(out, 8)
        workers = children(process.pid)
        assert len(workers) >= 2  # two workers (or Ray's processes)
        os.killpg(process.pid, signal.SIGINT)  # what a terminal's Ctrl-C does: the whole process group
        sent = time.monotonic()
        process.wait(30)
        assert time.monotonic() - sent < 10
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 130, process.stderr.read()
    report = json.loads((out / "report.json").read_text())
    assert report["stop_reason"] == "interrupted"
    assert len(requests_of(out)) == report["requests"]["total"] > 0
    # Ray's own processes take a moment to go after the driver has
    until(lambda: not [pid for pid in workers if running(pid)], 10, "every worker ending")


def running(pid: int) -> bool:
    """The process exists and is not a zombie waiting for its parent."""
    try:
        return "Z" not in Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1][:3]
    except OSError:
        return False


def soak_from_two_workers(out: Path) -> subprocess.Popen:
    """A minute's soak of the healthy profile from two worker processes, started and left running."""
    return subprocess.Popen(
        [sys.executable, "-m", "loadrepro", "run", "--profile", "healthy", "--workers", "2", "--out", str(out),
         "--quiet", "--set", "load.duration_s=60", "--set", "load.concurrency=4"],
        cwd=ROOT, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)


def wait_for_records(out: Path, count: int, timeout_s: float = 90) -> None:
    """Returns once requests.jsonl holds `count` records; fails the test if it does not within `timeout_s` (what
    the test goes on to check would then say nothing)."""
    until(lambda: len(requests_of(out) if (out / "requests.jsonl").exists() else []) >= count, timeout_s,
          f"requests.jsonl reaching {count} records")


def test_workers_stop_when_the_driver_is_killed(tmp_path):
    out = tmp_path / "killed"
    process = soak_from_two_workers(out)
    try:
        wait_for_records(out, 8)
        workers = {pid for pid in children(process.pid)
                   if b"multiprocessing" in Path(f"/proc/{pid}/cmdline").read_bytes()}
        assert len(workers) >= 2
        process.kill()
        process.wait(10)
        until(lambda: not [pid for pid in workers if Path(f"/proc/{pid}").exists()], 5, "the workers ending")
    finally:
        if process.poll() is None:
            process.kill()


def test_a_worker_that_dies_leaves_the_report_of_everything_received_with_the_crash_named(tmp_path):
    out = tmp_path / "crash"
    process = soak_from_two_workers(out)
    try:
        wait_for_records(out, 8)
        workers = sorted(pid for pid in children(process.pid)
                         if b"spawn_main" in Path(f"/proc/{pid}/cmdline").read_bytes())  # not the resource tracker
        assert len(workers) == 2
        os.kill(workers[0], signal.SIGKILL)
        _, err = process.communicate(timeout=45)  # the other worker is cancelled: no waiting for the minute
    finally:
        if process.poll() is None:
            process.kill()
    assert process.returncode == 3, err
    assert "a load worker failed, so part of the load is missing: loadrepro-worker-" in err
    assert "exited with code -9; the report of everything received is in" in err
    report = json.loads((out / "report.json").read_text())
    assert report["stop_reason"] == "worker_crashed" and report["verdict"] == "fail"
    assert any(r["name"] == "interrupted" and r["fired"] and "loadrepro's own failure" in r["detail"]
               for r in report["rules"])
    assert any(n.startswith("workers: a load worker failed") for n in report["notes"])
    assert len(requests_of(out)) == report["requests"]["total"] > 0


def test_engine_death_stops_every_worker_and_loses_no_record(tmp_path):
    """A soak of a minute on the stock draft-pool engine: the engine dies within seconds, and the run must end
    then, not at the minute, with every record the workers made."""
    out = tmp_path / "death"
    done = run(out, "--profile", "draft-pool", "--workers", "2", "--set", "load.duration_s=60")
    assert done.returncode == 1, done.stderr
    report = json.loads((out / "report.json").read_text())
    assert report["stop_reason"] == "engine_death"  # then, not at the minute
    assert len(requests_of(out)) == report["requests"]["total"] > 0


def test_the_python_api_sends_from_workers_too(tmp_path):
    import loadrepro

    report = loadrepro.run("healthy", out=tmp_path / "api", workers=2)
    assert report.passed and report.workers.count == 2 and report.workers.backend == "processes"
    assert len(requests_of(tmp_path / "api")) == report.requests.total == 12


def test_max_rps_holds_for_all_workers_together(tmp_path):
    from tests.stub_server import StubServer

    with StubServer("ok", tokens=2).running() as stub:
        done = cli("run", "--base-url", stub.url, "--out", str(tmp_path), "--quiet", "--profile", "healthy",
                   "--workers", "2", "--set", "load.duration_s=3", "--set", "load.concurrency=8",
                   "--set", "load.max_rps=20", "--set", "verdict.min_cache_hit=0")
    assert done.returncode == 0, done.stdout + done.stderr
    sent = sorted(r["sent_ns"] for r in requests_of(tmp_path) if r.get("sent_ns"))
    most = max(sum(1 for t in sent[i:] if t < start + 1_000_000_000) for i, start in enumerate(sent))
    assert len(sent) >= 50 and most <= 20, (len(sent), most)


def test_a_request_waiting_in_one_worker_is_not_stalled_while_another_workers_streams_progress(tmp_path):
    """One stream at a time, 0.6 s each: with 4 conversations on 2 workers, a request waits up to ~2 s for its
    first token, far beyond the 0.4 s stall timeout, while the other worker's streams move. Progress is shared
    across processes, so nothing is stalled."""
    from tests.stub_server import StubServer

    with StubServer("queue", tokens=6, token_delay_s=0.1).running() as stub:
        done = cli("run", "--base-url", stub.url, "--out", str(tmp_path), "--quiet", "--profile", "healthy",
                   "--workers", "2", "--set", "workload.conversations=4", "--set", "workload.turns=1",
                   "--set", "workload.prefix_tokens=200", "--set", "workload.max_tokens=6",
                   "--set", "load.concurrency=4", "--set", "load.stall_timeout_s=0.4", "--set", "model='stub'")
    records = requests_of(tmp_path)
    assert [r["outcome"] for r in records] == ["ok"] * 4, (done.stderr, [r["detail"] for r in records])
    assert max((r["first_token_ns"] - r["sent_ns"]) / 1e9 for r in records) > 1.0
