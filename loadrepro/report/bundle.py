"""The reproducer bundle: one zip a maintainer can run without installing loadrepro.

It holds a README for the engine's maintainer (report/bundle_readme.py), the report, the resolved profile, the exact
payloads (`workload.jsonl.gz`), the request records, the engine log's last lines and its excerpt before the first
fatal line, and `replay.py` (standard library only) with the `replay.json` settings it reads. Secrets are scrubbed
from every text file; `redact_host` also replaces the target's host and other machines' names and addresses, never a
loopback one.
"""

from __future__ import annotations

import gzip
import json
import re
import shutil
import time
import zipfile
from importlib import resources
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

from loadrepro.errors import UsageError
from loadrepro.judge.diagnose import log_digest
from loadrepro.judge.signatures import CATALOG, SignatureClass
from loadrepro.records import read_jsonl
from loadrepro.records.redact import scrub
from loadrepro.report.bundle_readme import ENGINE_LOG_TAIL, default_title, readme
from loadrepro.report.json import read_report
from loadrepro.report.timeline import timeline_from_run_dir
from loadrepro.report.write import PICTURES, png_files
from loadrepro.schema.run_report import RunReport
from loadrepro.workload.export import (
    BUNDLED_WORKLOAD_FILE,
    open_workload,
    open_workload_bytes,
    workload_file,
)

COPIED = ("report.md", "report.json", "profile.toml", "requests.jsonl", "report.html")
_URL_HOST = re.compile(r"(https?://)(\[[0-9a-fA-F:]+\]|[^/\s:\"'`]+)")
_OCTET = r"(?:25[0-5]|2[0-4]\d|1\d\d|[1-9]?\d)"
# An address: four octets, no leading zeros, not inside a longer dotted run, and not llama.cpp's log timestamp
# (`0.01.446.907 W decode: ...`, minutes.seconds.ms.us before the level letter), which has an address's shape.
_IPV4 = re.compile(rf"(?<!\d\.)(?<!\d){_OCTET}(?:\.{_OCTET}){{3}}(?!\.?\d)(?! [DIWE] )")
# Addresses that name no machine: a bind to them, or a URL on them, says nothing of where the engine ran, and a
# maintainer needs them as they were (`--host 127.0.0.1` is not `--host 0.0.0.0`); and the README's placeholders.
_LOCAL = re.compile(r"^(?:127\.\d+\.\d+\.\d+|0\.0\.0\.0|localhost|\[::1?\]|::1?|HOST|ENGINE_HOST)$")
REDACTED_HOST = "ENGINE_HOST"


def scrub_bundle_text(text: str, redact_host: bool, hosts: tuple[str, ...] = ()) -> str:
    """Secrets scrubbed; with `redact_host`, the hosts of URLs, IPv4 addresses and the given `hosts` (the target's)
    replaced by ENGINE_HOST wherever they appear, loopback and unspecified addresses kept as they were."""
    text = scrub(text)
    if redact_host:
        text = _URL_HOST.sub(lambda m: m.group(0) if _LOCAL.match(m.group(2)) else m.group(1) + REDACTED_HOST, text)
        text = _IPV4.sub(lambda m: m.group(0) if _LOCAL.match(m.group(0)) else REDACTED_HOST, text)
        for host in hosts:
            if host and not _LOCAL.match(host):
                text = re.sub(rf"(?<![\w.-]){re.escape(host)}(?![\w-])", REDACTED_HOST, text)
    return text


def _replay_settings(report: RunReport) -> dict[str, Any]:
    load, watch, verify = report.profile["load"], report.profile["watch"], report.profile.get("verify", {})
    fatal = [s.pattern.pattern for s in CATALOG if s.klass is SignatureClass.FATAL]
    fatal += [s["pattern"] for s in report.profile.get("signatures", []) if s.get("class") == "F"]
    return {"api": report.profile["api"], "model": report.target.model, "concurrency": load["concurrency"],
            "request_timeout_s": load["request_timeout_s"], "stall_timeout_s": load["stall_timeout_s"],
            "health_path": watch["health_path"] or "/health", "fatal_patterns": fatal,
            "compare_tokens": verify.get("compare_tokens", 64), "min_margin": verify.get("min_margin", 1.0)}


def _answer(record: dict[str, Any] | None) -> dict[str, Any] | None:
    answer = (record or {}).get("answer")
    if not answer:
        return None
    return {k: answer[k] for k in ("text", "tokens", "logprobs", "runner_up", "runner_token")}


