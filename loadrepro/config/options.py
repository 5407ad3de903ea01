"""What a run, an A/B comparison and a shrink are given, declared once: each field's type, default, bounds and
description. The command line's flags are generated from these models (flags.with_model_options) and the Python
API's keywords are held to them (tests/test_options.py), so neither can drift from the other."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal, Self

from pydantic import BaseModel, ConfigDict, Field, ValidationError, model_validator

from loadrepro.config.defaults import API_KEY_ENV, ENGINE_START_TIMEOUT_S, SHRINK_MAX_TRIALS, SHRINK_TIME_BUDGET_S
from loadrepro.config.profile import Profile
from loadrepro.errors import UsageError

# A field's command-line spelling where it differs from the field's name, and the option's metavar: read by
# flags.model_options.
Overrides = Annotated[list[str] | None, Field(description="Override a profile key: KEY=VALUE (TOML).",
                                              json_schema_extra={"flag": "set"})]
ModelName = Annotated[str | None, Field(description="Model name; default: the profile's, else the first listed.")]
ApiKeyEnv = Annotated[str, Field(description="Environment variable holding the API key.")]


class Arguments(BaseModel):
    """Arguments as given: unknown names and values out of bounds are usage errors."""

    model_config = ConfigDict(frozen=True, extra="forbid", arbitrary_types_allowed=True)

    @classmethod
    def of(cls, given: Mapping[str, Any]) -> Self:
        """The model of the arguments of a call (its `locals()`) that are this model's fields."""
        try:
            return cls.model_validate({name: value for name, value in given.items() if name in cls.model_fields})
        except ValidationError as exc:
            raise UsageError("; ".join(_problem(e) for e in exc.errors())) from None


def _problem(error: Any) -> str:
    where = ".".join(str(part) for part in error.get("loc", ()))
    return f"{where}: {error['msg']}" if where else str(error["msg"])


def url_list(given: str | list[str] | None) -> list[str]:
    """A target's URLs as given once or more (a repeatable option): the first the target, the others replicas."""
    return [given] if isinstance(given, str) else list(given or [])


class LoadArguments(Arguments):
    """What `run` and `ab` share: the workload, how it is sent, how often."""

    profile: str | Path | Profile = Field("quickstart", description="Built-in profile name or path to a profile TOML.")
    overrides: Overrides = None
    model: ModelName = None
    out: Path | None = Field(None, description="Run directory (created if needed).")
    api_key_env: ApiKeyEnv = API_KEY_ENV
    engine_start_timeout_s: float = Field(ENGINE_START_TIMEOUT_S, gt=0, description=(
        "Seconds to wait for the engine's /health."), json_schema_extra={"flag": "engine-start-timeout"})
    size_to_overrun: float | None = Field(None, gt=0, description=(
        "Size the workload to F x the target's binding KV pool (conversations and prefix length)."))
    fit: bool = Field(False, description=(
        "Scale the profile's prefixes, later turns and max_tokens (and turns, when need be) so its longest request "
        "fits what the target publishes it takes (its longest sequence, a slot's context, its KV pool); what "
        "changed is said and noted in the report."), json_schema_extra={"flag": "fit"})
    workers: int | None = Field(None, ge=1, description=(
        "Send the load from N processes on this machine (conversations split between them); with --ray, N Ray "
        "actors (default 2)."))
    ray: str | None = Field(None, description=(
        "Run the workers as Ray actors spread over a cluster's nodes: the cluster at ADDRESS, or a local Ray "
        "instance when none is given (pip install 'loadrepro[ray]')."), json_schema_extra={"metavar": "[ADDRESS]"})
    verify: bool = Field(False, description=(
        "Check a sample of answers against the same requests sent alone after the load (shorthand for --set "
        "verify.outputs='\"sample\"' when the profile checks none)."), json_schema_extra={"flag": "verify"})
    trials: int = Field(1, ge=1, description=(
        "Run it N times, each on a fresh engine, and report how often it failed (with a 95% interval)."))
    vary_seed: bool = Field(False, description="With --trials: trial i gets the seed + i - 1.")
    serve_metrics: int | None = Field(None, ge=0, le=65535, description=(
        "Serve loadrepro's own Prometheus metrics on 127.0.0.1:PORT/metrics while it runs (0: a free port, said "
        "when it starts): requests by outcome, in flight, TTFT/ITL/e2e histograms, /health, the engine's KV usage, "
        "rules fired so far, the run's phase."), json_schema_extra={"metavar": "PORT"})
    replicas: int = Field(1, ge=1, description=(
        "Start the engine (an engine command, else the simulated engine) N times, each on a port of its own, as "
        "replicas of one target: the load spread over them ([target] routing), each judged on its own; in `ab`, "
        "each side's engine N times."), json_schema_extra={"metavar": "N"})
    # The command line's alone: a program chose its target deliberately and shows no progress display.
    target_is_isolated: bool = Field(False, description="Confirm a non-loopback target is an isolated test engine.")
    quiet: bool = Field(False, description="No progress display (for CI).")
    png: bool = Field(False, description=(
        "Draw the pictures as PNG files too (timeline.png, latency.png; a sweep's sweep.png), for report.md and "
        "bug trackers that show images; report.html draws its charts in the browser either way."))


