"""The reproducer bundle replays without loadrepro: same failure on stock, a pass on patched, no secrets."""

import gzip
import json
import subprocess
import sys
import zipfile

import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.load.engine import ManagedEngine
from loadrepro.report.bundle import make_bundle, scrub_bundle_text
from loadrepro.sim.process import sim_engine_command
from tests.helpers import cli

KEY = "sk-planted-bundle-0123456789"


@pytest.mark.parametrize("api", ["chat", "responses", "messages"])
def test_the_quickstart_bundle_replays_in_a_bare_python(tmp_path, api):
    run_dir = tmp_path / "run"
    done = cli("run", "--profile", "quickstart", "--out", str(run_dir), "--quiet", "--set", f"api={api!r}",
               env={"OPENAI_API_KEY": KEY})
    assert done.returncode == 1, done.stderr
    zip_path = make_bundle(run_dir, tmp_path / "bundle.zip")
    assert zip_path.stat().st_size < 5_000_000
    with zipfile.ZipFile(zip_path) as bundle:
        names = {n.split("/", 1)[1] for n in bundle.namelist()}
        assert {"README.md", "report.md", "report.json", "profile.toml", "requests.jsonl", "workload.jsonl.gz",
                "replay.py", "replay.json", "engine-log-excerpt.txt", "timeline.png", "latency.png"} <= names
        picture = next(n for n in bundle.namelist() if n.endswith("/timeline.png"))
        assert bundle.read(picture).startswith(b"\x89PNG")  # drawn for the bundle: the run drew none
        for name in bundle.namelist():
            assert KEY.encode() not in bundle.read(name)
        bundle.extractall(tmp_path / "unpacked")
    folder = next((tmp_path / "unpacked").iterdir())
    with gzip.open(folder / "workload.jsonl.gz", "rt") as lines:
        body = [json.loads(line) for line in lines][1]["body"]
    assert ("input" in body) is (api == "responses") and ("messages" in body) is (api != "responses")
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "bare")], check=True)
    bare_python = tmp_path / "bare" / "bin" / "python"
    assert subprocess.run([bare_python, "-c", "import loadrepro"], cwd=folder, capture_output=True).returncode != 0
    for policy, expected in (("stock", 1), ("patched", 0)):
        replay = replayed("quickstart", policy, folder, bare_python)
        assert replay.returncode == expected, replay.stdout + replay.stderr
        if policy == "stock":
            assert "first failure" in replay.stdout and "Draft KV cache" in replay.stdout
            assert "/health after: 503" in replay.stdout
        else:
            assert "outcomes: ok 24" in replay.stdout and "/health after: 200" in replay.stdout


def replayed(profile: str, policy: str, folder, python, *flags: str) -> subprocess.CompletedProcess:
    """The bundle's replay.py against a fresh simulated engine of the profile, with the given policy."""
    spec = load_profile(profile).sim.model_copy(update={"policy": policy})
    engine = ManagedEngine(sim_engine_command(spec), folder.parent / f"{policy}.log")
    try:
        url = engine.start(30)
        return subprocess.run([python, "replay.py", "--base-url", url, *flags], cwd=folder, capture_output=True,
                              text=True, timeout=120)
    finally:
        engine.stop()


def test_scrubbing_secrets_and_hosts():
    text = ('authorization: Bearer abc123\n{"api_key": "xyz"} --api-key sekret sk-abcdefghijkl\n'
            "target http://10.2.3.4:8000/v1 and engine.example.com at 192.168.1.9")
    cleaned = scrub_bundle_text(text, redact_host=True)
    for secret in ("abc123", "xyz", "sekret", "sk-abcdefghijkl", "10.2.3.4", "192.168.1.9"):
        assert secret not in cleaned
    assert "http://ENGINE_HOST:8000/v1" in cleaned
    assert "10.2.3.4" in scrub_bundle_text(text, redact_host=False)


