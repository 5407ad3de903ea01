"""Secrets out of everything loadrepro writes or prints: reports, comparisons, bundles, notes and the terminal.

Run directories and bundles are pasted into public bug reports, and engine commands and URLs carry credentials
(`HF_TOKEN=hf_...` before an engine command, `user:pass@` in a URL). One function, `scrub`, serves every writer.
"""

from __future__ import annotations

import os
import re

REDACTED = "<redacted>"
_SECRET_NAME = r"[A-Za-z0-9_]*(?:TOKEN(?!S)|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH" \
               r"|CREDENTIALS?)" \
               r"[A-Za-z0-9_]*"
_PATTERNS = (
    # NAME=value words whose name looks secret, as an engine command's environment words are written
    (re.compile(rf"(?i)\b({_SECRET_NAME})=(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)"), rf"\1={REDACTED}"),
    # user:password@ in URLs
    (re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@'\"]+(?::[^/\s@'\"]*)?@"), rf"\1{REDACTED}@"),
    # api_key=-style query parameters
    (re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|secret|password|sig|signature)=)[^&\s'\"#]+"),
     rf"\1{REDACTED}"),
    # "api_key": "...", token: ... in JSON or YAML-like text
    (re.compile(r"(?i)\b((?:api[_-]?key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"), rf"\1{REDACTED}"),
    (re.compile(r"(?i)\b(bearer\s+)[^\s\"',]+"), rf"\1{REDACTED}"),
    # --api-key VALUE and the like on a command line
    (re.compile(r"(?i)(--(?:api[-_]?key|token|secret|password)(?:=|\s+))[^\s'\"]+"), rf"\1{REDACTED}"),
    # token shapes: Hugging Face, OpenAI-style, GitHub, Slack
    (re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED),
    (re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), REDACTED),
    (re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED),
    (re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), REDACTED),
)
_MIN_ENV_SECRET = 8  # shorter values would match ordinary words


_SECRET_VARIABLE = re.compile(rf"(?i)^{_SECRET_NAME}$")


def _environment_secrets() -> list[str]:
    """Values of this process's environment variables whose names look secret (the API key among them); read at
    each call, since the environment may change while loadrepro runs."""
    return sorted((v for k, v in os.environ.items() if _SECRET_VARIABLE.match(k) and len(v) >= _MIN_ENV_SECRET),
                  key=len, reverse=True)


def scrub(text: str) -> str:
    """`text` with every secret it carries replaced by <redacted>."""
    for pattern, replacement in _PATTERNS:
        text = pattern.sub(replacement, text)
    for value in _environment_secrets():
        text = text.replace(value, REDACTED)
    return text
