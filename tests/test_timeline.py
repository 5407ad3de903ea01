"""What the timeline shows of an engine's own metrics: whatever it publishes."""

import matplotlib

matplotlib.use("Agg")

import matplotlib.pyplot as plt  # noqa: E402

from loadrepro.report.plots import _kv_panel  # noqa: E402
from loadrepro.report.timeline import timeline_of  # noqa: E402
from tests.builders import metrics, record, result  # noqa: E402


def panel_of(samples) -> tuple[list[str], list[str]]:
    """The lines drawn in the engine-metrics panel (both axes) and its texts."""
    fig, ax = plt.subplots()
    _kv_panel(ax, timeline_of(result([record(1)], metrics=samples)))
    lines = [line.get_label() for a in fig.axes for line in a.get_lines()]
    texts = [text.get_text() for a in fig.axes for text in a.texts]
    plt.close(fig)
    return lines, texts


def test_an_engine_without_kv_usage_still_shows_what_waits_and_runs():
    llamacpp = [metrics(t, llamacpp__requests_processing=2, llamacpp__requests_deferred=1) for t in (0.5, 1.0)]
    lines, texts = panel_of(llamacpp)
    assert set(lines) == {"waiting", "running"} and "no engine metrics" not in texts
    assert "no KV usage published" in texts


def test_kv_usage_with_its_counts_and_nothing_at_all():
    vllm = [metrics(t, vllm__kv_cache_usage_perc=0.4, vllm__num_requests_waiting=2,
                    vllm__num_requests_running=3) for t in (0.5, 1.0)]
    assert set(panel_of(vllm)[0]) == {"KV usage %", "waiting", "running"}
    assert panel_of([]) == ([], ["no engine metrics"])


def test_the_legend_sits_above_the_tick_band_and_layout_needs_no_warning():
    import warnings

    from loadrepro.report.plots import png, timeline_figure
    from tests.builders import health

    records = [record(i, end_s=0.5 + 0.1 * i, conversation=i) for i in range(8)]
    run = result(records, health(200, 200, 200, start_s=-3.0))  # the pre-run poll, seconds before time zero
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # "Tight layout not applied" and its like fail the test
        fig = timeline_figure([timeline_of(run)])
        png(fig)
    load = fig.axes[0]
    legend = load.get_legend().get_window_extent()
    assert legend.y0 >= load.get_window_extent().y1 - 1  # above the panel, off its end ticks
    plt.close(fig)


def test_a_long_runs_timeline_has_its_latency_and_errors_window_by_window():
    from loadrepro.report.plots import timeline_figure
    from loadrepro.report.timeline import for_report
    from loadrepro.schema.long_run_sections import WindowRow
    from tests.test_reports import fixed_report

    windowed = [{"index": i + 1, "start_s": i * 1.0, "end_s": (i + 1) * 1.0, "requests": 4, "outcomes": {"ok": 4},
                 "failed": i % 2, "ttft_p50_ms": 100.0 + i, "ttft_p95_ms": 150.0 + i, "itl_p50_ms": None,
                 "itl_p95_ms": None, "kv_usage_max": None, "kv_usage_quiet": None, "waiting_max": None,
                 "preemptions": None} for i in range(4)]
    report = fixed_report().model_copy(update={"windows": [WindowRow(**w) for w in windowed]})
    timeline = for_report(timeline_of(result([record(1)], duration_s=4.0)), report)
    fig = timeline_figure([timeline])
    labels = {label for ax in fig.axes for label in ax.get_legend_handles_labels()[1]}
    assert {"TTFT p50 (ms)", "TTFT p95 (ms)", "errors %", "degradation's reference"} <= labels
    short = timeline_figure([timeline_of(result([record(1)]))])
    assert len(short.axes) < len(fig.axes)  # no windows, no panel for them
    plt.close(fig)
    plt.close(short)


def test_a_run_that_kept_few_records_draws_its_latency_from_the_sketches_of_every_request(tmp_path):
    """1,000 requests, 10 kept in memory: the latency histograms stand for all 1,000 (the run's sketches), with the
    same median as the requests themselves, and say where they were drawn from."""
    import numpy as np

    from loadrepro.load.recorder import Recorder
    from loadrepro.report.plots import latency_figure
    from loadrepro.report.timeline import build_timeline
    from tests.builders import START, record

    recorder = Recorder(tmp_path, keep=10)
    recorder.started(START)
    made = [record(i, end_s=1.0 + i * 0.01, tokens=2 + i % 50) for i in range(1000)]
    for r in made:
        recorder.record(r)
    recorder.close()
    t = build_timeline("run", START, max(r.end_ns for r in made), recorder.records, [], [], [], totals=recorder.tally)
    assert round(len(t.e2e_ms) * t.e2e_weight) == 1000 and round(len(t.ttft_ms) * t.ttft_weight) == 1000
    true_median = float(np.median([r.e2e_ms for r in made]))
    assert abs(float(np.median(t.e2e_ms)) - true_median) <= 0.02 * true_median
    figure = latency_figure(t)
    titles = [ax.get_title(loc="left") for ax in figure.axes]
    assert all("1,000 requests (drawn from the run's sketches" in title for title in titles), titles