@pytest.mark.parametrize("api", ["chat", "completions"])
@pytest.mark.slow
def test_a_wrong_answer_bundle_reproduces_on_a_fresh_stock_engine_and_not_on_patched(tmp_path, api):
    import loadrepro

    report = loadrepro.run("prefix-corruption", out=tmp_path / "run", overrides=[f"api={api!r}"])
    assert not report.passed and report.outputs.worst
    zip_path = make_bundle(tmp_path / "run", tmp_path / "bundle.zip")
    with zipfile.ZipFile(zip_path) as bundle:
        bundle.extractall(tmp_path / "unpacked")
    folder = next((tmp_path / "unpacked").iterdir())
    wrong = json.loads((folder / "answers.json").read_text())
    first = wrong[0]
    assert first["body"] and first["under_load"]["tokens"][first["position"]] != first["alone"]["tokens"][
        first["position"]]
    at = first["position"]
    assert first["alone"]["logprobs"][at] - first["alone"]["runner_up"][at] == pytest.approx(first["margin"], abs=1e-3)
    assert "--check-answers" in (folder / "README.md").read_text()
    for policy, expected in (("stock", 1), ("patched", 0)):
        replay = replayed("prefix-corruption", policy, folder, sys.executable, "--check-answers")
        assert replay.returncode == expected, replay.stdout + replay.stderr
        assert ("WRONG ANSWER REPRODUCED" in replay.stdout) is (policy == "stock")
        assert "prefix cache reset with POST /reset_prefix_cache" in replay.stdout


def test_a_trace_bundle_replays_its_sessions_in_order_and_fails_on_stock_only(tmp_path):
    """The trace-draft-pool run's bundle: replay.py sends each session's continuing turn only after the turn before
    it answered, so the warm-ups fill the cache first, and stock dies as the run did; patched passes."""
    run_dir = tmp_path / "run"
    done = cli("run", "--profile", "trace-draft-pool", "--out", str(run_dir), "--quiet")
    assert done.returncode == 1, done.stderr
    with zipfile.ZipFile(make_bundle(run_dir, tmp_path / "bundle.zip")) as bundle:
        bundle.extractall(tmp_path / "unpacked")
    folder = next((tmp_path / "unpacked").iterdir())
    with gzip.open(folder / "workload.jsonl.gz", "rt") as lines:
        rows = [json.loads(line) for line in lines][1:]
    assert len(rows) == 24 and {r["turn"] for r in rows} == {1, 2} and rows[-1]["arrival_s"] > rows[0]["arrival_s"]
    stock = replayed("trace-draft-pool", "stock", folder, sys.executable)
    assert stock.returncode == 1 and "Draft KV cache" in stock.stdout, stock.stdout + stock.stderr
    patched = replayed("trace-draft-pool", "patched", folder, sys.executable)
    assert patched.returncode == 0 and "outcomes: ok 24" in patched.stdout, patched.stdout + patched.stderr
    lines = [line for line in patched.stdout.splitlines() if " conversation " in line]
    done_at = {}
    for line in lines:  # "  1.23s conversation 4 turn 1: ok"
        t, _, conversation, _, turn = line.split()[:5]
        done_at[(int(conversation), int(turn.rstrip(":")))] = float(t.rstrip("s"))
    arrival = {(r["conversation"], r["turn"]): r["arrival_s"] for r in rows}
    assert all(done_at[(c, 1)] < done_at[(c, 2)] for c in range(12))
    assert all(done_at[key] >= arrival[key] for key in done_at)  # no turn before its recorded time


def test_replay_waits_for_a_whole_answer_as_long_as_the_request_may_take():
    """replay.py's reads wait stall_s on a stream, but a whole answer (stream false) says nothing until it is
    made: 1 s of silence beside a 0.3 s stall limit is ok for it, and a stall for a stream (not a cut stream: a
    read that timed out is an OSError too)."""
    import asyncio
    import importlib.util

    from loadrepro.standalone import replay as _  # noqa: F401 - the file the bundle carries
    from tests.stub_server import StubServer

    spec = importlib.util.spec_from_file_location("replay", _.__file__)
    assert spec is not None and spec.loader is not None
    replay = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(replay)
    body = {"model": "stub", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 4}
    with StubServer("ok", first_token_delay_s=1.0).running() as server:
        target = replay.Target(server.url, 0.3, 10.0)
        whole = asyncio.run(replay.send(target, "/v1/chat/completions", {**body, "stream": False}, []))
        stream = asyncio.run(replay.send(target, "/v1/chat/completions", {**body, "stream": True}, []))
    assert whole == ("ok", ""), whole
    assert stream[0] == "stalled", stream


