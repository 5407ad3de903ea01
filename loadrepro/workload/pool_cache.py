"""The record pool's texts kept on disk between runs: faker takes ~0.4 s of CPU to invent a pool of 2,048
records, a run's largest fixed cost after its imports, and the texts depend only on the seed, the size, faker's
version and the code that invents them, which together name the file. The cache only saves time: a missing,
unreadable or unwritable cache means the pool is invented again, never an error.

Where: $LOADREPRO_CACHE, else $XDG_CACHE_HOME/loadrepro, else ~/.cache/loadrepro.
"""

from __future__ import annotations

import hashlib
import os
from collections.abc import Callable
from pathlib import Path

import orjson

_SCHEMA = "loadrepro.pool/1"


def cache_dir() -> Path:
    if os.environ.get("LOADREPRO_CACHE"):
        return Path(os.environ["LOADREPRO_CACHE"])
    base = os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache"
    return Path(base) / "loadrepro"


def pool_texts(seed: int, size: int, faker_version: str, source: Path,
               invent: Callable[[], tuple[str, ...]]) -> tuple[str, ...]:
    """The pool's texts from the cache, or from `invent` (then kept for the next run). `source` is the module
    that invents them: any change to it names another file."""
    code = hashlib.sha256(source.read_bytes()).hexdigest()[:16]
    path = cache_dir() / f"pool-{seed}-{size}-faker{faker_version}-{code}.json"
    try:
        data = orjson.loads(path.read_bytes())
        if data["schema"] == _SCHEMA and len(data["texts"]) == size:
            return tuple(data["texts"])
    except (OSError, ValueError, KeyError, TypeError):
        pass
    texts = invent()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        aside = path.with_name(f".{path.name}.{os.getpid()}.partial")
        aside.write_bytes(orjson.dumps({"schema": _SCHEMA, "texts": texts}))
        os.replace(aside, path)  # whole or not at all, even with runs starting side by side
    except OSError:
        pass
    return texts