class RunArguments(LoadArguments):
    """`loadrepro run` and `loadrepro.run`."""

    base_url: str | list[str] | None = Field(None, description=(
        "OpenAI-compatible target; without it the embedded simulated engine is started. Given more than once: "
        "replicas of one model, the load spread over them ([target] routing), each judged on its own."),
        json_schema_extra={"metavar": "URL"})
    engine_cmd: str | None = Field(None, description=(
        "Start this engine ({port} and {host} are filled in) and keep its log."))
    label: str | None = Field(None, description="Names the run (default: the sim policy, or 'run').")
    tokenizer: Path | None = Field(None, description=(
        "Count lengths in this local Hugging Face tokenizer's tokens (tokenizer.json or its folder) instead of "
        "asking the target; with --dry-run, plan offline."))

    @property
    def base_urls(self) -> list[str]:
        """The target's URLs: the first is the target, the others its replicas."""
        return url_list(self.base_url)

    @model_validator(mode="after")
    def _one_target(self) -> Self:
        if self.base_url and self.engine_cmd:
            raise ValueError("give a base URL or an engine command, not both")
        if self.base_url and self.replicas > 1:
            raise ValueError("--replicas starts the engine N times; replicas already running are given by URL, "
                             "one --base-url each")
        return self


class AbArguments(LoadArguments):
    """`loadrepro ab` and `loadrepro.ab`: each side a URL or a command, or neither (the simulated engine's stock
    and patched policies)."""

    stock_url: str | list[str] | None = Field(None, description=(
        "The stock engine's URL. Given more than once: its replicas, as --base-url in `run`."),
        json_schema_extra={"metavar": "URL"})
    patched_url: str | list[str] | None = Field(None, description=(
        "The patched engine's URL. Given more than once: its replicas, as --base-url in `run`."),
        json_schema_extra={"metavar": "URL"})
    stock_cmd: str | None = Field(None, description="Start the stock engine with this command.")
    patched_cmd: str | None = Field(None, description="Start the patched engine with this command.")
    alpha: float = Field(0.05, gt=0, lt=1, description="With --trials: the p below which a fix is shown.")
    out: Path | None = Field(None, description="Directory for both runs and the comparison.")
    engine_start_timeout_s: float = Field(ENGINE_START_TIMEOUT_S, gt=0, description=(
        "Seconds to wait for each engine's /health."), json_schema_extra={"flag": "engine-start-timeout"})
    trials: int = Field(1, ge=1, description=(
        "Up to N trials a side, alternately, stopping once decided: a fix is confirmed only when patched failed in "
        "none and stock significantly more often (one-sided Fisher exact test)."))
    target_is_isolated: bool = Field(False, description="Confirm non-loopback targets are isolated test engines.")

    @model_validator(mode="after")
    def _both_sides(self) -> Self:
        sides = ((self.stock_url, self.stock_cmd), (self.patched_url, self.patched_cmd))
        if any(url and cmd for url, cmd in sides):
            raise ValueError("give a URL or a command for each side, not both")
        if any(url or cmd for url, cmd in sides) and not all(url or cmd for url, cmd in sides):
            raise ValueError("give both sides (a stock URL or command and a patched URL or command), or neither (the "
                             "simulated engine's policies)")
        if self.replicas > 1 and (self.stock_url or self.patched_url):
            raise ValueError("--replicas starts each side's engine N times; replicas already running are given by "
                             "URL, one --stock-url/--patched-url each")
        return self