def test_redacting_hosts_replaces_the_targets_and_keeps_loopback_binds():
    text = ("engine: llama-server --host 127.0.0.1 --port 8080 -m model.gguf\n"
            "also --host gpu-7.internal and --host 0.0.0.0; target http://gpu-7.internal:8000/v1\n"
            "peer 10.2.3.4 and http://localhost:8000/health, http://[::1]:8000, replay --base-url http://HOST:PORT")
    cleaned = scrub_bundle_text(text, redact_host=True, hosts=("gpu-7.internal",))
    assert "--host 127.0.0.1 --port 8080" in cleaned and "--host 0.0.0.0" in cleaned
    assert "gpu-7.internal" not in cleaned and "10.2.3.4" not in cleaned
    assert "--host ENGINE_HOST and" in cleaned and "http://ENGINE_HOST:8000/v1" in cleaned
    assert "http://localhost:8000/health" in cleaned and "http://[::1]:8000" in cleaned
    assert "http://HOST:PORT" in cleaned  # the README's placeholder stays one
    # llama.cpp's log timestamps have an address's shape; an address ending a sentence is one all the same
    log = "0.02.611.436 W decode: failed\n1.15.123.100 I srv ready at 10.9.8.7.\nversion 1.2.3.4.5"
    assert scrub_bundle_text(log, redact_host=True) == ("0.02.611.436 W decode: failed\n1.15.123.100 I srv ready at "
                                                        "ENGINE_HOST.\nversion 1.2.3.4.5")
    assert scrub_bundle_text(text, redact_host=False, hosts=("gpu-7.internal",)).count("gpu-7.internal") == 2


def test_the_readme_is_for_the_engines_maintainer(tmp_path):
    """A run whose requests failed with llama.cpp's 500 and whose log has no fatal line: the README is titled by the
    run, names the engine command and model, and shows the log's repeated warnings and last lines."""
    engine = (f"{sys.executable} -m tests.kv_pool_server --host 127.0.0.1 --port {{port}} --pool 2200 "
              "-m /models/tiny.gguf")
    run_dir = tmp_path / "run"
    assert cli("run", "--profile", "healthy", "--engine-cmd", engine, "--out", str(run_dir), "--quiet").returncode == 1
    done = cli("bundle", str(run_dir), "-o", str(tmp_path / "b.zip"), "--redact-host")
    assert done.returncode == 0, done.stderr
    with zipfile.ZipFile(tmp_path / "b.zip") as bundle:
        files = {n.split("/", 1)[1]: bundle.read(n) for n in bundle.namelist()}
    readme = files["README.md"].decode()
    title = readme.splitlines()[0]
    assert title == '# llama.cpp: 4 of 12 requests failed (server_error), HTTP 500 "Context size has been exceeded."'
    assert "Simulated healthy engine" not in title
    assert "--host 127.0.0.1 \\" in readme and "--pool 2200 \\" in readme  # flags as given, one a line
    # the command as given, which starts the engine again; the run's own port said beside it
    port = json.loads(files["report.json"])["target"]["base_url"].rsplit(":", 1)[1]
    assert "--port {port} \\" in readme and f"--port {port} " not in readme.split("This run's engine")[0]
    assert f"This run's engine had port {port}: `" in readme
    assert "served from `/models/tiny.gguf`" in readme and "counted by POST /tokenize" in readme
    assert "| 12 | `decode: failed to find a memory slot for batch of size N` |" in readme
    tail = files["engine-log-tail.txt"].decode().splitlines()
    assert tail[-1].startswith("srv  update_slots: Context size has been exceeded.") and tail[-1] in readme
    assert "engine-log-excerpt.txt" not in files  # no fatal line, yet the log is there
    assert b"0.0.0.0" not in files["README.md"] + files["report.json"]
    titled = cli("bundle", str(run_dir), "-o", str(tmp_path / "t.zip"), "--title", "Unified pool fails requests")
    assert titled.returncode == 0, titled.stderr
    with zipfile.ZipFile(tmp_path / "t.zip") as bundle:
        readme = bundle.read(next(n for n in bundle.namelist() if n.endswith("/README.md"))).decode()
    assert readme.startswith("# Unified pool fails requests\n")


def test_the_title_counts_every_failed_outcome(tmp_path):
    """The first overflowing request fails with a 500, the others mid-stream: the title counts all four failures,
    each outcome named with its count, and no status that only the first one had."""
    engine = f"{sys.executable} -m tests.kv_pool_server --host 127.0.0.1 --port {{port}} --pool 2200 --mid-stream"
    run_dir = tmp_path / "run"
    assert cli("run", "--profile", "healthy", "--engine-cmd", engine, "--out", str(run_dir), "--quiet").returncode == 1
    by_outcome = json.loads((run_dir / "report.json").read_text())["requests"]["by_outcome"]
    assert by_outcome["server_error"] == 1 and by_outcome["stream_error"] == 3, by_outcome
    assert cli("bundle", str(run_dir), "-o", str(tmp_path / "b.zip")).returncode == 0
    with zipfile.ZipFile(tmp_path / "b.zip") as bundle:
        readme = bundle.read(next(n for n in bundle.namelist() if n.endswith("/README.md"))).decode()
    assert readme.splitlines()[0] == ('# llama.cpp: 4 of 12 requests failed (stream_error 3, server_error 1), '
                                      '"Context size has been exceeded."')


