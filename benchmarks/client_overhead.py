"""Benchmark: what a user pays for `loadrepro run`, beside a bare aiohttp streaming loop, in one invocation.
Asserts nothing.

    .venv/bin/python benchmarks/client_overhead.py [--requests 2000] [--concurrency 64 256] [--rounds 3]
        [--skip-zero] [--skip-sleeping] [--before 'env PYTHONPATH=OLD_TREE PYTHON -m loadrepro'] [--instructions]

Both clients run as their own processes against one stub (benchmarks/stub_engine.py, its own process) and send
the same number of streamed chat requests of ~1000 prompt tokens and 128 output tokens:
- the bare loop: benchmarks/bare_loop.py;
- loadrepro: `loadrepro run --base-url STUB --quiet` with a profile of REQUESTS one-turn conversations.

Printed per client:
- whole run: the process's CPU (user + system, from wait4) per request: interpreter start, imports, planning
  and length counting, the load, reports, teardown;
- load window: the process's CPU between the stub's first streamed arrival and its last streamed answer,
  sampled from /proc/PID/stat every 5 ms, per request;
- the time from the command to the stub's first streamed arrival (the first request of the load itself);
- requests/s over the window, and the stub's average in flight (Little's law: the concurrency when every
  slot is kept busy);
- with the sleeping stub (200 ms TTFT, 10 ms ITL), TTFT error against what the stub itself produced: mean and
  p50 over all requests, then the first wave (the first C requests sent) and the rest separately.

Each loadrepro runs once untimed first (16 requests), with bytecode writing allowed, so that its modules are
measured as an installed package runs them: from their cached bytecode, not compiled from source at each start
(PYTHONDONTWRITEBYTECODE=1 in the environment made a quarter of a second of every start compilation).

Each round also times an interpreter that imports the third-party packages a run imports before its first request
(THIRD_PARTY), and nothing else: the part of the first request no change inside loadrepro can cut.

The zero-delay stub runs twice: offering vLLM's /tokenize, and offering none (loadrepro then calibrates with
probe requests). The sleeping stub offers /tokenize. Each pair runs --rounds times, alternating, and the last line
of each block gives the median over the rounds of each loadrepro / bare ratio (this machine is noisy). With
--before, another loadrepro (an older tree) runs in each round too, between the two, for a before/after.

--instructions (needs valgrind) also runs each client once more under valgrind's callgrind, per stub and concurrency,
and prints the instructions each process executed, whole, and their ratio to the bare loop's: a count that a machine
whose speed drifts does not move, for a before/after that CPU seconds cannot settle. It does not weigh what an
instruction costs (a cache miss, a system call), and each client runs 50 to 100 times slower under valgrind (minutes
per 2,000 requests). loadrepro's watchers poll /health and /metrics on the clock, so a run that long polls that much
more often: its ratio to the bare loop reads high, while two loadrepro trees counted alike compare fairly.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shlex
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

HERE = Path(__file__).parent
TICK = os.sysconf("SC_CLK_TCK")
PROFILE = """api = "chat"
[workload]
seed = 11
conversations = {n}
turns = 1
prefix_tokens = 900
turn_tokens = 100
max_tokens = 128
[load]
concurrency = {c}
request_timeout_s = 600
stall_timeout_s = 60
"""


# What `loadrepro run` has imported from outside the standard library by its first request (its own dependencies;
# theirs come with them).
THIRD_PARTY = ("aiohttp", "aiolimiter", "ddsketch", "numpy", "orjson", "prometheus_client", "pydantic", "tomli_w",
               "typer", "zstandard")


@dataclass
class Outcome:
    name: str
    whole_cpu_s: float
    window_cpu_s: float
    window_s: float
    in_flight: float
    ttft: list[tuple[float, float]] = field(default_factory=list)  # (sent, client TTFT) per request
    stub_ttft: list[tuple[float, float]] = field(default_factory=list)  # (arrival, produced TTFT)
    stub_itl_ms: float = 0.0  # the mean gap between chunks the stub produced
    first_request_s: float = 0.0  # from the process's start to the stub's first streamed arrival


class CpuSampler(threading.Thread):
    """(time.monotonic(), CPU seconds) of one process every 5 ms, while it lives."""

    def __init__(self, pid: int) -> None:
        super().__init__(daemon=True)
        self.pid, self.samples = pid, []

    def run(self) -> None:
        path = f"/proc/{self.pid}/stat"
        while True:
            try:
                fields = Path(path).read_text().rsplit(")", 1)[1].split()
            except (FileNotFoundError, ProcessLookupError):
                return
            if fields[0] == "Z":
                return
            self.samples.append((time.monotonic(), (int(fields[11]) + int(fields[12])) / TICK))
            time.sleep(0.005)

    def at(self, t: float) -> float:
        before = [cpu for when, cpu in self.samples if when <= t]
        return before[-1] if before else 0.0


def run_client(name: str, command: list[str], url: str, n: int) -> tuple[Outcome, str]:
    httpx.get(f"{url}/stats")  # reset the stub's counters
    launched = time.monotonic()
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env)
    sampler = CpuSampler(process.pid)
    sampler.start()
    reader = threading.Thread(target=lambda: setattr(process, "out", process.stdout.read()), daemon=True)
    reader.start()
    _, status, usage = os.wait4(process.pid, 0)
    reader.join()
    sampler.join()
    stats = httpx.get(f"{url}/stats").json()
    first, last = stats["window"]
    if stats["requests"] != n:
        sys.exit(f"{name}: the stub answered {stats['requests']} of {n} streamed requests; "
                 f"stderr: {process.stderr.read().decode()[-2000:]}")
    outcome = Outcome(name, usage.ru_utime + usage.ru_stime, sampler.at(last) - sampler.at(first), last - first,
                      stats["in_flight_avg"], stub_ttft=[tuple(a) for a in stats["arrivals"]],
                      stub_itl_ms=stats["itl_mean_s"] * 1000, first_request_s=first - launched)
    return outcome, process.out.decode()


def bare(url: str, n: int, concurrency: int) -> Outcome:
    outcome, out = run_client("bare aiohttp", [sys.executable, str(HERE / "bare_loop.py"), url, str(n),
                                               str(concurrency)], url, n)
    outcome.ttft = [(sent, ttft) for sent, ttft, _ in json.loads(out)]
    return outcome


def loadrepro_command(url: str, n: int, concurrency: int, work: Path, program: list[str],
                      extra: list[str] | None = None) -> tuple[list[str], Path]:
    """`loadrepro run` of the benchmark's profile with `extra` flags, and the run directory it writes."""
    profile, run_dir = work / f"bench-{concurrency}.toml", work / f"run-{concurrency}-{time.monotonic_ns()}"
    profile.write_text(PROFILE.format(n=n, c=concurrency))
    return program + ["run", "--profile", str(profile), "--base-url", url, "--out", str(run_dir), "--quiet",
                      *(extra or [])], run_dir


