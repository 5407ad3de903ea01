import json

from loadrepro.workload.export import WORKLOAD_FILE, open_workload
from tests.helpers import cli as loadrepro


def test_dry_run_describes_and_writes_the_exact_payloads(tmp_path):
    result = loadrepro("run", "--profile", "quickstart", "--dry-run", "--out", str(tmp_path / "run"))
    assert result.returncode == 0, result.stderr
    assert "requests   24 in 12 conversations" in result.stdout
    assert "faker" in result.stdout and "+0.00%" in result.stdout
    with open_workload(tmp_path / "run" / WORKLOAD_FILE) as lines:
        rows = [json.loads(line) for line in lines]
    assert rows[0]["type"] == "workload" and rows[0]["seed"] == 7
    requests = rows[1:]
    assert len(requests) == 24
    assert requests[0]["body"]["max_tokens"] == 1 and requests[1]["body"]["max_tokens"] == 256
    assert requests[0]["body"]["messages"][0]["role"] == "system"


def test_bad_profile_input_exits_2_with_the_reason():
    result = loadrepro("run", "--profile", "quickstart", "--dry-run", "--set", "workload.bogus=1")
    assert result.returncode == 2
    assert "workload.bogus: unknown key" in result.stderr


def test_a_remote_target_needs_confirmation_that_it_is_isolated():
    result = loadrepro("run", "--dry-run", "--base-url", "http://10.1.2.3:8000")
    assert result.returncode == 2
    assert "--target-is-isolated" in result.stderr


def test_profiles_lists_the_builtins():
    result = loadrepro("profiles")
    assert result.returncode == 0
    assert "dsa-prefix-shared" in result.stdout and "quickstart" in result.stdout


def test_a_dry_run_counts_as_the_run_does_with_the_same_fallback(tmp_path):
    """A target whose counts do not grow with the text (this one answers every probe with 5 prompt tokens): the run
    plans with estimates and says so, and so does its dry run, instead of failing where the run would go on."""
    from tests.stub_server import StubServer

    with StubServer("ok").running() as stub:
        dry = loadrepro("run", "--profile", "healthy", "--dry-run", "--base-url", stub.url, "--set", "model='stub'",
                        "--out", str(tmp_path / "dry"))
        run = loadrepro("run", "--profile", "healthy", "--base-url", stub.url, "--set", "model='stub'",
                        "--set", "verdict.min_cache_hit=0", "--out", str(tmp_path / "run"), "--quiet")
    for done in (dry, run):
        assert "token lengths are estimates in the simulated engine's tokens" in done.stderr, done.stderr
    assert dry.returncode == 0 and run.returncode == 0, dry.stderr + run.stderr
    with open_workload(tmp_path / "dry" / WORKLOAD_FILE) as dry_lines, \
            open_workload(tmp_path / "run" / WORKLOAD_FILE) as run_lines:
        assert dry_lines.read() == run_lines.read()  # the same payloads
