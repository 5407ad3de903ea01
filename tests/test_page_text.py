"""The text a page embeds changes nothing of how a browser parses it: the JSON its charts are drawn from holds no
character the HTML parser acts on inside a script element (an engine's error text `<!--<script>` swallowed the rest of
report.html) and reads back as the same strings; a secret scrubbed from the page is shown as <redacted>, not taken
for an element."""

from __future__ import annotations

import dataclasses
import json
import re

from loadrepro.records import Outcome
from loadrepro.report.html import Charts, render_html
from loadrepro.report.interactive import SCRIPTS, embedded_json, page_scripts, timeline_section, with_scripts
from loadrepro.report.timeline import timeline_of
from tests.builders import record, result
from tests.hostile_server import HOSTILE
from tests.test_reports import fixed_report

UNSAFE = ("<", ">", "&", "\u2028", "\u2029")


def test_embedded_json_holds_no_character_the_page_parser_acts_on_and_reads_back_the_same():
    data = {"texts": list(HOSTILE), "nested": [{"detail": t, "n": i} for i, t in enumerate(HOSTILE)]}
    text = embedded_json(data)
    assert not any(c in text for c in UNSAFE), text
    assert json.loads(text) == data


def _hostile_timeline():
    records = [record(i, Outcome.SERVER_ERROR if i % 2 else Outcome.OK, end_s=0.1 * i, conversation=i,
                      detail=HOSTILE[i % len(HOSTILE)] if i % 2 else "") for i in range(1, 9)]
    return timeline_of(dataclasses.replace(result(records), label="<!--<script>label\u2028"))


def test_a_timeline_section_ends_its_script_element_only_where_it_ends():
    section = timeline_section(_hostile_timeline())
    found = re.fullmatch(r"(?s)(.*)<script type=application/json id=timeline-data>(.*)</script>", section)
    assert found and "<script" not in found.group(1), section
    embedded = found.group(2)
    assert not any(c in embedded for c in UNSAFE) and "<!--" not in embedded, embedded
    series = json.loads(embedded)
    assert series["label"] == "<!--<script>label\u2028"
    assert {r[6] for r in series["requests"]} == {""} | {HOSTILE[i % len(HOSTILE)] for i in range(1, 9, 2)}


def test_the_pages_scripts_go_in_once_at_their_place_whatever_the_texts_say():
    timeline = _hostile_timeline()
    report = fixed_report().model_copy(update={"label": SCRIPTS, "notes": list(HOSTILE)})
    page = with_scripts(render_html(report, Charts(timeline_section(timeline), ""))).decode()
    assert page.count(page_scripts()) == 1 and page.endswith(page_scripts() + "\n</body></html>\n")
    before = page[:page.index(page_scripts())]
    # the only elements of scripts before the page's own: the one the timeline's data is in
    assert re.findall(r"<script[^>]*>", before) == ["<script type=application/json id=timeline-data>"]
    assert "<!--" not in before and before.count("</script") == 1
    notes = re.search(r"<h2>Notes</h2><ul>(.*?)</ul>", page)
    assert notes and "<b>" not in notes.group(1) and "&lt;b&gt;bold&lt;/b&gt;" in notes.group(1)


def test_a_scrubbed_secret_is_shown_as_the_word_redacted_not_taken_for_an_element():
    secret = "Bearer abcdefgh12345678"
    page = with_scripts(f"<p>{secret} was sent</p>" + timeline_section(timeline_of(result(
        [record(1, Outcome.SERVER_ERROR, detail=f"auth: {secret}")]))) + SCRIPTS).decode()
    assert "abcdefgh12345678" not in page
    assert "<p>Bearer &lt;redacted&gt; was sent</p>" in page and "<redacted>" not in page
    data = re.search(r"id=timeline-data>(.*?)</script>", page)
    assert data and json.loads(data.group(1))["requests"][0][6] == "auth: Bearer <redacted>"
