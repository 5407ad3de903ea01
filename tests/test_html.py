"""report.html and the PNG pictures of a real stock run (--png): parseable, offline, and marking the right moments;
without --png, a run draws no PNG and imports no matplotlib, and report.md links report.html."""

import json
import re
from html.parser import HTMLParser

import pytest
from PIL import Image

from loadrepro.config.defaults import PICTURES_ENV
from loadrepro.records import read_jsonl
from loadrepro.report.interactive import page_scripts
from tests.helpers import cli


class Collect(HTMLParser):
    def __init__(self):
        super().__init__()
        self.tags, self.attrs = [], []

    def handle_starttag(self, tag, attrs):
        self.tags.append(tag)
        self.attrs.append((tag, dict(attrs)))


@pytest.fixture(scope="module")
def stock_run(tmp_path_factory):
    out = tmp_path_factory.mktemp("html") / "run"
    done = cli("run", "--profile", "quickstart", "--out", str(out), "--quiet", "--png", env={PICTURES_ENV: "1"})
    assert done.returncode == 1, done.stderr
    return out


def test_report_html_parses_and_is_self_contained(stock_run):
    html = (stock_run / "report.html").read_text()
    parser = Collect()
    parser.feed(html)
    assert {"img", "table", "figure"} <= set(parser.tags)
    assert "link" not in parser.tags  # its scripts are inline (the chart library vendored), none fetched
    assert "script" in parser.tags and all("src" not in attrs for tag, attrs in parser.attrs if tag == "script")
    for tag, attrs in parser.attrs:
        for name in ("src", "href"):
            assert not str(attrs.get(name, "")).startswith(("http:", "https:", "//")), (tag, attrs)
        if tag == "img":
            assert attrs["src"].startswith("data:image/png;base64,"), attrs
    assert "@import" not in html and "url(http" not in html
    assert "FAIL" in html and "Draft KV cache context resize failed" in html
    # the scripts as they ship: the page's text is scrubbed of secrets, loadrepro's own code is not rewritten
    assert page_scripts() in html


def test_timeline_marks_the_health_transition_and_first_failure_at_the_right_time(stock_run):
    html = (stock_run / "report.html").read_text()
    figure = re.search(r'<figure id=timeline data-health="([^"]*)" data-first-failure-s="([^"]*)" '
                       r'data-windows="" data-reference-window-s="">', html)
    assert figure and html[figure.end():].startswith("<img alt=\"timeline\" src=\"data:image/png;base64,")
    samples = list(read_jsonl(stock_run / "samples.jsonl"))
    start = next(s["t_ns"] for s in samples if s["kind"] == "note" and s["source"] == "run")
    failed = [r for r in read_jsonl(stock_run / "requests.jsonl") if r["outcome"] not in ("ok", "rejected")]
    assert float(figure.group(2)) == pytest.approx((min(r["end_ns"] for r in failed) - start) / 1e9, abs=1e-3)
    transitions = [t.split(":") for t in figure.group(1).split(";")]
    assert transitions[0][1] == "200" and transitions[-1][1] == "503"
    first_503 = min(s["t_ns"] for s in samples if s["kind"] == "health" and s["status"] == 503)
    assert float(transitions[-1][0]) == pytest.approx((first_503 - start) / 1e9, abs=1e-3)
    # /health is polled as soon as requests fail, so the band turns red within a poll of the first failure
    assert float(transitions[-1][0]) - float(figure.group(2)) < 0.5


def test_pngs_are_valid_images_referenced_from_the_markdown(stock_run):
    for name in ("timeline.png", "latency.png"):
        with Image.open(stock_run / name) as image:
            image.verify()
        with Image.open(stock_run / name) as image:
            assert image.format == "PNG" and image.size[0] >= 800
        assert f"]({name})" in (stock_run / "report.md").read_text()
    report = json.loads((stock_run / "report.json").read_text())
    assert report["verdict"] == "fail"


def test_a_run_draws_no_png_unless_asked_and_its_markdown_links_the_page(tmp_path):
    import subprocess
    import sys

    script = ("import sys, loadrepro; loadrepro.run('quickstart', out=sys.argv[1]); "
              "print('matplotlib' in sys.modules)")
    done = subprocess.run([sys.executable, "-c", script, str(tmp_path)], capture_output=True, text=True, timeout=120,
                          env={**__import__("os").environ, PICTURES_ENV: "1"})
    assert done.returncode == 0 and done.stdout.strip() == "False", done.stdout + done.stderr
    assert (tmp_path / "report.html").exists() and not list(tmp_path.glob("*.png"))
    html = (tmp_path / "report.html").read_text()
    assert "<img" not in html and "data-loadrepro-chart=timeline:timeline" in html
    assert "](report.html)" in (tmp_path / "report.md").read_text()
