"""The simulated engine's tokenizer and chat template: deterministic, fast, and stable across versions.

A token is a word, one punctuation character, or a role marker such as `<|user|>`. Token ids are a CRC of the
token's text, so the same text always gives the same ids without a vocabulary file.
"""

from __future__ import annotations

import re
import zlib
from collections.abc import Iterable, Mapping, Sequence

VOCAB_SIZE = 32000
_TOKEN = re.compile(r"<\|[a-z_]+\|>|\w+|[^\w\s]")

# Words the simulated model "writes" (sim/replies.py): plain words, each once, so the output re-tokenizes to the
# same count and a runner-up is always another word.
OUTPUT_WORDS = tuple(dict.fromkeys((
    "the request was processed and the cache kept the shared prefix while the scheduler waited for free "
    "blocks before it admitted more work from the queue of pending sequences"
).split()))


def tokenize(text: str) -> list[str]:
    return _TOKEN.findall(text)


def token_ids(tokens: Iterable[str]) -> list[int]:
    return [zlib.crc32(t.encode()) % VOCAB_SIZE for t in tokens]


def message_text(content: object) -> str:
    """The text of an OpenAI message `content`: a string, or a list of parts of which the text parts count."""
    if content is None:
        return ""
    if isinstance(content, str):
        return content
    parts = []
    for part in content if isinstance(content, list) else ():
        if isinstance(part, Mapping) and part.get("type") == "text":
            parts.append(str(part.get("text", "")))
    return "\n".join(parts)


def render_chat(messages: Sequence[Mapping[str, object]], add_generation_prompt: bool = True) -> str:
    """The prompt text a chat request is turned into; /tokenize and usage both count this text."""
    rendered = [f"<|{m.get('role', 'user')}|>\n{message_text(m.get('content'))}\n" for m in messages]
    if add_generation_prompt:
        rendered.append("<|assistant|>\n")
    return "".join(rendered)


def natural_length(tokens: Sequence[str], mean: int) -> int:
    """How long the model's answer would be without ignore_eos: a stable function of the prompt, 1..2*mean."""
    tail = "\x1f".join(tokens[-64:]).encode()
    return 1 + zlib.crc32(tail) % (2 * mean)
