"""Secrets out of everything loadrepro writes or prints: reports, comparisons, bundles, notes and the terminal.

Run directories and bundles are pasted into public bug reports, and engine commands and URLs carry credentials
(`HF_TOKEN=hf_...` before an engine command, `user:pass@` in a URL). One function, `scrub`, serves every writer.
"""

from __future__ import annotations

import os
import re
import string
from collections.abc import Callable
from dataclasses import dataclass

REDACTED = "<redacted>"
_SECRET_NAME = r"[A-Za-z0-9_]*(?:TOKEN(?!S)|SECRET|PASSWORD|PASSWD|API_?KEY|ACCESS_?KEY|PRIVATE_?KEY|AUTH" \
               r"|CREDENTIALS?)" \
               r"[A-Za-z0-9_]*"


@dataclass(frozen=True, slots=True)
class _Shape:
    """A secret's shape and what replaces it. `needles`: the text (lowered) holds one of them, or the shape cannot
    be in it and the text is not scanned for it: a report.json of 2,000 requests is 0.7 MB, and scanning it for every
    shape was a quarter of a second at the end of each run."""

    pattern: re.Pattern[str]
    replacement: str
    needles: tuple[str, ...] = ()  # empty: always scanned
    # A finer test of the text and its lowered copy, after the needles: false only where the shape cannot match.
    could_hold: Callable[[str, str], bool] | None = None

    def applies(self, text: str, lowered: str) -> bool:
        if self.needles and not any(n in lowered for n in self.needles):
            return False
        return self.could_hold is None or self.could_hold(text, lowered)


_SHAPES = (
    # NAME=value words whose name looks secret, as an engine command's environment words are written
    _Shape(re.compile(rf"(?i)\b({_SECRET_NAME})=(?:'[^']*'|\"[^\"]*\"|[^\s'\"]+)"), rf"\1={REDACTED}", ("=",),
           lambda text, _: _assigns_secret(text)),
    # user:password@ in URLs
    _Shape(re.compile(r"(?i)\b([a-z][a-z0-9+.\-]*://)[^/\s:@'\"]+(?::[^/\s@'\"]*)?@"), rf"\1{REDACTED}@", ("@",)),
    # api_key=-style query parameters
    _Shape(re.compile(r"(?i)([?&](?:api[_-]?key|key|token|access_token|secret|password|sig|signature)=)[^&\s'\"#]+"),
           rf"\1{REDACTED}", ("=",)),
    # "api_key": "...", token: ... in JSON or YAML-like text
    _Shape(re.compile(r"(?i)\b((?:api[_-]?key|token|secret|password)[\"']?\s*[:=]\s*[\"']?)[^\s\"',}]+"),
           rf"\1{REDACTED}", ("key", "token", "secret", "password"), lambda _, lowered: _names_secret_field(lowered)),
    _Shape(re.compile(r"(?i)\b(bearer\s+)[^\s\"',]+"), rf"\1{REDACTED}", ("bearer",)),
    # --api-key VALUE and the like on a command line
    _Shape(re.compile(r"(?i)(--(?:api[-_]?key|token|secret|password)(?:=|\s+))[^\s'\"]+"), rf"\1{REDACTED}", ("--",)),
    # token shapes: Hugging Face, OpenAI-style, GitHub, Slack
    _Shape(re.compile(r"\bhf_[A-Za-z0-9]{16,}"), REDACTED, ("hf_",)),
    _Shape(re.compile(r"\bsk-[A-Za-z0-9_\-]{8,}"), REDACTED, ("sk-",)),
    _Shape(re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}"), REDACTED, ("ghp_", "gho_", "ghu_", "ghs_", "ghr_")),
    _Shape(re.compile(r"\bxox[abprs]-[A-Za-z0-9\-]{10,}"), REDACTED, ("xox",)),
)
_MIN_ENV_SECRET = 8  # shorter values would match ordinary words


_SECRET_VARIABLE = re.compile(rf"(?i)^{_SECRET_NAME}$")


def _environment_secrets() -> list[str]:
    """Values of this process's environment variables whose names look secret (the API key among them); read at
    each call, since the environment may change while loadrepro runs."""
    return sorted((v for k, v in os.environ.items() if _SECRET_VARIABLE.match(k) and len(v) >= _MIN_ENV_SECRET),
                  key=len, reverse=True)


def _assigns_secret(text: str) -> bool:
    """Whether the word right before an "=" is a secret's name: only then can the first shape match, and testing that
    costs a fraction of trying the shape, which tries every way a word could hold one. Looked for from each "=" (a
    report holds few, a page's scripts a few thousand): trying every word of a 0.7 MB report.json took 27 ms."""
    i = text.find("=")
    while i != -1:
        start = i
        while start and text[start - 1] in _WORD_CHARS:
            start -= 1
        if start < i and _SECRET_VARIABLE.match(text[start:i]):
            return True
        i = text.find("=", i + 1)
    return False


_WORD_CHARS = frozenset(string.ascii_letters + string.digits + "_")
_FIELD_NAMES = ("api_key", "api-key", "apikey", "token", "secret", "password")
_SEPARATORS = frozenset("\"':=")


def _names_secret_field(lowered: str) -> bool:
    """Whether a secret field's name stands in the text as the fourth shape needs it: a word of its own, followed by
    a quote, a space, ":" or "=". A report.json names "tokens" thousands of times ("prompt_tokens"), and running
    the shape's pattern over it to find none of them took 27 ms."""
    for name in _FIELD_NAMES:
        i = lowered.find(name)
        while i != -1:
            before = lowered[i - 1] if i else " "
            after = lowered[i + len(name):i + len(name) + 1]
            if not (before.isalnum() or before == "_") and (after in _SEPARATORS or after.isspace()):
                return True
            i = lowered.find(name, i + 1)
    return False


def scrub(text: str) -> str:
    """`text` with every secret it carries replaced by <redacted>."""
    lowered = text.lower()  # a replacement adds no needle: lowered once
    for shape in _SHAPES:
        if shape.applies(text, lowered):
            text = shape.pattern.sub(shape.replacement, text)
    for value in _environment_secrets():
        text = text.replace(value, REDACTED)
    return text
