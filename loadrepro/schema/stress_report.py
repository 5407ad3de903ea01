"""A stress battery's report (stress.json): each phase's verdict against one target, why, and where its run is; and
a release matrix's (matrix.json): the same battery against several builds, phase by phase. Written by
loadrepro/stress/, drawn by report/stress.py."""

from __future__ import annotations

from enum import StrEnum

from pydantic import Field

from loadrepro.schema.report_kinds import Model

SCHEMA = "loadrepro.stress/1"
MATRIX_SCHEMA = "loadrepro.stress-matrix/1"


class PhaseVerdict(StrEnum):
    """A phase's verdict: its run's, or skip (it did not run, or its run passed without causing its faults on
    purpose, or the target refused all of it, and `reasons` say why)."""

    PASS = "pass"
    FAIL = "fail"
    SKIP = "skip"


class Capabilities(Model):
    """What the target was found to take, probed once before the battery: a phase whose traffic it cannot take is
    skipped, saying why."""

    flavour: str = Field(description="The engine the probe found: vLLM, llama.cpp, SGLang, simulated engine, "
                         "unknown.")
    evidence: list[str] = Field(description="What says it is that engine.")
    models: list[str] = Field(description="The models /v1/models lists.")
    max_model_len: int | None = Field(description="The tokens a request may have, as the target publishes them "
                                      "(null: it publishes none: the long-context and oversize phases skip).")
    kv_limits: str | None = Field(description="The KV pool it publishes, in words (null: none).")
    kv_pool_tokens: int | None = Field(description="The binding KV pool those limits give, in tokens (null: none "
                                       "published).")
    apis: list[str] = Field(description="The generation APIs that answered a one-token request.")
    structured_outputs: bool | None = Field(description="Whether it honours a JSON schema for an answer "
                                            "(response_format): true for llama.cpp and vLLM, false for the "
                                            "simulated engine, null when it cannot be told (unknown engine).")


class PhaseRow(Model):
    name: str = Field(description="The phase: steady, burst, microburst, zigzag, ramp-recovery, connection-churn, "
                      "cancel-storm, long-context, oversize, malformed, structured, agentic, priority, adapters, "
                      "multimodal, or a [[phases]] entry's name.")
    verdict: PhaseVerdict = Field(description="pass, fail (its run failed: a rule of the run's fired), or skip (it "
                                  "did not run; its run passed with its faults on purpose never caused, or with "
                                  "every request refused: it proved nothing of what it is for).")
    reasons: list[str] = Field(description="Why: the run's failing rules in words, or why it was skipped.")
    rules_fired: list[str] = Field(description="The rules that failed its run (empty: it passed or was skipped).")
    traffic: str = Field(description="What the phase sends, in a sentence.")
    run_dir: str | None = Field(description="Its run directory (report.json, report.html, the records; null: it "
                                "did not run).")
    requests: int = Field(0, description="Requests its run sent.")
    outcomes: dict[str, int] = Field({}, description="Its requests by outcome.")
    ttft_p50_ms: float | None = Field(None, description="Its time to first token, median (null: no first token).")
    ttft_p95_ms: float | None = Field(None, description="Its time to first token, 95th percentile.")
    wall_s: float = Field(0.0, description="Seconds the phase took, its engine's start included.")
    engine: str | None = Field(None, description="What became of the engine in it: died or wedged, and whether "
                               "the next phase met a fresh one (null: nothing to say).")
    shrink: str | None = Field(None, description="A failing phase: the command that shrinks its run to a minimal "
                               "reproducer.")


class StressReport(Model):
    schema_: str = Field(SCHEMA, alias="schema", description="The schema's name and version: loadrepro.stress/1.")
    label: str = Field(description="The build or target tested (a matrix's label, run, or the simulated engine's "
                       "policy).")
    target: str = Field(description="The target: its URL, the engine command that started it, or the simulated "
                        "engine.")
    fresh_engine: bool = Field(description="Every phase ran on an engine loadrepro started afresh for it (false: "
                               "the same target at a URL, which meets what the phases before left in it).")
    command: str = Field(description="The command that ran the battery.")
    capabilities: Capabilities | None = Field(description="What the target was found to take (null: it could not "
                                              "be probed).")
    phases: list[PhaseRow] = Field(description="Each phase, in the order run (gentle first).")
    first_failure: str | None = Field(description="The first phase that failed (null: none did).")
    wall_s: float = Field(description="Seconds the whole battery took.")
    interrupted: bool = Field(False, description="Stopped by Ctrl-C or SIGTERM: the phases after are skipped.")
    target_error: str | None = Field(None, description="The target could not be started or reached before the "
                                     "battery (every phase skipped): why. The battery then fails (exit 1).")
    notes: list[str] = Field(description="What the reader should know about how the battery ran.")

    @property
    def failed(self) -> bool:
        """A phase failed, or the target could not be started or reached at all."""
        return self.target_error is not None or any(p.verdict is PhaseVerdict.FAIL for p in self.phases)


class MatrixBuild(Model):
    label: str = Field(description="The build's label (--label, in the order of --engine-cmd).")
    engine_cmd: str = Field(description="The command that starts it.")
    stress_dir: str = Field(description="Its battery's directory (its stress.json, each phase's run).")
    verdicts: dict[str, PhaseVerdict] = Field(description="Each phase's verdict, by phase name.")
    rules: dict[str, list[str]] = Field(description="The rules that failed each failing phase, by phase name.")
    first_failure: str | None = Field(description="The first phase it failed (null: none).")
    target_error: str | None = Field(None, description="It could not be started or reached: why.")
    wall_s: float = Field(description="Seconds its battery took.")


class MatrixReport(Model):
    schema_: str = Field(MATRIX_SCHEMA, alias="schema", description="The schema's name and version: "
                         "loadrepro.stress-matrix/1.")
    command: str = Field(description="The command that ran the matrix.")
    phases: list[str] = Field(description="The phases, in the order run: the matrix's rows.")
    builds: list[MatrixBuild] = Field(description="Each build, in the order given: the matrix's columns.")
    wall_s: float = Field(description="Seconds the whole matrix took.")
    interrupted: bool = Field(False, description="Stopped by Ctrl-C or SIGTERM: the builds after are missing.")
