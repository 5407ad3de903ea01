"""Every engine's metric families map to the same canonical series at scrape time, and rules, reports and plots
read only those. vLLM's and llama.cpp's expositions were captured from the engines this project runs; SGLang's
and TensorRT-LLM's are written in their documented shape; the simulated engine's is scraped live."""

from pathlib import Path

import httpx
import pytest

from loadrepro.config.profile_files import load_profile
from loadrepro.judge.classify import pressure_in_metrics
from loadrepro.judge.judgement import judge
from loadrepro.load.watch.metrics_scrapes import canonical, parse_kept
from loadrepro.records import MetricsSample
from loadrepro.report.build import build_report
from loadrepro.report.timeline import timeline_of
from loadrepro.sim.config import sim_config
from loadrepro.sim.serve import sim_in_thread
from tests.builders import START, S, record, result, ruled
from tests.test_profile_signatures import summary

FIXTURES = Path(__file__).parent / "fixtures" / "metrics"


def scraped(name: str, **replace: str) -> dict[str, float]:
    text = (FIXTURES / f"{name}.txt").read_text()
    for old, new in replace.items():
        text = text.replace(old, new)
    return canonical(parse_kept(text))


@pytest.mark.parametrize("engine,expected", [
    ("vllm", {"kv_usage": 0.0, "running": 0.0, "waiting": 0.0, "preemptions": 0.0, "prefix_cache_hits": 224.0,
              "prefix_cache_queries": 512.0, "engine_rss_bytes": 5.6891392e+08, "engine_finished_requests": 2.0}),
    ("llamacpp", {"running": 0.0, "waiting": 0.0}),
    ("sglang", {"kv_usage": 0.97, "running": 6.0, "waiting": 3.0, "preemptions": 4.0}),
    ("trtllm", {"kv_usage": 0.88, "running": 12.0, "waiting": 4.0}),
])
def test_each_engines_exposition_maps_to_the_canonical_series(engine, expected):
    assert scraped(engine) == expected


def test_vllms_old_name_for_kv_usage_is_the_same_series():
    old = scraped("vllm", **{"vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
                             'gpu_cache_usage_perc{engine="0",model_name="tiny"} 0.0':
                             'gpu_cache_usage_perc{engine="0",model_name="tiny"} 0.95'})
    assert old["kv_usage"] == 0.95


def test_the_simulated_engines_pools_are_shares_of_their_blocks():
    with sim_in_thread(sim_config("draft-pool")) as sim:
        values = canonical(parse_kept(httpx.get(f"{sim.url}/metrics").text))
    assert {"kv_usage", "running", "waiting", "preemptions", "pool_usage:primary", "pool_usage:draft"} <= set(values)


@pytest.mark.parametrize("engine,replace,kv_peak,preempted", [
    ("vllm", {"vllm:kv_cache_usage_perc": "vllm:gpu_cache_usage_perc",
              'gpu_cache_usage_perc{engine="0",model_name="tiny"} 0.0':
              'gpu_cache_usage_perc{engine="0",model_name="tiny"} 0.95'}, 0.95, None),
    ("sglang", {}, 0.97, 4.0),
])
def test_rules_reports_and_plots_agree_on_what_the_engine_reported(engine, replace, kv_peak, preempted):
    """The old vLLM name fills the report's KV peak and fires the pressure rule; SGLang's retractions are the
    same number in the finding and in report.json."""
    calm = {k: 0.0 for k in scraped(engine, **replace)}
    samples = [MetricsSample(START + S // 2, calm), MetricsSample(START + S, scraped(engine, **replace))]
    run = result([record(1)], metrics=samples)
    profile = load_profile("quickstart")
    report = build_report(run, profile, judge(run, profile.verdict), summary(), "loadrepro run")
    assert report.pressure.kv_usage_peak == kv_peak
    assert report.pressure.preemptions == (preempted if preempted is not None else 0.0)
    finding = ruled(pressure_in_metrics, run, profile.verdict)
    assert finding.facts["kv_usage_peak"] == kv_peak
    assert finding.facts.get("preemptions") == preempted
    assert max(timeline_of(run).kv_usage) == kv_peak


def test_data_parallel_engines_add_up_and_the_fullest_pool_counts():
    text = (FIXTURES / "vllm.txt").read_text()
    second = "\n".join(line.replace('engine="0"', 'engine="1"') for line in text.splitlines()
                       if line.startswith(("vllm:num_requests_waiting{", "vllm:kv_cache_usage_perc{")))
    values = canonical(parse_kept(text.replace('vllm:num_requests_waiting{engine="0",model_name="tiny"} 0.0',
                                               'vllm:num_requests_waiting{engine="0",model_name="tiny"} 2.0')
                                  + "\n" + second.replace("} 0.0", "} 0.5")))
    assert values["waiting"] == 2.5 and values["kv_usage"] == 0.5


class Answers:
    """A /metrics that answers each scrape with the next of `statuses` (200: a vLLM-style exposition), then 200."""

    def __init__(self, *statuses: int) -> None:
        self.statuses, self.asked = list(statuses), 0

    async def metrics(self, _request):
        from aiohttp import web

        self.asked += 1
        status = self.statuses.pop(0) if self.statuses else 200
        if status != 200:
            return web.Response(status=status, text="Loading model")
        return web.Response(text="vllm:num_requests_running 1\nvllm:num_requests_waiting 0\n")


def watched(answers: Answers, scrapes: int) -> list:
    """Up to `scrapes` scrapes by the metrics watcher, as its run loop makes them; what it said and sampled."""
    import asyncio

    from aiohttp import web

    from loadrepro.load.transport import Transport
    from loadrepro.load.watch.metrics_scrapes import MetricsWatcher
    from tests.stub_server import serving

    app = web.Application()
    app.router.add_get("/metrics", answers.metrics)
    said: list = []

    async def watch(url: str) -> None:
        async with Transport(url, None, timeout_s=5.0) as http:
            watcher = MetricsWatcher(http, "/metrics", 0.0, said.append)
            for _ in range(scrapes):  # the run loop's condition, bounded
                if not await watcher.scrape():
                    return

    with serving(app) as url:
        asyncio.run(watch(url))
    return said


def test_a_metrics_endpoint_that_answers_503_for_a_while_is_watched_again_once_it_answers():
    """llama.cpp answers /metrics 503 while a restarted engine loads its model: an outage of /metrics, said once,
    not "this engine publishes no metrics"."""
    answers = Answers(200, 503, 503, 503, 200, 200)
    said = watched(answers, 6)
    assert answers.asked == 6
    samples = [s for s in said if isinstance(s, MetricsSample)]
    notes = [s.text for s in said if not isinstance(s, MetricsSample)]
    assert len(samples) == 3 and samples[-1].values["running"] == 1.0, said
    assert len(notes) == 2 and "answered HTTP 503" in notes[0] and "answered again" in notes[1], notes


def test_a_target_whose_metrics_are_down_from_the_start_is_scraped_until_they_answer():
    answers = Answers(503, 502, 200)
    said = watched(answers, 3)
    assert [type(s).__name__ for s in said] == ["Note", "Note", "MetricsSample"], said
    assert answers.asked == 3


@pytest.mark.parametrize("status", [404, 501])
def test_a_target_that_publishes_no_metrics_is_not_scraped_again(status):
    """llama.cpp without --metrics answers 501; a server with no such route 404: metrics are not watched, said once."""
    answers = Answers(status, 200)
    said = watched(answers, 5)
    assert answers.asked == 1, answers.asked
    [note] = said
    assert f"answered HTTP {status}; metrics are not watched" in note.text
