"""[target] reset_cache: the engine's prefix cache emptied before the load, so that a run (a trial, a sweep level,
the patched side of an A/B on the same engine) meets no cache an earlier one warmed: vLLM's and SGLang's reset
(load/references.py finds which it serves), else llama.cpp's slots erased one by one. Every replica beside the
target is reset the same way: a cache left warm on one of them would serve the run's prefixes there."""

from __future__ import annotations

import orjson

from loadrepro.errors import UsageError
from loadrepro.load.references import reset, reset_path
from loadrepro.load.transport import NoAnswer, Transport

NONE_OFFERED = ("[target] reset_cache: the target offers no prefix-cache reset (vLLM serves POST /reset_prefix_cache "
                "with VLLM_SERVER_DEV_MODE=1, SGLang POST /flush_cache, llama.cpp POST /slots/N?action=erase where "
                "its /slots is served); leave reset_cache off to run on the cache as it is")


async def reset_all(http: Transport, replicas: tuple[str, ...], api_key: str | None) -> str:
    """The report's note of how each cache was emptied; raises UsageError naming the first that offers no reset
    (before any load request)."""
    how = await reset_cache(http)
    if how is None:
        raise UsageError(NONE_OFFERED)
    done = []
    for url in replicas:
        async with Transport(url, api_key) as replica:
            emptied = await reset_cache(replica)
        if emptied is None:
            raise UsageError(f"the replica at {url}: {NONE_OFFERED}")
        done.append(f"{url}: {emptied}")
    return f"prefix cache: emptied before the load ({how}; [target] reset_cache)" + (
        f", and on {len(done)} replica{'s' if len(done) > 1 else ''} beside the target ({'; '.join(done)})"
        if done else "")


async def reset_cache(http: Transport) -> str | None:
    """How the prefix cache was emptied, in words; None when the target offers no way, or its way failed."""
    path = await reset_path(http)
    if path is not None:
        return f"POST {path}" if await reset(http, path) else None
    slots = await slot_ids(http)
    if not slots:
        return None
    for slot in slots:
        erased = await http.fetch("POST", f"/slots/{slot}?action=erase", None, timeout_s=30.0)
        if isinstance(erased, NoAnswer) or erased.status != 200:
            return None
    return f"POST /slots/N?action=erase for each of its {len(slots)} slots"


async def slot_ids(http: Transport, timeout_s: float = 30.0) -> list[int]:
    """llama.cpp's slot ids, from GET /slots ([] when it is not served, says something else, or not in time)."""
    answered = await http.fetch("GET", "/slots", None, timeout_s=timeout_s)
    if isinstance(answered, NoAnswer) or answered.status != 200:
        return []
    try:
        listed = orjson.loads(answered.body)
    except orjson.JSONDecodeError:
        return []
    if not isinstance(listed, list):
        return []
    return [s["id"] for s in listed if isinstance(s, dict) and isinstance(s.get("id"), int)]
