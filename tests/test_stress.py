"""`loadrepro stress`: an engine that breaks under one phase's traffic fails that phase alone, and the same engine
without the defect fails none; a target at a URL that died makes the phases after it skip, and one that lives
skips none for death; the phases chosen and the battery's own ([[phases]]); the skips the target's capabilities
decide; the battery's files; a release matrix; a failing phase's run shrunk.

The phases of a shape (burst, microburst, zigzag, ramp-recovery, connection-churn) run in the whole battery on the
simulated engine's patched policy, which must fail none; ramp-recovery's must and must-not: test_stress_recovery.py."""

from __future__ import annotations

import json
import sys
import xml.etree.ElementTree as ET
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from loadrepro.config.defaults import PICTURES_ENV
from loadrepro.config.profile_files import load_profile
from loadrepro.errors import UsageError
from loadrepro.report.stress import write_stress
from loadrepro.schema.stress_report import Capabilities, PhaseRow, PhaseVerdict, StressReport
from loadrepro.stress.battery import AFTER_FAULTS_S
from loadrepro.stress.command import chosen
from loadrepro.stress.phases import BY_NAME, DEFAULT_RATE, PHASES, Reference, Traffic
from tests.helpers import ROOT, cli, facts

# The phases the engine-command batteries run: gentle first, malformed, and one after it (each on a fresh engine).
# cancel-storm joins once its abort, due 1 s into its load, comes while a fast test server still serves it.
BATTERY = "steady,oversize,malformed,agentic"
PACE_S = "0.05"  # the test server's time per token: the malformed phase's bad bodies, due 0.5 s in, meet its load


def bad_input_engine(mode: str) -> str:
    """tests/bad_input_server.py as an engine command: "exits_on_utf8" aborts on a body that is not UTF-8 (as
    llama.cpp 0.3.7 did); "refuses" answers every malformed body with a 4xx and serves on."""
    return f"{sys.executable} -m tests.bad_input_server --port {{port}} --mode {mode} --token-delay {PACE_S}"


def stress_json(root: Path) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads((root / "stress.json").read_text())
    return loaded


def verdicts(stressed: dict[str, Any]) -> dict[str, str]:
    return {p["name"]: p["verdict"] for p in stressed["phases"]}


def phase(stressed: dict[str, Any], name: str) -> dict[str, Any]:
    return next(p for p in stressed["phases"] if p["name"] == name)


def battery(root: Path, *args: str, pictures: bool = False) -> tuple[int, dict[str, Any]]:
    """`loadrepro stress ARGS` into `root`: its exit code and stress.json; with `pictures`, each phase's run writes
    its report.html."""
    done = cli("stress", "--out", str(root), "--quiet", *args, env={PICTURES_ENV: "1"} if pictures else None)
    assert (root / "stress.json").is_file(), done.stderr[-2000:]
    return done.returncode, stress_json(root)


# -- an engine command that fails only under one phase's traffic, and its twin without the defect ----------------


@pytest.fixture(scope="module")
def crashing(tmp_path_factory: pytest.TempPathFactory) -> tuple[int, dict[str, Any], Path]:
    root = tmp_path_factory.mktemp("crashing") / "stress"
    code, stressed = battery(root, "--phases", BATTERY, "--engine-cmd", bad_input_engine("exits_on_utf8"),
                             pictures=True)
    return code, stressed, root


@pytest.mark.slow
def test_an_engine_that_dies_on_bad_utf8_fails_the_malformed_phase_alone(crashing):
    code, stressed, _ = crashing
    assert code == 1
    assert verdicts(stressed) == {"steady": "pass", "oversize": "skip", "malformed": "fail", "agentic": "pass"}
    malformed = phase(stressed, "malformed")
    assert {"bad_input_crash", "engine_death"} <= set(malformed["rules_fired"]), malformed
    assert stressed["first_failure"] == "malformed" and stressed["fresh_engine"] is True
    assert [p["rules_fired"] for p in stressed["phases"] if p["name"] != "malformed"] == [[], [], []]
    # the phase after it met an engine started afresh, and served all of its traffic
    agentic = phase(stressed, "agentic")
    assert agentic["requests"] > 0 and set(agentic["outcomes"]) == {"ok"}, agentic


