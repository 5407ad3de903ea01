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