class SweepArguments(RunArguments):
    """`loadrepro sweep`: one run per load level, on a target, an engine command, or stock and patched engines."""

    over: Literal["concurrency", "rate"] = Field("concurrency", description=(
        "The load varied: [load] concurrency (a closed loop), or rate (Poisson arrivals per second)."))
    values: str | None = Field(None, description="The levels, comma-separated (1,2,4,8); else --from/--to.")
    ladder_from: float | None = Field(None, gt=0, description="The lowest level of a geometric ladder.",
                                      json_schema_extra={"flag": "from"})
    ladder_to: float | None = Field(None, gt=0, description="Its highest level.", json_schema_extra={"flag": "to"})
    factor: float = Field(2.0, gt=1, description="Each level of the ladder this many times the one before.")
    stop_at_failure: bool = Field(False, description=(
        "Stop the ladder at the first level that fails (then bisect between it and the last that passed)."))
    bisect: bool = Field(True, description=(
        "Bisect between the last level that passed and the first that failed, to the breaking point (whole "
        "requests in flight; 10% of a rate)."))
    base_url: str | list[str] | None = Field(None, description=(
        "The target, the same at every level (what one level left in it the next meets); without it and without "
        "an engine command, a fresh simulated engine per level. Given more than once: replicas."),
        json_schema_extra={"metavar": "URL"})
    engine_cmd: str | None = Field(None, description=(
        "Start this engine ({port}, {host}) afresh for every level."))
    stock_cmd: str | None = Field(None, description="With --patched-cmd: sweep a stock and a patched engine alike.")
    patched_cmd: str | None = Field(None, description="The patched engine's command.")
    out: Path | None = Field(None, description="The sweep directory: sweep.json/md/html and each level's run.")
    trials: int = Field(1, ge=1, description=(
        "Run each level N times on a fresh engine; a level fails when any of its trials did."))

    @model_validator(mode="after")
    def _one_ladder(self) -> Self:
        given = [x for x in (self.base_url, self.engine_cmd, self.stock_cmd or self.patched_cmd) if x]
        if len(given) > 1:
            raise ValueError("give a base URL, an engine command, or stock and patched commands: one of them")
        if bool(self.stock_cmd) != bool(self.patched_cmd):
            raise ValueError("give both --stock-cmd and --patched-cmd, or neither")
        if (self.values is None) == (self.ladder_from is None or self.ladder_to is None):
            raise ValueError("give the levels as --values 1,2,4 or as --from and --to, not both and not neither")
        return self