@pytest.mark.slow
def test_the_same_engine_without_the_defect_fails_no_phase(tmp_path):
    code, stressed = battery(tmp_path / "stress", "--phases", BATTERY, "--engine-cmd", bad_input_engine("refuses"))
    assert code == 0
    assert verdicts(stressed) == {"steady": "pass", "oversize": "skip", "malformed": "pass", "agentic": "pass"}
    assert stressed["first_failure"] is None
    assert all(p["reasons"] for p in stressed["phases"] if p["verdict"] == "skip")
    malformed = json.loads((tmp_path / "stress" / "malformed" / "report.json").read_text())
    said = facts(malformed, "no_recovery")
    assert said["faults"] == 1 and said["not_caused"] == 0, said  # its bad bodies were sent, and refused


@pytest.mark.slow
def test_a_failing_phase_is_a_failing_test_case_and_names_its_shrink_command(crashing):
    _, stressed, root = crashing
    malformed = phase(stressed, "malformed")
    assert malformed["shrink"] == f"loadrepro shrink {root / 'malformed'}"
    assert f"`{malformed['shrink']}`" in (root / "stress.md").read_text()
    cases = {c.get("name"): c for c in ET.parse(root / "junit.xml").getroot().iter("testcase")}
    assert set(cases) == {"steady", "oversize", "malformed", "agentic"}
    assert cases["malformed"].find("failure") is not None and cases["oversize"].find("skipped") is not None
    assert all(cases[n].find("failure") is None and cases[n].find("skipped") is None for n in ("steady", "agentic"))
    html = (root / "stress.html").read_text()
    for name in ("steady", "malformed", "agentic"):
        assert f'<a href="{name}/report.html">' in html and (root / name / "report.html").is_file()


@pytest.mark.slow
def test_a_failing_phase_s_run_shrinks_to_a_reproducer_that_still_fails(crashing, tmp_path):
    _, stressed, root = crashing
    done = cli("shrink", str(root / "malformed"), "--max-trials", "3", "--out", str(tmp_path / "shrunk"))
    assert done.returncode == 0, done.stderr[-2000:]
    shrunk = load_profile(str(tmp_path / "shrunk" / "profile.toml"))
    assert [e.action for e in shrunk.chaos.events] == ["malformed"]  # the phase's own traffic, bad bodies and all
    run = json.loads((tmp_path / "shrunk" / "run" / "report.json").read_text())
    assert run["verdict"] == "fail" and "engine_death" in {r["name"] for r in run["rules"] if r["fired"]}
    assert (tmp_path / "shrunk" / "bundle.zip").is_file()


# -- a target at a URL: what one phase left in it the next meets --------------------------------------------------


@pytest.fixture
def url_target() -> Iterator[Any]:
    """tests/netservers.py as a process of its own at a URL, answering streams at once; `exit_after` streamed
    answers and it exits, as an engine that died."""
    import subprocess

    started: list[subprocess.Popen[str]] = []

    def start(*args: str) -> str:
        process = subprocess.Popen([sys.executable, "-m", "tests.netservers", *args], cwd=ROOT,
                                   stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True)
        started.append(process)
        assert process.stdout is not None
        return process.stdout.readline().strip()

    yield start
    for process in started:
        if process.poll() is None:
            process.kill()
        process.wait(10)


# phases without faults on purpose, whose run takes a server answering at once a second or two; steady sends 32
# streamed requests, so the 20th answer is in it
URL_BATTERY = "steady,oversize,agentic"


def test_a_target_at_a_url_that_died_in_a_phase_skips_the_phases_after_it(tmp_path, url_target):
    code, stressed = battery(tmp_path / "stress", "--phases", URL_BATTERY, "--base-url",
                             url_target("--exit-after", "20"))
    assert code == 1
    assert verdicts(stressed) == {"steady": "fail", "oversize": "skip", "agentic": "skip"}
    assert "engine_death" in phase(stressed, "steady")["rules_fired"]
    # the death is why, before what the target takes: oversize would have skipped for want of a context
    assert [phase(stressed, n)["reasons"] for n in ("oversize", "agentic")] == [["the target died in phase steady"]] * 2
    assert phase(stressed, "agentic")["run_dir"] is None and not (tmp_path / "stress" / "agentic").exists()
    assert stressed["fresh_engine"] is False and stressed["first_failure"] == "steady"