def run_loadrepro(url: str, n: int, concurrency: int, work: Path, program: list[str], extra: list[str] | None = None,
                  name: str = "loadrepro run") -> tuple[Outcome, list[dict]]:
    """`loadrepro run` of the benchmark's profile with `extra` flags: its outcome and its request records (every one
    must be ok)."""
    command, run_dir = loadrepro_command(url, n, concurrency, work, program, extra)
    outcome, _ = run_client(name, command, url, n)
    with open(run_dir / "requests.jsonl") as lines:
        records = [json.loads(line) for line in lines]
    records = [r for r in records if r.get("kind") == "request"]
    bad = [r for r in records if r["outcome"] != "ok"]
    if bad:
        sys.exit(f"{name}: {len(bad)} requests not ok, e.g. {bad[0]['outcome']}: {bad[0]['detail']}")
    outcome.ttft = [(r["sent_ns"] / 1e9, (r["first_token_ns"] - r["sent_ns"]) / 1e9) for r in records]
    return outcome, records


def instructions(name: str, command: list[str], url: str, n: int) -> int:
    """The instructions the process executed, counted by valgrind's callgrind."""
    httpx.get(f"{url}/stats")  # reset the stub's counters
    env = {k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}
    done = subprocess.run(["valgrind", "--tool=callgrind", "--callgrind-out-file=/dev/null", *command],
                          capture_output=True, text=True, env=env)
    answered = httpx.get(f"{url}/stats").json()["requests"]
    counted = re.search(r"Collected : (\d+)", done.stderr)
    if answered != n or counted is None:
        sys.exit(f"{name} under valgrind: the stub answered {answered} of {n}; stderr: {done.stderr[-2000:]}")
    return int(counted.group(1))