def test_the_engine_is_named_by_its_signatures_its_command_or_what_counted_the_lengths():
    from loadrepro.report.bundle_readme import default_title, engine_of, model_of
    from tests.test_reports import fixed_report

    report = fixed_report()
    at_url = report.model_copy(update={
        "diagnosis": None, "target": report.target.model_copy(update={"engine_cmd": None}),
        "workload": report.workload.model_copy(update={"calibration_source": "POST /tokenize (llama.cpp)"})})
    assert engine_of(at_url) == "llama.cpp"
    started = at_url.model_copy(update={"target": report.target.model_copy(
        update={"engine_cmd": "vllm serve Qwen/Qwen3-0.6B --max-num-seqs 4 --port 8000"})})
    assert engine_of(started) == "vLLM" and default_title(started).startswith("vLLM: ")
    model = model_of(started)
    assert model is not None and model.given == "Qwen/Qwen3-0.6B" and "huggingface-cli download" in model.how


def _unpacked(run_dir, tmp_path):
    with zipfile.ZipFile(make_bundle(run_dir, tmp_path / "bundle.zip")) as bundle:
        bundle.extractall(tmp_path / "unpacked")
    return next((tmp_path / "unpacked").iterdir())


def test_a_bundle_replays_the_warm_ups_the_run_sent_before_its_load(tmp_path):
    """A cold engine that stalls its first 4 streams passed a run that warmed it with 4 requests first ([load]
    warmup_requests): the bundle's replay.py sends those warm-ups first, as the run did, and passes on a fresh cold
    engine; without them (--no-warmups) the same engine fails, which says that the failure needs a cold engine."""
    from tests.cold_server import app
    from tests.stub_server import serving
    from tests.test_warmups import _cold_run

    code, report = _cold_run(tmp_path / "run", "--stall-first", "4", more=("--set", "load.warmup_requests=4"))
    assert code == 0, report["reasons"]
    folder = _unpacked(tmp_path / "run", tmp_path)
    with gzip.open(folder / "workload.jsonl.gz", "rt") as lines:
        assert sum(json.loads(line)["type"] == "engine_warmup" for line in lines) == 4
    assert "--no-warmups" in (folder / "README.md").read_text()
    for flags, expected in (((), 0), (("--no-warmups",), 1)):
        with serving(app(4, None)) as url:
            done = subprocess.run([sys.executable, "replay.py", "--base-url", url, *flags], cwd=folder,
                                  capture_output=True, text=True, timeout=60)
        assert done.returncode == expected, done.stdout + done.stderr
        assert ("warm-ups ([load] warmup_requests): 4 sent first, not judged: stalled 4" in done.stdout) is not flags


def test_a_bundle_replays_each_request_with_its_session_header(tmp_path):
    """[workload] session_header: each request of the bundle's replay carries the header its request carried in
    the run (conversation-N under the profile's name), as a router with session affinity must see it."""
    from tests.trace_server import TraceServer

    run_dir = tmp_path / "run"
    done = cli("run", "--profile", "healthy", "--quiet", "--out", str(run_dir), "--set", "workload.conversations=3",
               "--set", "workload.turns=2", "--set", "workload.max_tokens=2", "--set",
               "workload.session_header='x-sticky'")
    assert done.returncode == 0, done.stderr
    folder = _unpacked(run_dir, tmp_path)
    assert "`x-sticky` header" in (folder / "README.md").read_text()
    server = TraceServer(answer_s=0.01)
    with server.running() as url:
        replay = subprocess.run([sys.executable, "replay.py", "--base-url", url], cwd=folder, capture_output=True,
                                text=True, timeout=60)
    assert replay.returncode == 0, replay.stdout + replay.stderr
    sent = sorted(got.headers.get("x-sticky", "") for got in server.received)
    assert sent == sorted(f"conversation-{c}" for c in range(3) for _ in range(2)), sent