def test_a_target_at_a_url_that_lives_skips_no_phase_for_death(tmp_path, url_target):
    code, stressed = battery(tmp_path / "stress", "--phases", URL_BATTERY, "--base-url", url_target())
    assert code == 0
    assert verdicts(stressed) == {"steady": "pass", "oversize": "skip", "agentic": "pass"}
    assert not [p for p in stressed["phases"] if any("died" in r for r in p["reasons"]) or p["engine"]]


# -- the phases chosen ---------------------------------------------------------------------------------------------


def base() -> Any:
    return load_profile("stress")


def test_the_phases_asked_for_run_in_the_battery_s_order():
    names = [p.name for p in chosen(base(), "malformed, steady,agentic,oversize", fit=False)]
    assert names == ["steady", "oversize", "malformed", "agentic"]
    assert [p.name for p in chosen(base(), None, fit=False)] == [p.name for p in PHASES]


def test_an_unknown_phase_is_a_usage_error_naming_the_known():
    with pytest.raises(UsageError) as raised:
        chosen(base(), "steady,stedy", fit=False)
    said = str(raised.value)
    assert "stedy" in said and all(p.name in said for p in PHASES), said


def test_an_unknown_phase_exits_2_before_anything_starts(tmp_path):
    done = cli("stress", "--phases", "nope", "--out", str(tmp_path / "stress"), "--quiet")
    assert done.returncode == 2 and "nope" in done.stderr, done.stderr
    assert not (tmp_path / "stress" / "stress.json").exists()


BATTERY_OF_ONES_OWN = """
name = "mine"
[sim]
max_model_len = 4096
[[phases]]
name = "steady"
set = ["load.concurrency = 2", "workload.conversations = 3"]
[[phases]]
name = "my-traffic"
profile = "traffic/own.toml"
set = ["workload.conversations = 5"]
"""

OWN = """
[workload]
conversations = 9
turns = 1
prefix_tokens = 200
max_tokens = 4
[load]
concurrency = 3
"""


def caps(**given: Any) -> Capabilities:
    known: dict[str, Any] = {"flavour": "simulated engine", "evidence": [], "models": ["m"], "max_model_len": None,
                             "kv_limits": None, "kv_pool_tokens": None, "apis": ["chat"], "structured_outputs": None}
    return Capabilities(**(known | given))


REFERENCE = Reference(DEFAULT_RATE, False)


def test_a_profile_s_phases_are_the_battery_a_file_read_from_its_folder(tmp_path, monkeypatch):
    (tmp_path / "profiles" / "traffic").mkdir(parents=True)
    (tmp_path / "profiles" / "mine.toml").write_text(BATTERY_OF_ONES_OWN)
    (tmp_path / "profiles" / "traffic" / "own.toml").write_text(OWN)
    monkeypatch.chdir(tmp_path)  # elsewhere than the profile's folder
    profile = load_profile("profiles/mine.toml")
    steady, own = chosen(profile, None, fit=False)
    assert (steady.name, own.name) == ("steady", "my-traffic")
    built = steady.build(profile, caps(max_model_len=4096), REFERENCE)
    assert isinstance(built, Traffic)
    assert built.profile.load.concurrency == 2 and built.profile.workload.conversations == 3  # its overrides
    assert built.profile.load.arrival == "closed" and built.profile.workload.turns == 2  # steady's own traffic
    given = own.build(profile, caps(), REFERENCE)
    assert isinstance(given, Traffic)
    assert given.profile.name == "own" and given.profile.workload.conversations == 5
    assert given.profile.load.concurrency == 3
    assert [p.name for p in chosen(profile, "my-traffic", fit=False)] == ["my-traffic"]
    with pytest.raises(UsageError):
        chosen(profile, "malformed", fit=False)  # not in this battery


def test_a_phase_of_ones_own_that_names_no_built_in_phase_is_a_usage_error(tmp_path):
    (tmp_path / "bad.toml").write_text('name = "bad"\n[[phases]]\nname = "stedy"\n')
    with pytest.raises(UsageError) as raised:
        chosen(load_profile(str(tmp_path / "bad.toml")), None, fit=False)
    assert "stedy" in str(raised.value) and "steady" in str(raised.value)


# -- what the target takes ---------------------------------------------------------------------------------------