def count_instructions(url: str, n: int, concurrency: int, work: Path, programs: dict[str, list[str]]) -> None:
    """Each client once under callgrind: its instructions, and their ratio to the bare loop's."""
    bare_count = instructions("bare aiohttp", [sys.executable, str(HERE / "bare_loop.py"), url, str(n),
                                               str(concurrency)], url, n)
    line = f"  instructions c={concurrency:<4} bare aiohttp {bare_count / 1e9:.2f} G"
    for name, program in programs.items():
        count = instructions(name, loadrepro_command(url, n, concurrency, work, program)[0], url, n)
        line += f"; {name} {count / 1e9:.2f} G, {count / bare_count:.3f}x"
    print(line)


def import_floor() -> float:
    """Seconds for a fresh interpreter to import THIRD_PARTY and end (numpy on one BLAS thread, as loadrepro does)."""
    env = {**{k: v for k, v in os.environ.items() if k != "PYTHONDONTWRITEBYTECODE"}, "OPENBLAS_NUM_THREADS": "1"}
    began = time.monotonic()
    subprocess.run([sys.executable, "-c", "import " + ", ".join(THIRD_PARTY)], check=True, env=env)
    return time.monotonic() - began


def ttft_errors(o: Outcome, wave: int) -> dict[str, float]:
    """TTFT error in ms against what the stub produced: mean, p50, the first wave (the first `wave` requests
    sent, against the first `wave` arrivals) and the rest."""
    client = [t for _, t in sorted(o.ttft)]
    stub = [t for _, t in sorted(o.stub_ttft)]
    return {"mean": (statistics.mean(client) - statistics.mean(stub)) * 1000,
            "p50": (statistics.median(client) - statistics.median(stub)) * 1000,
            "first wave": (statistics.mean(client[:wave]) - statistics.mean(stub[:wave])) * 1000,
            "rest": (statistics.mean(client[wave:]) - statistics.mean(stub[wave:])) * 1000}


def show(o: Outcome, n: int, concurrency: int, sleeping: bool) -> None:
    print(f"  {o.name:14} c={concurrency:<4} whole run {o.whole_cpu_s / n * 1000:5.2f} CPU-ms/req "
          f"({o.whole_cpu_s:5.2f} s)  load window {o.window_cpu_s / n * 1000:5.2f} CPU-ms/req  "
          f"{n / o.window_s:6.0f} req/s  stub in flight {o.in_flight:6.1f} ({o.in_flight / concurrency:.0%})  "
          f"first request {o.first_request_s:4.2f} s after the command")
    if sleeping:
        errors = ttft_errors(o, concurrency)
        print(f"  {'':14} TTFT error vs the stub's own (ms): "
              + ", ".join(f"{k} {v:+6.1f}" for k, v in errors.items()))


def summary(pairs: list[tuple[Outcome, Outcome]], concurrency: int, sleeping: bool, name: str = "loadrepro",
            floors: list[float] | None = None) -> None:
    ratios = {"whole run": [ours.whole_cpu_s / base.whole_cpu_s for base, ours in pairs],
              "load window": [ours.window_cpu_s / base.window_cpu_s for base, ours in pairs]}
    line = ", ".join(f"{k} {spread(v, 'x')}" for k, v in ratios.items())
    line += f", first request {spread([ours.first_request_s for _, ours in pairs], ' s')} after the command"
    if floors:
        line += f" (its third-party imports alone: {spread(floors, ' s')})"
    if sleeping:
        errors = [(ttft_errors(base, concurrency), ttft_errors(ours, concurrency)) for base, ours in pairs]
        for key in ("mean", "p50", "first wave"):
            base = statistics.median(b[key] for b, _ in errors)
            ours = statistics.median(o[key] for _, o in errors)
            line += f"; TTFT error {key} {ours:+.1f} against {base:+.1f} ms"
        # Each round's pair ran back to back: their ratio is steadier than a ratio of medians on a machine whose
        # speed drifts between rounds.
        line += f"; TTFT error mean / bare's, by round, {spread([o['mean'] / b['mean'] for b, o in errors], 'x')}"
    print(f"  median of {len(pairs)} rounds (lowest-highest), {name} / bare: {line}")