def wrong_answers(run_dir: Path, report: RunReport) -> list[dict[str, Any]]:
    """Each wrong answer the report names, with its request body and both answers (under load and alone) with
    their logprobs: what a maintainer needs to see it, and what replay.py --check-answers checks again."""
    if report.outputs is None or not report.outputs.worst:
        return []
    wanted = {w.request: w for w in report.outputs.worst}
    loads = _records(run_dir / "requests.jsonl", wanted)
    alone = _records(run_dir / "references.jsonl", wanted)
    bodies = {(row["conversation"], row["turn"]): row["body"] for row in _workload_rows(run_dir)}
    return [{"request": w.request, "conversation": w.conversation, "turn": w.turn, "kind": w.kind,
             "position": w.position, "margin": w.margin, "cached_tokens": w.cached_tokens, "detail": w.detail,
             "body": bodies.get((w.conversation, w.turn)), "under_load": _answer(loads.get(w.request)),
             "alone": _answer(alone.get(w.request))} for w in wanted.values()]


def _records(path: Path, wanted: dict[int, Any]) -> dict[int, dict[str, Any]]:
    if not path.exists():
        return {}
    return {row["id"]: row for row in read_jsonl(path) if row.get("id") in wanted}


def _workload_rows(run_dir: Path) -> list[dict[str, Any]]:
    path = workload_file(run_dir)
    if path is None:
        return []
    with open_workload(path) as lines:
        return [row for row in map(json.loads, lines) if row.get("type") == "request"]


def make_bundle(run_dir: Path, out: Path | None = None, redact_host: bool = False, title: str | None = None,
                engine_template: str | None = None) -> Path:
    """The run's zip; `title` heads its README (default: the engine and what failed, from the run), which shows
    `engine_template` (the engine command as the user gave it, {port} unfilled: run.json's, which the caller reads)
    rather than the command filled in with the run's own port, when given."""
    if not (run_dir / "report.json").exists():
        raise UsageError(f"{run_dir} is not a run directory (no report.json)")
    report = read_report(run_dir)
    name = f"loadrepro-{run_dir.resolve().name}"
    out = out or run_dir.resolve().parent / f"{name}.zip"
    log = run_dir / "engine.log"
    digest = log_digest(log, ENGINE_LOG_TAIL) if log.exists() else None
    readme_text = readme(report, title or default_title(report), digest, engine_template)
    texts = {"README.md": readme_text, "replay.json": json.dumps(_replay_settings(report), indent=2)}
    if wrong := wrong_answers(run_dir, report):
        texts["answers.json"] = json.dumps(wrong, indent=1, ensure_ascii=False)
    for copied in COPIED:
        if (run_dir / copied).exists():
            texts[copied] = (run_dir / copied).read_text(encoding="utf-8", errors="replace")
    if report.log_excerpt:
        texts["engine-log-excerpt.txt"] = "\n".join(report.log_excerpt) + "\n"
    if digest is not None:
        texts["engine-log-tail.txt"] = "\n".join(digest.tail) + "\n"
    hosts = (urlsplit(report.target.base_url).hostname or "",)
    with zipfile.ZipFile(out, "w", compression=zipfile.ZIP_DEFLATED) as bundle:
        for file_name, text in texts.items():
            bundle.writestr(f"{name}/{file_name}", scrub_bundle_text(text, redact_host, hosts))
        # loadrepro's own program, as it ships: it holds no secret, and scrubbing would rewrite its code
        for program in ("replay.py", "check_answers.py"):
            code = resources.files("loadrepro.standalone").joinpath(program).read_text(encoding="utf-8")
            bundle.writestr(f"{name}/{program}", code)
        for picture, png in _pictures(run_dir, report).items():
            bundle.writestr(f"{name}/{picture}", png, compress_type=zipfile.ZIP_STORED)
        workload = workload_file(run_dir)
        if workload is not None:
            _ship_gzipped(workload, bundle, f"{name}/{BUNDLED_WORKLOAD_FILE}")
    return out


def _ship_gzipped(workload: Path, bundle: zipfile.ZipFile, name: str) -> None:
    """The run's workload file, gzipped (replay.py reads it with the standard library): an older run's gzip as it
    is, else its zstd or plain text gzipped as it streams in."""
    if workload.suffix == ".gz":
        bundle.write(workload, name, compress_type=zipfile.ZIP_STORED)
        return
    entry = zipfile.ZipInfo(name, date_time=time.localtime()[:6])
    entry.compress_type = zipfile.ZIP_STORED
    with open_workload_bytes(workload) as source, bundle.open(entry, "w", force_zip64=True) as stored, \
            gzip.GzipFile(fileobj=stored, mode="wb", compresslevel=1) as out:
        shutil.copyfileobj(source, out, 1 << 20)


def _pictures(run_dir: Path, report: RunReport) -> dict[str, bytes]:
    """The run's PNGs for bug trackers that show images: those it drew (--png), else drawn now from its files."""
    if all((run_dir / name).exists() for name in PICTURES):
        return {name: (run_dir / name).read_bytes() for name in PICTURES}
    timeline = timeline_from_run_dir(run_dir, report)
    return {} if timeline is None else png_files(timeline)