def test_phases_the_target_cannot_take_are_skipped_with_why():
    unsized = caps()
    for name in ("long-context", "oversize"):
        assert isinstance(BY_NAME[name].build(base(), unsized, REFERENCE), str), name
    for sized in (caps(max_model_len=4096), caps(kv_limits="4096 tokens", kv_pool_tokens=4096)):
        for name in ("long-context", "oversize"):
            assert isinstance(BY_NAME[name].build(base(), sized, REFERENCE), Traffic), (name, sized)
    assert isinstance(BY_NAME["structured"].build(base(), caps(structured_outputs=False), REFERENCE), str)
    assert isinstance(BY_NAME["structured"].build(base(), caps(flavour="llama.cpp", structured_outputs=True),
                                                  REFERENCE), Traffic)
    for name in ("priority", "adapters", "multimodal"):
        assert isinstance(BY_NAME[name].build(base(), caps(max_model_len=4096, structured_outputs=True),
                                              REFERENCE), str), name


def test_on_the_simulated_engine_structured_and_unsent_traffic_skip_with_their_reason(tmp_path):
    code, stressed = battery(tmp_path / "stress", "--phases", "structured,priority,adapters,multimodal")
    assert code == 0 and set(verdicts(stressed).values()) == {"skip"}
    assert stressed["capabilities"]["flavour"] == "simulated engine"
    assert stressed["capabilities"]["structured_outputs"] is False
    assert "simulated engine" in phase(stressed, "structured")["reasons"][0]
    assert all(p["run_dir"] is None and len(p["reasons"]) == 1 for p in stressed["phases"])


NEVER_CAUSED = """
name = "late"
[[phases]]
name = "malformed"
set = ['chaos.events = [{at_s = 60.0, action = "malformed"}]', "load.duration_s = 1"]
"""


def test_a_phase_whose_faults_on_purpose_were_never_caused_does_not_pass(tmp_path):
    """Its load (a soak already, not run again) ended before its fault was due: it sent no malformed body, and
    proved nothing of what it is for."""
    (tmp_path / "late.toml").write_text(NEVER_CAUSED)
    code, stressed = battery(tmp_path / "stress", "--profile", str(tmp_path / "late.toml"))
    [row] = stressed["phases"]
    assert code == 0 and row["verdict"] == "skip" and row["rules_fired"] == [], row
    assert "never caused" in row["reasons"][0] and row["run_dir"] is not None
    # its own run passed: the verdict is the battery's reading of it
    assert json.loads((Path(row["run_dir"]) / "report.json").read_text())["verdict"] == "pass"


LATE = """
name = "late"
[sim]  # as the stress profile's: a draft pool that holds cancel-storm's long answers
scenario = "draft-pool"
primary_blocks = 4096
draft_blocks = 3100
max_model_len = 16384
[[phases]]
name = "cancel-storm"
[[phases]]
name = "malformed"
set = ['chaos.events = [{at_s = 1.0, action = "malformed", kind = "invalid_utf8", count = 1}]']
"""


@pytest.mark.slow
def test_a_phase_whose_plan_was_served_before_its_faults_runs_again_past_them(tmp_path):
    """The simulated engine serves malformed's plan in well under a second: its bad body, due 1 s in, is sent when
    the phase runs again as a soak past it. cancel-storm's abort, due 1 s into a plan of long answers that takes it
    about 2 s, meets its plan: it runs once."""
    (tmp_path / "late.toml").write_text(LATE)
    code, stressed = battery(tmp_path / "stress", "--profile", str(tmp_path / "late.toml"))
    assert code == 0 and verdicts(stressed) == {"cancel-storm": "pass", "malformed": "pass"}
    for name, soak_s in (("cancel-storm", 0.0), ("malformed", 1.0 + AFTER_FAULTS_S)):
        run = json.loads((tmp_path / "stress" / name / "report.json").read_text())
        assert facts(run, "no_recovery")["faults"] == 1 and facts(run, "no_recovery")["not_caused"] == 0, name
        ran = load_profile(str(tmp_path / "stress" / name / "profile.toml"))
        assert ran.load.duration_s == soak_s, name
    assert len(stressed["notes"]) == 1 and stressed["notes"][0].startswith("malformed:")


# -- the battery's files -----------------------------------------------------------------------------------------


def rows(root: Path) -> list[PhaseRow]:
    def ran(name: str, verdict: PhaseVerdict, rules: list[str]) -> PhaseRow:
        return PhaseRow(name=name, verdict=verdict, reasons=["it died"] if rules else [], rules_fired=rules,
                        traffic="t", run_dir=str(root / name), requests=4, outcomes={"ok": 4}, ttft_p50_ms=12.5,
                        ttft_p95_ms=40.25, shrink=f"loadrepro shrink {root / name}" if rules else None)

    return [ran("steady", PhaseVerdict.PASS, []), ran("malformed", PhaseVerdict.FAIL, ["bad_input_crash"]),
            PhaseRow(name="oversize", verdict=PhaseVerdict.SKIP, reasons=["no context"], rules_fired=[],
                     traffic="t", run_dir=None)]