class StressArguments(LoadArguments):
    """`loadrepro stress`: the battery against a target, an engine command, or several (a release matrix)."""

    profile: str | Path | Profile = Field("stress", description=(
        "The base profile every phase is made from (its [sim], [watch], [verdict] and timeouts kept, its traffic "
        "the phase's own); one with [[phases]] gives the battery's phases instead of the built-in ones."))
    phases: str | None = Field(None, description=(
        "The phases to run, comma-separated, in the battery's order (default: every one): steady, burst, "
        "microburst, zigzag, ramp-recovery, connection-churn, cancel-storm, long-context, oversize, malformed, "
        "structured, agentic, priority, adapters, multimodal."))
    base_url: str | list[str] | None = Field(None, description=(
        "OpenAI-compatible target, the same for every phase (what one phase left in it the next meets); without "
        "it the embedded simulated engine is started afresh for each. Given more than once: replicas."),
        json_schema_extra={"metavar": "URL"})
    engine_cmd: str | list[str] | None = Field(None, description=(
        "Start this engine ({port} and {host} are filled in) afresh for every phase. Given more than once, with a "
        "--label each: a release matrix, the battery run against each build in turn."))
    label: str | list[str] | None = Field(None, description=(
        "Names the battery (default: the sim policy, or 'run'); with several --engine-cmd, one each, in order "
        "(the matrix's columns)."))
    out: Path | None = Field(None, description="The stress directory: stress.json/md/html, junit.xml, each phase's "
                             "run (a matrix: a directory per build, and matrix.json/md/html).")

    @property
    def engine_cmds(self) -> list[str]:
        return url_list(self.engine_cmd)

    @property
    def labels(self) -> list[str]:
        return url_list(self.label)

    @model_validator(mode="after")
    def _builds(self) -> Self:
        cmds, labels = self.engine_cmds, self.labels
        if len(cmds) > 1 and len(labels) != len(cmds):
            raise ValueError(f"a release matrix wants a --label for each --engine-cmd, in the same order: "
                             f"{len(cmds)} commands, {len(labels)} labels")
        if len(cmds) <= 1 and len(labels) > 1:
            raise ValueError("several --label name the builds of a matrix: give an --engine-cmd for each")
        if len(set(labels)) != len(labels) or any(not x or "/" in x or x.startswith(".") for x in labels):
            raise ValueError(f"labels name each build's directory: distinct, without '/', not starting with '.': "
                             f"{labels}")
        if self.trials > 1:
            raise ValueError("--trials repeats one run; a stress battery runs each phase once")
        if self.base_url and cmds:
            raise ValueError("give a base URL or an engine command, not both")
        return self

    def run_arguments(self) -> RunArguments:
        """The first target's arguments as a run's: the URL, or the first engine command."""
        return RunArguments.of(self.model_dump() | {
            "engine_cmd": self.engine_cmds[0] if self.engine_cmds else None,
            "label": self.labels[0] if len(self.labels) == 1 else None})


class ShrinkArguments(Arguments):
    """`loadrepro shrink` and `loadrepro.shrink_failure`: a failing run directory or a profile."""

    run_dir: Path | None = Field(None, description="A failing run directory (its profile and engine).",
                                 json_schema_extra={"argument": True})
    profile: str | Path | Profile | None = Field(None, description="Shrink this profile instead of a run's.")
    overrides: Overrides = None
    engine_cmd: str | None = Field(None, description=(
        "Start this engine for every trial ({port}, {host}); default: the run's, else the simulated engine."))
    predicate: str | None = Field(None, description="Keep this signature (a name) instead of the run's own failure.")
    max_trials: int = Field(SHRINK_MAX_TRIALS, ge=1, description="Most trials to run.")
    time_budget_s: float = Field(SHRINK_TIME_BUDGET_S, gt=0, description=(
        "Seconds the whole shrink may take: a trial still running then (its engine starting included) is cut "
        "short, and the smallest failing workload found so far is written."),
        json_schema_extra={"flag": "time-budget"})
    engine_start_timeout_s: float = Field(ENGINE_START_TIMEOUT_S, gt=0, description=(
        "Seconds each trial's engine may take to answer /health 200; one that does not stops the shrink, its "
        "log's last lines said."), json_schema_extra={"flag": "engine-start-timeout"})
    confirm: int | str = Field(0, description=(
        "N: run the minimal workload N more times; K/N: keep a candidate only when at least K of up to N runs of it "
        "fail (a flaky failure)."))
    model: ModelName = None
    out: Path | None = Field(None, description="The shrink directory (new or empty).")

    @model_validator(mode="after")
    def _one_source(self) -> Self:
        if (self.run_dir is None) == (self.profile is None):
            raise ValueError("give a failing run directory or a profile, not both")
        return self