def spread(values: list[float], unit: str) -> str:
    """The median of the rounds' values, and their range."""
    return f"{statistics.median(values):.2f}{unit} ({min(values):.2f}-{max(values):.2f})"


def start_stub(ttft_ms: float, itl_ms: float, tokenize: bool) -> tuple[subprocess.Popen, str]:
    command = [sys.executable, str(HERE / "stub_engine.py"), "--tokens", "128", "--ttft-ms", str(ttft_ms),
               "--itl-ms", str(itl_ms)] + (["--tokenize"] if tokenize else [])
    process = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    return process, process.stdout.readline().strip()


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--requests", type=int, default=2000)
    parser.add_argument("--concurrency", type=int, nargs="+", default=[64, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--loadrepro", default=str(Path(sys.executable).with_name("loadrepro")),
                        help="the command that runs loadrepro (another checkout: 'PYTHON -m loadrepro')")
    parser.add_argument("--before", default=None,
                        help="also run this loadrepro (e.g. 'env PYTHONPATH=OLD_TREE PYTHON -m loadrepro') in each "
                             "round, for a before/after in one run")
    parser.add_argument("--skip-sleeping", action="store_true")
    parser.add_argument("--skip-zero", action="store_true")
    parser.add_argument("--instructions", action="store_true",
                        help="also count each client's instructions under valgrind's callgrind, once")
    args = parser.parse_args()
    n = args.requests
    stubs = [] if args.skip_zero else [(0.0, 0.0, True), (0.0, 0.0, False)]
    stubs += [] if args.skip_sleeping else [(200.0, 10.0, True)]
    with tempfile.TemporaryDirectory() as work:
        for ttft_ms, itl_ms, tokenize in stubs:
            process, url = start_stub(ttft_ms, itl_ms, tokenize)
            try:
                for program in [args.loadrepro, *([args.before] if args.before else [])]:  # bytecode cached
                    run_loadrepro(url, 16, 16, Path(work), shlex.split(program), name="warm-up")
                print(f"\nstub: 128 tokens, TTFT {ttft_ms:.0f} ms, ITL {itl_ms:.0f} ms, "
                      f"{'/tokenize' if tokenize else 'no tokenize endpoint'}; {n} requests")
                for concurrency in args.concurrency:
                    pairs, before_pairs, floors = [], [], []
                    for _ in range(args.rounds):
                        floors.append(import_floor())
                        base = bare(url, n, concurrency)
                        show(base, n, concurrency, bool(ttft_ms))
                        if args.before:
                            before, _ = run_loadrepro(url, n, concurrency, Path(work), shlex.split(args.before),
                                                      name="loadrepro before")
                            show(before, n, concurrency, bool(ttft_ms))
                            before_pairs.append((base, before))
                        ours, _ = run_loadrepro(url, n, concurrency, Path(work), shlex.split(args.loadrepro))
                        show(ours, n, concurrency, bool(ttft_ms))
                        pairs.append((base, ours))
                    if before_pairs:
                        summary(before_pairs, concurrency, bool(ttft_ms), "loadrepro before")
                    summary(pairs, concurrency, bool(ttft_ms), floors=floors)
                    if args.instructions:
                        programs = {"loadrepro": shlex.split(args.loadrepro),
                                    **({"loadrepro before": shlex.split(args.before)} if args.before else {})}
                        count_instructions(url, n, concurrency, Path(work), programs)
            finally:
                process.terminate()
                process.wait()


if __name__ == "__main__":
    main()