def test_the_battery_s_files_say_each_phase(tmp_path):
    root = tmp_path / "stress"
    root.mkdir()
    report = StressReport(label="b", target="t", fresh_engine=True, command="loadrepro stress", capabilities=None,
                          phases=rows(root), first_failure="malformed", wall_s=3.0, notes=[])
    write_stress(report, root)
    suite = ET.parse(root / "junit.xml").getroot()
    cases = {c.get("name"): c for c in suite.iter("testcase")}
    assert list(cases) == ["steady", "malformed", "oversize"]
    assert cases["malformed"].find("failure") is not None and cases["oversize"].find("skipped") is not None
    assert cases["steady"].find("failure") is None and cases["steady"].find("skipped") is None
    assert f"`loadrepro shrink {root / 'malformed'}`" in (root / "stress.md").read_text()
    html = (root / "stress.html").read_text()
    assert '<a href="steady/report.html">' in html and '<a href="malformed/report.html">' in html
    assert "oversize/report.html" not in html  # skipped: no run to link
    data = html.split("<script type=application/json id=stress-data>", 1)[1].split("</script>", 1)[0]
    assert json.loads(data) == {"names": ["steady", "malformed"], "ttft50": [12.5, 12.5], "ttft95": [40.25, 40.25],
                                "failed": [False, True]}


# -- a release matrix --------------------------------------------------------------------------------------------


@pytest.mark.slow
def test_a_matrix_gives_each_build_s_verdicts_and_first_failure(tmp_path):
    done = cli("stress", "--phases", "steady,malformed", "--engine-cmd", bad_input_engine("refuses"), "--label",
               "fixed", "--engine-cmd", bad_input_engine("exits_on_utf8"), "--label", "broken", "--out",
               str(tmp_path / "m"), "--quiet")
    assert done.returncode == 1, done.stderr[-2000:]
    matrix = json.loads((tmp_path / "m" / "matrix.json").read_text())
    builds = {b["label"]: b for b in matrix["builds"]}
    assert list(builds) == ["fixed", "broken"] and matrix["phases"] == ["steady", "malformed"]
    assert builds["fixed"]["verdicts"] == {"steady": "pass", "malformed": "pass"}
    assert builds["fixed"]["first_failure"] is None and builds["fixed"]["rules"] == {}
    assert builds["broken"]["verdicts"] == {"steady": "pass", "malformed": "fail"}
    assert builds["broken"]["first_failure"] == "malformed"
    assert "bad_input_crash" in builds["broken"]["rules"]["malformed"]
    assert stress_json(tmp_path / "m" / "broken")["first_failure"] == "malformed"
    cases = [c.get("name") for c in ET.parse(tmp_path / "m" / "junit.xml").getroot().iter("testcase")]
    assert cases == ["steady", "malformed"] * 2


def test_a_matrix_wants_a_label_for_each_engine_command(tmp_path):
    done = cli("stress", "--engine-cmd", "a {port}", "--engine-cmd", "b {port}", "--label", "only", "--out",
               str(tmp_path / "m"), "--quiet")
    assert done.returncode == 2 and "2 commands, 1 labels" in done.stderr, done.stderr
    assert not (tmp_path / "m").exists()


@pytest.mark.slow
def test_the_whole_battery_on_the_patched_simulated_engine_fails_no_phase(tmp_path: Path) -> None:
    """The must-not of every built-in phase at once, its shapes included: an engine whose admission holds fails
    none, each phase that ran passed, and only the phases it cannot take or loadrepro does not send skip."""
    code, stressed = battery(tmp_path / "stress", "--set", 'sim.policy="patched"')
    assert code == 0, stressed
    skipped = {p["name"] for p in stressed["phases"] if p["verdict"] == "skip"}
    assert skipped == {"structured", "priority", "adapters", "multimodal"}, verdicts(stressed)
    assert all(p["verdict"] == "pass" for p in stressed["phases"] if p["name"] not in skipped), verdicts(stressed)
    assert [p["name"] for p in stressed["phases"]] == [p.name for p in PHASES]
