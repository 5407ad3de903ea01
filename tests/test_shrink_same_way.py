"""Shrink's "the same way": requests failing with the engine's own error text are the same failure whether they
failed with a 500 or mid-stream (llama.cpp fails one way or the other by timing alone), and a different text, or
the text on a clean refusal, is not. The runs are real ones against tests/kv_pool_server.py."""

import sys

import pytest

from loadrepro.report.json import read_report
from loadrepro.shrink.attempts import Failure, failure_of, same_way
from tests.helpers import cli

SIGNATURE = "llamacpp-context-exceeded"
REFUSAL = "llamacpp-exceeds-context"  # llama.cpp's clean 400 for a prompt that cannot fit


def _run(tmp_path_factory, *flags: str):
    out = tmp_path_factory.mktemp("run")
    engine = f"{sys.executable} -m tests.kv_pool_server --host 127.0.0.1 --port {{port}} --pool 2200 {' '.join(flags)}"
    cli("run", "--profile", "healthy", "--engine-cmd", engine, "--out", str(out), "--quiet")
    return read_report(out)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    return {name: _run(tmp_path_factory, *flags) for name, flags in
            (("500", ()), ("mid_stream", ("--mid-stream",)), ("refused", ("--refuses",)))}


def test_the_failure_kept_is_the_engines_text_the_first_failure_carried(runs):
    assert runs["500"].first_failure is not None and runs["500"].first_failure.outcome == "server_error"
    assert failure_of(runs["500"]) == Failure("text", SIGNATURE)


def test_the_same_text_in_another_outcome_is_the_same_failure(runs):
    mixed = runs["mid_stream"].requests.by_outcome
    assert mixed["stream_error"] == 3 and mixed["server_error"] == 1
    wanted = failure_of(runs["500"])
    assert wanted is not None and same_way(runs["mid_stream"], wanted)
    assert failure_of(runs["mid_stream"]) == wanted


def test_the_text_on_a_clean_refusal_or_another_text_is_not_the_same_failure(runs):
    refused = runs["refused"]
    assert failure_of(refused) is None and {s.name: s.requests for s in refused.signatures}[REFUSAL] == 4
    assert not same_way(refused, Failure("text", REFUSAL))  # carried by 4 requests, none of which failed
    assert not same_way(runs["500"], Failure("text", "vllm-context-length"))
