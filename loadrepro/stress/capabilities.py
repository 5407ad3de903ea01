"""What the target takes, found once before the battery by loadrepro's probe (GETs and a few salted one-token
requests, nothing a phase could benefit from): an engine loadrepro starts is started for the probe and stopped
after it, so every phase still meets a fresh one."""

from __future__ import annotations

from pathlib import Path

from loadrepro.load.probe import Probe, probe
from loadrepro.runs.progress import Say
from loadrepro.runs.run_options import RunOptions
from loadrepro.runs.target import started_target
from loadrepro.schema.stress_report import Capabilities

# Engines known to hold an answer to a JSON schema (response_format json_schema): vLLM's guided decoding and
# llama.cpp's grammar sampling. The simulated engine answers free text whatever is asked.
_STRUCTURED = {"vLLM": True, "llama.cpp": True, "SGLang": True, "simulated engine": False}


def capabilities(found: Probe) -> Capabilities:
    return Capabilities(flavour=found.flavour, evidence=list(found.evidence), models=list(found.models),
                        max_model_len=found.max_model_len, kv_limits=found.limits, kv_pool_tokens=found.kv_pool_tokens,
                        apis=sorted(name for name, check in found.apis.items() if check.answers),
                        structured_outputs=_STRUCTURED.get(found.flavour))


async def probed(options: RunOptions, probe_dir: Path, say: Say) -> Capabilities:
    """The target's capabilities: probed at its URL, or on the engine started for the probe alone (its log in
    `probe_dir`)."""
    watch = options.profile.watch
    probe_dir.mkdir(parents=True, exist_ok=True)
    async with started_target(options, probe_dir, lambda _: None) as target:
        found = await probe(target.url, watch.health_path or "/health", watch.metrics_path or "/metrics",
                            options.api_key)
    caps = capabilities(found)
    say(f"stress: the target is {caps.flavour}; {len(caps.models)} model(s) listed; context "
        + (f"{caps.max_model_len:,} tokens" if caps.max_model_len else "not published")
        + f"; structured outputs {_yes_no(caps.structured_outputs)}")
    return caps


def _yes_no(known: bool | None) -> str:
    return "unknown" if known is None else "yes" if known else "no"
